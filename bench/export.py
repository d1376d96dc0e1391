"""The simulator's telemetry written as an SRE's stack writes it: OTLP, Jaeger, Zipkin, Tempo, Prometheus, Loki, ECS.

Canonical frames in, foreign documents out, written from the formats' specifications and not from
``preprocess.formats`` (the readers), so that a misreading shared by both would show as a difference.
The format tests import these back and compare frames and indexes; ``scripts/eval_formats.py`` runs
a simulated day through them as a user would, with a description ``rca system infer`` drafts.
"""
from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from preprocess import layout
from preprocess.readers import read_day
from preprocess.schema import APM_KPIS, SPAN_PEER_TAG_KEYS, language_key
from rca.system import bundled_system
from simulate.simulator import SimulationOptions, simulate

_KIND_NUMBER = {None: 0, "internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
_INFRA_LABELS = ("instance", "device", "mountpoint", "namespace", "type", "sql_type")


def _ns(column: str) -> pl.Expr:
    return pl.col(column).dt.epoch("us") * 1000


def _str_attr(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def _resource(**attrs: str | None) -> dict[str, Any]:
    return {"attributes": [_str_attr(k, v) for k, v in attrs.items() if v is not None]}


def _language(row: dict[str, Any]) -> dict[str, str]:
    """The language a span's frame row states (``sdk_language``, where the frame has it), under the key that
    stated it: a resource attribute / process tag, as OpenTelemetry SDKs and Jaeger clients write it."""
    language = row.get("sdk_language")
    return {language_key(language): language} if language else {}


def _chunks(rows: list[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    for i in range(0, len(rows), size):
        yield rows[i:i + size]


def _write_lines(path: Path, lines: list[str], *, gz: bool) -> Path:
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


# --------------------------------------------------------------------------- OTLP/JSON


def otlp_trace_requests(spans: pl.DataFrame, *, per_request: int = 2000) -> list[dict[str, Any]]:
    """ExportTraceServiceRequest dicts (OTLP/JSON: hex ids, int64 as strings, enums as integers)."""
    rows = spans.with_columns(_ns("start").alias("_start")).to_dicts()
    requests = []
    for chunk in _chunks(rows, per_request):
        by_resource: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for row in chunk:
            attrs: list[dict[str, Any]] = []
            if row["status_code"] is not None:  # OTLP/JSON writes int64 as a string
                attrs.append({"key": "rpc.grpc.status_code", "value": {"intValue": str(row["status_code"])}})
            if row["peer_service"] is not None:
                attrs.append(_str_attr("peer.service", row["peer_service"]))
            attrs += [_str_attr(key, row[column]) for column, key in SPAN_PEER_TAG_KEYS.items()
                      if row.get(column) is not None]
            span = {
                "traceId": row["trace_id"], "spanId": row["span_id"], "name": row["operation"],
                "kind": _KIND_NUMBER[row["span_kind"]],
                "startTimeUnixNano": str(row["_start"]),
                "endTimeUnixNano": str(row["_start"] + row["duration_us"] * 1000),
                "attributes": attrs,
                "status": {"code": 2} if row["is_error"] else {},
            }
            if row["parent_span_id"] is not None:
                span["parentSpanId"] = row["parent_span_id"]
            resource = (row["service"], row["pod"], row["node"], *_language(row).items())
            by_resource.setdefault(resource, []).append(span)
        requests.append({"resourceSpans": [
            {"resource": _resource(**{"service.name": s, "k8s.pod.name": p, "k8s.node.name": n}, **dict(language)),
             "scopeSpans": [{"scope": {"name": "aiops-rca.bench"}, "spans": spans_}]}
            for (s, p, n, *language), spans_ in by_resource.items()]})
    return requests


def otlp_log_requests(logs: pl.DataFrame, *, per_request: int = 2000) -> list[dict[str, Any]]:
    rows = logs.with_columns(_ns("time").alias("_t")).to_dicts()
    requests = []
    for chunk in _chunks(rows, per_request):
        by_resource: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for row in chunk:
            record: dict[str, Any] = {"timeUnixNano": str(row["_t"]), "observedTimeUnixNano": str(row["_t"])}
            if row["message"] is not None:
                record["body"] = {"stringValue": row["message"]}
            by_resource.setdefault((row["namespace"], row["pod"], row["node"]), []).append(record)
        requests.append({"resourceLogs": [
            {"resource": _resource(**{"k8s.namespace.name": ns, "k8s.pod.name": p, "k8s.node.name": n}),
             "scopeLogs": [{"scope": {}, "logRecords": records}]}
            for (ns, p, n), records in by_resource.items()]})
    return requests


def _infra_labels(row: dict[str, Any]) -> dict[str, str]:
    labels = {"family": row["family"]}
    if row["family"] == "infra_pod" and row["component"] is not None:
        labels["pod"] = row["component"]
    if row["node"] is not None:
        labels["node"] = row["node"]
    elif row["family"] == "infra_node" and row["component"] is not None:
        labels["node"] = row["component"]
    for name in _INFRA_LABELS:
        if row[name] is not None:
            labels[name] = row[name]
    return labels


def metric_series(*, apm: pl.DataFrame | None, infra: pl.DataFrame | None) -> list[tuple[str, dict[str, str], list[tuple[int, float]]]]:
    """``(metric name, labels, [(µs, value)])`` of every series; APM columns become ``apm_<kpi>``."""
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, float]]] = {}
    if apm is not None:
        for row in apm.with_columns(pl.col("time").dt.epoch("us").alias("_t")).to_dicts():
            labels = (("object_id", row["object_id"]), ("object_type", row["object_type"]))
            for kpi in APM_KPIS:
                if row[kpi] is not None:
                    series.setdefault((f"apm_{kpi}", labels), []).append((row["_t"], row[kpi]))
    if infra is not None:
        for row in infra.filter(pl.col("value").is_not_null()).with_columns(
                pl.col("time").dt.epoch("us").alias("_t")).to_dicts():
            key = (row["kpi_key"], tuple(sorted(_infra_labels(row).items())))
            series.setdefault(key, []).append((row["_t"], row["value"]))
    return [(name, dict(labels), points) for (name, labels), points in series.items()]


def otlp_metric_requests(*, apm: pl.DataFrame | None, infra: pl.DataFrame | None) -> list[dict[str, Any]]:
    """One request per metric name, every series a gauge; labels as data point attributes."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for name, labels, points in metric_series(apm=apm, infra=infra):
        attrs = [_str_attr(k, v) for k, v in labels.items()]
        by_name.setdefault(name, []).extend(
            {"attributes": attrs, "timeUnixNano": str(t * 1000), "asDouble": v} for t, v in points)
    return [{"resourceMetrics": [{"resource": {}, "scopeMetrics": [{"metrics": [
        {"name": name, "gauge": {"dataPoints": points}}]}]}]} for name, points in by_name.items()]


def write_otlp_json(path: Path, requests: list[dict[str, Any]], *, gz: bool = False) -> Path:
    """The Collector file exporter's JSON: one request per line."""
    return _write_lines(path, [json.dumps(r) for r in requests], gz=gz)


def otlp_proto_message(request: dict[str, Any]) -> bytes:
    """One request (OTLP/JSON, hex ids) as its protobuf message: what an OTLP/HTTP exporter POSTs."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    if "resourceSpans" in request:
        message: Any = ExportTraceServiceRequest()
        request = _base64_ids(request)  # json_format reads bytes fields as base64
    elif "resourceMetrics" in request:
        message = ExportMetricsServiceRequest()
    else:
        message = ExportLogsServiceRequest()
    return bytes(json_format.ParseDict(request, message).SerializeToString())


def write_otlp_proto(path: Path, requests: list[dict[str, Any]], *, framing: str = "fixed32") -> Path:
    """The requests as protobuf messages (the file exporter's ``format: proto`` is ``fixed32``)."""
    out = bytearray()
    for request in requests:
        data = otlp_proto_message(request)
        if framing == "fixed32":
            out += len(data).to_bytes(4, "big")
        elif framing == "varint":
            size = len(data)
            while size >= 0x80:
                out.append((size & 0x7F) | 0x80)
                size >>= 7
            out.append(size)
        out += data
    path.write_bytes(bytes(out))
    return path


def _base64_ids(request: dict[str, Any]) -> dict[str, Any]:
    copy = json.loads(json.dumps(request))
    for rs in copy["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return copy


def tempo_traces(spans: pl.DataFrame) -> list[tuple[str, int, dict[str, Any]]]:
    """Each trace as Grafana Tempo's ``/api/traces/<id>`` answers it: ``(trace id, first span's start in ns,
    {"batches": [resource spans]})``, ids in base64 as Tempo's protobuf JSON writes them; in start order."""
    out = []
    for (trace_id,), trace in spans.group_by("trace_id", maintain_order=True):
        (request,) = otlp_trace_requests(trace, per_request=trace.height)
        start_ns = int(trace.select(_ns("start").min()).item())
        out.append((str(trace_id), start_ns, {"batches": _base64_ids(request)["resourceSpans"]}))
    return sorted(out, key=lambda item: (item[1], item[0]))


# --------------------------------------------------------------------------- Jaeger / Zipkin


def jaeger_document(spans: pl.DataFrame) -> dict[str, Any]:
    traces: dict[str, dict[str, Any]] = {}
    for row in spans.with_columns(pl.col("start").dt.epoch("us").alias("_start")).to_dicts():
        trace = traces.setdefault(row["trace_id"], {"traceID": row["trace_id"], "spans": [], "processes": {},
                                                    "warnings": None})
        process = {"serviceName": row["service"], "tags": [
            {"key": k, "type": "string", "value": v}
            for k, v in (("name", row["pod"]), ("node_name", row["node"]), *_language(row).items()) if v is not None]}
        pid = next((k for k, p in trace["processes"].items() if p == process), f"p{len(trace['processes']) + 1}")
        trace["processes"][pid] = process
        tags: list[dict[str, Any]] = []
        if row["span_kind"] is not None:
            tags.append({"key": "span.kind", "type": "string", "value": row["span_kind"]})
        if row["status_code"] is not None:
            tags.append({"key": "status.code", "type": "int64", "value": row["status_code"]})
        if row["is_error"]:
            tags.append({"key": "error", "type": "bool", "value": True})
        if row["peer_service"] is not None:
            tags.append({"key": "peer.service", "type": "string", "value": row["peer_service"]})
        tags += [{"key": key, "type": "string", "value": row[column]} for column, key in SPAN_PEER_TAG_KEYS.items()
                 if row.get(column) is not None]
        refs = ([{"refType": "CHILD_OF", "traceID": row["trace_id"], "spanID": row["parent_span_id"]}]
                if row["parent_span_id"] is not None else [])
        trace["spans"].append({"traceID": row["trace_id"], "spanID": row["span_id"], "flags": 1,
                               "operationName": row["operation"], "references": refs, "startTime": row["_start"],
                               "duration": row["duration_us"], "tags": tags, "logs": [], "processID": pid,
                               "warnings": None})
    return {"data": list(traces.values()), "total": 0, "limit": 0, "offset": 0, "errors": None}


def zipkin_document(spans: pl.DataFrame) -> list[dict[str, Any]]:
    out = []
    for row in spans.with_columns(pl.col("start").dt.epoch("us").alias("_start")).to_dicts():
        tags = {k: v for k, v in (("k8s.pod.name", row["pod"]), ("k8s.node.name", row["node"]),
                                  ("peer.service", row["peer_service"]),
                                  *((key, row.get(column)) for column, key in SPAN_PEER_TAG_KEYS.items()))
                if v is not None}
        tags.update(_language(row))  # as OpenTelemetry's Zipkin exporter copies the resource's attributes
        if row["status_code"] is not None:
            tags["rpc.grpc.status_code"] = str(row["status_code"])
        if row["is_error"]:
            tags["error"] = "failed"
        span: dict[str, Any] = {"traceId": row["trace_id"], "id": row["span_id"], "name": row["operation"],
                                "timestamp": row["_start"], "duration": row["duration_us"],
                                "localEndpoint": {"serviceName": row["service"]}, "tags": tags}
        if row["span_kind"] is not None:
            span["kind"] = row["span_kind"].upper()
        if row["parent_span_id"] is not None:
            span["parentId"] = row["parent_span_id"]
        out.append(span)
    return out


# --------------------------------------------------------------------------- Prometheus


def prometheus_query_range(*, apm: pl.DataFrame | None, infra: pl.DataFrame | None) -> dict[str, Any]:
    result: list[dict[str, Any]] = [{"metric": {**labels, "__name__": name},
               "values": [[t / 1_000_000, repr(float(v))] for t, v in sorted(points)]}
              for name, labels, points in metric_series(apm=apm, infra=infra)]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def prometheus_exposition(*, infra: pl.DataFrame, with_timestamps: bool = True) -> str:
    """Text exposition (``name{labels} value [ms]``) of the infra series."""
    lines = []
    for name, labels, points in metric_series(apm=None, infra=infra):
        text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for t, v in points:
            stamp = f" {t // 1000}" if with_timestamps else ""
            lines.append(f"{name}{{{text}}} {v!r}{stamp}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- Loki / ECS


def loki_query_range(logs: pl.DataFrame) -> dict[str, Any]:
    streams: dict[tuple[tuple[str, str], ...], list[list[str]]] = {}
    for row in logs.with_columns(_ns("time").alias("_t")).to_dicts():
        labels = tuple((k, row[k]) for k in ("namespace", "pod", "node") if row[k] is not None)
        streams.setdefault(labels + (("container", "server"),), []).append([str(row["_t"]), row["message"]])
    return {"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": dict(labels), "values": values} for labels, values in streams.items()],
        "stats": {}}}


def ecs_lines(logs: pl.DataFrame, *, nested: bool = True) -> list[str]:
    lines = []
    stamps = logs["time"].dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_list()
    for stamp, row in zip(stamps, logs.to_dicts()):
        if nested:
            kube = {"pod": {"name": row["pod"]}, "node": {"name": row["node"]}, "namespace": row["namespace"]}
            doc: dict[str, Any] = {"@timestamp": stamp, "message": row["message"], "kubernetes": kube}
        else:
            doc = {"@timestamp": stamp, "message": row["message"], "kubernetes.pod.name": row["pod"],
                   "kubernetes.node.name": row["node"], "kubernetes.namespace": row["namespace"]}
        lines.append(json.dumps({"_index": "filebeat", "_source": doc}))
    return lines


# --------------------------------------------------------------------------- the simulator's telemetry

FAMILIES = {"spans": "trace", "logs": "log", "apm": "apm", "infra": "infra"}


def release_frames(data_dir: Path) -> dict[str, pl.DataFrame]:
    """Every day of a release in ``data_dir``, read with preprocess.readers: the canonical frames to export.

    Spans are read with HipsterShop's ``[traces]`` (the simulated world is the bundled system) and keep
    their raw rpc.service / db.system tags, which the exporters write and the importers carry.
    """
    naming = bundled_system().trace
    days = [p for p in sorted(Path(data_dir).iterdir()) if layout.is_day_dir(p)]
    return {name: pl.concat([read_day(d, family, naming=naming, peer_tags=True, report_missing=False).frame
                             for d in days])
            for name, family in FAMILIES.items()}


def simulated_frames(out: Path, *, cases: int = 2, seed: int = 7) -> dict[str, pl.DataFrame]:
    """Simulate a small release into ``out`` and read it back (``release_frames``)."""
    simulate(SimulationOptions(out_dir=out, cases=cases, seed=seed))
    return release_frames(out)
