"""OpenTelemetry OTLP, as the Collector's ``file`` exporter writes it, -> canonical frames.

Accepted (auto-detected per file, gzipped or not):

* OTLP/JSON lines: one ``ExportTraceServiceRequest`` / ``ExportMetricsServiceRequest`` /
  ``ExportLogsServiceRequest`` per line (``resourceSpans`` / ``resourceMetrics`` / ``resourceLogs``),
  or one such request pretty-printed over the whole file;
* OTLP protobuf: the requests as binary messages, each prefixed by a 4-byte big-endian length
  (the file exporter's ``format: proto``), by a varint length (``writeDelimitedTo``), or one bare
  message. Decoded with the ``opentelemetry-proto`` package, then read by the same code as JSON.

OTLP/JSON spells trace and span ids as hex (the OTLP spec), not the base64 that protobuf's
``json_format`` writes; both are accepted (the length says which). A span's service and peer are
kept as the export names them (``service.name``, ``peer.service``); ``rpc.service``,
``db.system`` and a client span's host (``server.address``, ``net.peer.name``, a URL's host) are
carried into the dataset, whose reader names the peer with the system's ``[traces]``; so is the
language the resource's SDK states (``telemetry.sdk.language``, else ``jaeger.version``: a Jaeger
client's spans received by a Collector), which ``rca system infer`` reads runtimes from. The
mapping is in docs/formats/otlp.md.
"""
from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preprocess.formats.contract import FormatError, FormatResult
from preprocess.formats.levels import level_name, line_with_level
from preprocess.formats.metric_map import MetricRows
from preprocess.formats.rows import Rows
from preprocess.formats.sources import BadField, IssueLog, read_bytes
from preprocess.formats.spans import HEX, as_int, explicit_peer, is_error, peer_host, stated_language

log = logging.getLogger(__name__)

_KINDS: dict[int, str | None] = {0: None, 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
_KIND_NAMES = {f"SPAN_KIND_{(v or 'unspecified').upper()}": k for k, v in _KINDS.items()}
_STATUS_ERROR = 2  # Status.code STATUS_CODE_ERROR
_DELTA, _CUMULATIVE = 1, 2  # Sum.aggregation_temporality
_TEMPORALITY_NAMES = {"AGGREGATION_TEMPORALITY_UNSPECIFIED": 0, "AGGREGATION_TEMPORALITY_DELTA": _DELTA,
                      "AGGREGATION_TEMPORALITY_CUMULATIVE": _CUMULATIVE}
_POD_KEYS = ("k8s.pod.name", "podName")
_NODE_KEYS = ("k8s.node.name", "node_name", "nodeName")
_NAMESPACE_KEYS = ("k8s.namespace.name",)


# --------------------------------------------------------------------------- OTLP/JSON values


def any_value(value: Any) -> str | None:
    """An OTLP ``AnyValue`` as the string a Jaeger tag would hold (``true``, ``200``, JSON for lists)."""
    if not isinstance(value, dict) or not value:
        return None
    if "stringValue" in value:
        return str(value["stringValue"])
    if "boolValue" in value:
        return "true" if value["boolValue"] else "false"
    if "intValue" in value:
        return str(int(value["intValue"]))
    if "doubleValue" in value:
        return repr(float(value["doubleValue"]))
    if "bytesValue" in value:
        return str(value["bytesValue"])
    return json.dumps(_plain(value), sort_keys=True)


def _plain(value: Any) -> Any:
    """Nested ``arrayValue`` / ``kvlistValue`` as plain JSON values."""
    if "arrayValue" in value:
        return [_plain(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return {kv.get("key"): _plain(kv.get("value") or {}) for kv in value["kvlistValue"].get("values", [])}
    return any_value(value)


def attributes(items: Any) -> dict[str, str]:
    """``[{key, value: AnyValue}]`` -> ``{key: string}`` (null values dropped)."""
    out: dict[str, str] = {}
    for item in items or []:
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            text = any_value(item.get("value"))
            if text is not None:
                out[item["key"]] = text
    return out


def otlp_id(value: Any, *, field: str, size: int, required: bool = True) -> str | None:
    """A trace (16 bytes) or span (8 bytes) id as lower-case hex, from hex (OTLP/JSON) or base64 (json_format)."""
    if value in (None, ""):
        if required:
            raise BadField(field, "missing id")
        return None
    if not isinstance(value, str):
        raise BadField(field, f"id must be a string, got {type(value).__name__}")
    if len(value) == 2 * size:
        if not HEX.match(value):
            raise BadField(field, f"id {value!r} is not hexadecimal")
        text = value.lower()
    elif len(value) == 4 * ((size + 2) // 3):
        try:
            text = base64.b64decode(value, validate=True).hex()
        except (binascii.Error, ValueError) as exc:
            raise BadField(field, f"id {value!r} is neither {2 * size} hex digits nor base64") from exc
        if len(text) != 2 * size:
            raise BadField(field, f"id {value!r} decodes to {len(text) // 2} bytes, expected {size}")
    else:
        raise BadField(field, f"id {value!r} has {len(value)} characters, expected {2 * size} hex digits")
    if set(text) == {"0"}:
        raise BadField(field, "all-zero id is invalid")
    return text


def nanos(value: Any, *, field: str) -> int:
    """A ``fixed64`` Unix-nanosecond time (a JSON string or number); missing or zero is an error."""
    if value is None or value in ("", "0", 0):
        raise BadField(field, "missing timestamp")
    try:
        number = int(value)
    except (TypeError, ValueError) as exc:
        raise BadField(field, f"timestamp {value!r} is not an integer of nanoseconds") from exc
    if number <= 0:
        raise BadField(field, f"timestamp {value!r} is not positive")
    return number


def _enum(value: Any, *, names: dict[str, int], field: str) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value in names:
        return names[value]
    if value is None:
        return 0
    raise BadField(field, f"unknown enum value {value!r}")


def _scoped(resource_item: dict[str, Any], *keys: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Scope entries under one resource entry; ``instrumentationLibrary*`` is the pre-1.0 spelling."""
    for key in keys:
        entries = resource_item.get(key)
        if isinstance(entries, list):
            yield from enumerate(e for e in entries if isinstance(e, dict))
            return


def _records(request: dict[str, Any], resource_key: str, scope_keys: tuple[str, str], record_key: str,
             ) -> Iterator[tuple[str, dict[str, str], dict[str, Any]]]:
    """``(where, resource attributes, record)`` of every record of a request."""
    for ri, resource_item in enumerate(request.get(resource_key) or []):
        if not isinstance(resource_item, dict):
            continue
        resource = attributes((resource_item.get("resource") or {}).get("attributes"))
        for si, scope in _scoped(resource_item, *scope_keys):
            for pi, record in enumerate(scope.get(record_key) or []):
                if isinstance(record, dict):
                    yield f"{resource_key}[{ri}].{scope_keys[0]}[{si}].{record_key}[{pi}]", resource, record


def tempo_trace_as_request(document: dict[str, Any]) -> dict[str, Any]:
    """A Tempo trace document as the export request it wraps; any other document as it is."""
    if "resourceSpans" not in document:
        if isinstance(document.get("batches"), list):
            return {"resourceSpans": document["batches"]}
        inner = document.get("trace")
        if isinstance(inner, dict) and "resourceSpans" in inner:
            return inner
    return document


def _first(attrs: dict[str, str], keys: tuple[str, ...]) -> str | None:
    return next((attrs[k] for k in keys if attrs.get(k)), None)


# --------------------------------------------------------------------------- counters


@dataclass(frozen=True)
class _CounterPoint:
    time_ns: int
    value: float
    start_ns: int | None  # the point's startTimeUnixNano: when its counting began
    temporality: int
    labels: dict[str, str]
    path: Path
    line: int | None
    where: str


SeriesKey = tuple[str, tuple[tuple[str, str], ...]]  # metric name, sorted labels


class CounterRates:
    """Monotonic sums (counters) as per-second rates, as Prometheus' ``rate()`` reads a counter: what the
    KPIs are (``pod_cpu_usage`` is cores, not CPU seconds since the container started).

    A delta point is its increase over its own interval (``startTimeUnixNano`` to ``timeUnixNano``). A
    cumulative point's rate is its increase since the series' previous point over the time between them;
    a value below the previous one, or another start time, is a reset, and the counter counts from zero
    again. A series' first point has no rate. The last point of every cumulative series is kept here from
    one read to the next: the OTLP receiver's import rounds share one (``copy`` for a round, ``adopt``
    once its rows are written, so a round that fails is read again with the same memory)."""

    def __init__(self, last: dict[SeriesKey, tuple[int, float, int | None]] | None = None) -> None:
        self._last = dict(last or {})

    def copy(self) -> CounterRates:
        return CounterRates(self._last)

    def adopt(self, other: CounterRates) -> None:
        self._last = dict(other._last)

    def to_json(self) -> list[list[Any]]:
        """Each series' last point, ``[name, [[label, value], ...], time_ns, value, start_ns]``: what a receiver
        keeps on disk so that a restart loses no rate."""
        return [[name, [list(pair) for pair in labels], *last] for (name, labels), last in self._last.items()]

    @classmethod
    def from_json(cls, rows: Any) -> CounterRates:
        """The memory ``to_json`` wrote; ``ValueError`` for anything else."""
        if not isinstance(rows, list):
            raise ValueError("expected a list of series")
        last: dict[SeriesKey, tuple[int, float, int | None]] = {}
        for row in rows:
            if not (isinstance(row, list) and len(row) == 5 and isinstance(row[0], str) and isinstance(row[1], list)):
                raise ValueError(f"not a series' last point: {row!r:.80}")
            name, labels, time_ns, value, start_ns = row
            key = (name, tuple((str(k), str(v)) for k, v in labels))
            last[key] = (int(time_ns), float(value), None if start_ns is None else int(start_ns))
        return cls(last)

    def rate(self, series: SeriesKey, point: _CounterPoint) -> float | None:
        """The per-second rate at ``point`` (points of a series in time order); None where there is none."""
        if point.temporality == _DELTA:
            if point.start_ns is None or point.start_ns >= point.time_ns:
                raise BadField("startTimeUnixNano", "a delta sum's point needs a start before its time")
            return point.value / ((point.time_ns - point.start_ns) / 1e9)
        last = self._last.get(series)
        if last is not None and point.time_ns <= last[0]:
            return None  # a point read before (sent again): no new rate
        self._last[series] = (point.time_ns, point.value, point.start_ns)
        if last is None:
            return None
        last_time, last_value, last_start = last
        reset = point.value < last_value or (point.start_ns is not None and last_start is not None
                                             and point.start_ns != last_start)
        increase = point.value if reset else point.value - last_value
        return increase / ((point.time_ns - last_time) / 1e9)


# --------------------------------------------------------------------------- signals


class _Sink:
    """Where the records of one read go, whatever the encoding of the file."""

    def __init__(self, counters: CounterRates) -> None:
        self.issues = IssueLog()
        self.spans = Rows("spans")
        self.logs = Rows("logs")
        self.metrics = MetricRows()
        self.counters = counters
        self._counter_points: dict[SeriesKey, list[_CounterPoint]] = {}

    def request(self, request: dict[str, Any], *, path: Path, line: int | None, prefix: str = "") -> None:
        """Every record of one export request; ``prefix`` places a binary message (``message[3].``).

        Grafana Tempo answers a trace by id with the same resource spans in another envelope: ``batches``
        (``/api/traces/<id>``) or ``trace.resourceSpans`` (``/api/v2/traces/<id>``); both are read as a
        request (``rca import tempo``, docs/formats/tempo.md)."""
        request = tempo_trace_as_request(request)
        handlers: list[Callable[..., None]] = []
        if "resourceSpans" in request:
            handlers.append(self._traces)
        if "resourceMetrics" in request:
            handlers.append(self._metrics)
        if "resourceLogs" in request:
            handlers.append(self._logs)
        if not handlers:
            self.issues.add(path, "not an OTLP export request (no resourceSpans, resourceMetrics or resourceLogs) nor a "
                            "Tempo trace (no batches)",
                            line=line, where=prefix.rstrip(".") or None, field="resourceSpans")
        for handler in handlers:
            handler(request, path=path, line=line, prefix=prefix)

    def _traces(self, request: dict[str, Any], *, path: Path, line: int | None, prefix: str) -> None:
        for where, resource, span in _records(request, "resourceSpans", ("scopeSpans", "instrumentationLibrarySpans"),
                                              "spans"):
            try:
                self._span(span, resource)
            except BadField as exc:
                self.issues.add(path, exc.reason, line=line, where=prefix + where, field=exc.field)

    def _span(self, span: dict[str, Any], resource: dict[str, str]) -> None:
        trace_id = otlp_id(span.get("traceId"), field="traceId", size=16)
        span_id = otlp_id(span.get("spanId"), field="spanId", size=8)
        parent = otlp_id(span.get("parentSpanId"), field="parentSpanId", size=8, required=False)
        start = nanos(span.get("startTimeUnixNano"), field="startTimeUnixNano")
        end = nanos(span.get("endTimeUnixNano"), field="endTimeUnixNano")
        if end < start:
            raise BadField("endTimeUnixNano", "span ends before it starts")
        kind_number = _enum(span.get("kind"), names=_KIND_NAMES, field="kind")
        if kind_number not in _KINDS:
            raise BadField("kind", f"unknown span kind {kind_number}")
        kind = _KINDS[kind_number]
        attrs = attributes(span.get("attributes"))
        status = span.get("status") or {}
        status_error = _enum(status.get("code"), names={"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1,
                                                        "STATUS_CODE_ERROR": 2}, field="status.code") == _STATUS_ERROR
        grpc_code = as_int(attrs.get("rpc.grpc.status_code") or attrs.get("status.code"))
        http_status = as_int(attrs.get("http.status_code") or attrs.get("http.response.status_code"))
        operation = span.get("name")
        if not isinstance(operation, str):
            raise BadField("name", "missing span name")
        self.spans.append(
            trace_id=trace_id, span_id=span_id, parent_span_id=parent, operation=operation,
            service=resource.get("service.name"),
            pod=_first(resource, _POD_KEYS), node=_first(resource, _NODE_KEYS), span_kind=kind,
            peer_service=explicit_peer(kind=kind, peer=attrs.get("peer.service")),
            rpc_service=attrs.get("rpc.service"), db_system=attrs.get("db.system"),
            peer_host=peer_host(attrs, kind=kind), sdk_language=stated_language(resource),
            start=start // 1000, duration_us=(end - start) // 1000, status_code=grpc_code,
            is_error=is_error(error_tag=attrs.get("error"), status_error=status_error, status_code=grpc_code,
                              http_status=http_status),
        )

    def _logs(self, request: dict[str, Any], *, path: Path, line: int | None, prefix: str) -> None:
        for where, resource, record in _records(request, "resourceLogs", ("scopeLogs", "instrumentationLibraryLogs"),
                                                "logRecords"):
            try:
                stamp = record.get("timeUnixNano")
                field = "timeUnixNano"
                if stamp in (None, "", "0", 0):  # the collector fills observed time when the source had none
                    stamp, field = record.get("observedTimeUnixNano"), "observedTimeUnixNano"
                time_us = nanos(stamp, field=field) // 1000
            except BadField as exc:
                self.issues.add(path, exc.reason, line=line, where=prefix + where, field=exc.field)
                continue
            attrs = {**resource, **attributes(record.get("attributes"))}
            body = record.get("body")
            message = line_with_level(any_value(body) if body else None,
                                      level_name(text=record.get("severityText"), number=record.get("severityNumber")))
            self.logs.append(time=time_us, namespace=_first(attrs, _NAMESPACE_KEYS), pod=_first(attrs, _POD_KEYS),
                             node=_first(attrs, _NODE_KEYS), message=message)

    def _metrics(self, request: dict[str, Any], *, path: Path, line: int | None, prefix: str) -> None:
        for where, resource, metric in _records(request, "resourceMetrics",
                                                ("scopeMetrics", "instrumentationLibraryMetrics"), "metrics"):
            name = metric.get("name")
            if not isinstance(name, str) or not name:
                self.issues.add(path, "metric without a name", line=line, where=prefix + where, field="name")
                continue
            body_key = next((k for k in ("gauge", "sum") if isinstance(metric.get(k), dict)), None)
            if body_key is None:
                other = next((k for k in ("histogram", "exponentialHistogram", "summary") if k in metric), "no data")
                # Not a loss of this tool's data: the canonical families hold single values only.
                self.issues.add(path, f"{other} metric {name!r} not imported (only gauge and sum are)", line=line,
                                where=prefix + where, field=other, lost=False)
                continue
            body = metric[body_key]
            counter = body_key == "sum" and body.get("isMonotonic") is True
            try:
                temporality = _enum(body.get("aggregationTemporality"), names=_TEMPORALITY_NAMES,
                                    field="aggregationTemporality") if counter else 0
                if counter and temporality not in (_DELTA, _CUMULATIVE):
                    raise BadField("aggregationTemporality", f"monotonic sum {name!r} says neither delta nor "
                                                             "cumulative: its points cannot be made rates")
            except BadField as exc:
                self.issues.add(path, exc.reason, line=line, where=prefix + where, field=exc.field)
                continue
            for di, point in enumerate(body.get("dataPoints") or []):
                point_where = f"{prefix}{where}.{body_key}.dataPoints[{di}]"
                try:
                    time_ns = nanos(point.get("timeUnixNano"), field="timeUnixNano")
                    value = _point_value(point)
                except BadField as exc:
                    self.issues.add(path, exc.reason, line=line, where=point_where, field=exc.field)
                    continue
                labels = {**resource, **attributes(point.get("attributes"))}
                if counter:  # made a rate once every point of its series is read (result), in time order
                    start = point.get("startTimeUnixNano")
                    self._counter_points.setdefault((name, tuple(sorted(labels.items()))), []).append(_CounterPoint(
                        time_ns=time_ns, value=value, start_ns=int(start) if start not in (None, "", "0", 0) else None,
                        temporality=temporality, labels=labels, path=path, line=line, where=point_where))
                    continue
                self.metrics.add(name=name, labels=labels, time_us=time_ns // 1000, value=value, issues=self.issues,
                                 path=path, line=line, where=point_where)

    def _counter_rates(self) -> None:
        """Every counter point read, as its rate (``CounterRates``), into the metric rows."""
        for series, points in self._counter_points.items():
            for point in sorted(points, key=lambda p: p.time_ns):
                try:
                    rate = self.counters.rate(series, point)
                except BadField as exc:
                    self.issues.add(point.path, exc.reason, line=point.line, where=point.where, field=exc.field)
                    continue
                if rate is not None:
                    self.metrics.add(name=series[0], labels=point.labels, time_us=point.time_ns // 1000, value=rate,
                                     issues=self.issues, path=point.path, line=point.line, where=point.where)
        self._counter_points.clear()

    def result(self, files: list[Path]) -> FormatResult:
        self._counter_rates()
        return FormatResult(
            spans=self.spans.frame() if len(self.spans) else None,
            logs=self.logs.frame() if len(self.logs) else None,
            apm=self.metrics.apm_frame(), infra=self.metrics.infra_frame(),
            files=files, issues=self.issues.issues,
        )


def _point_value(point: dict[str, Any]) -> float:
    if "asDouble" in point:
        try:
            return float(point["asDouble"])  # "NaN", "Infinity" are the JSON spellings of the specials
        except (TypeError, ValueError) as exc:
            raise BadField("asDouble", f"value {point['asDouble']!r} is not a number") from exc
    if "asInt" in point:
        try:
            return float(int(point["asInt"]))
        except (TypeError, ValueError) as exc:
            raise BadField("asInt", f"value {point['asInt']!r} is not an integer") from exc
    raise BadField("asDouble", "data point without a value")


# --------------------------------------------------------------------------- files


def _json_requests(path: Path, data: bytes, sink: _Sink) -> None:
    """One request per line; or, when the whole file is one object, that (pretty-printed) request."""
    try:
        whole = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        whole = None
    if isinstance(whole, dict):
        sink.request(whole, path=path, line=1)
        return
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            request = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
            sink.issues.add(path, f"malformed OTLP/JSON line: {reason}", line=number)
            continue
        if not isinstance(request, dict):
            sink.issues.add(path, f"expected a JSON object, got {type(request).__name__}", line=number)
            continue
        sink.request(request, path=path, line=number)


# An OTLP/JSON document: an object whose first key follows (or an empty one). A protobuf message starts with
# 0x0A, which is JSON white space, and its length byte may be "{" (a first entry of 123 bytes): the quote
# after the brace tells them apart.
_JSON_START = re.compile(rb"\s*(\{\s*[\"}]|$)")
PROTOBUF_SUFFIXES = (".binpb", ".pb")


def _is_json(path: Path, data: bytes) -> bool:
    """Whether a file holds OTLP/JSON rather than protobuf: by its name where it says protobuf, else by content."""
    if any(suffix in PROTOBUF_SUFFIXES for suffix in path.suffixes):
        return False
    return _JSON_START.match(data) is not None


class OtlpReader:
    """OTLP traces, metrics and logs (JSON lines or protobuf, optionally gzipped) -> canonical frames."""

    name = "otlp"
    description = "OpenTelemetry OTLP (Collector file exporter): JSON lines or protobuf, gzip optional"

    def __init__(self, *, counters: CounterRates | None = None) -> None:
        # None: each read starts its counters afresh (a series' first point in the files has no rate).
        self.counters = counters

    def read(self, paths: Sequence[Path]) -> FormatResult:
        if not paths:
            raise FormatError(f"{self.name}: no input files")
        sink = _Sink(self.counters if self.counters is not None else CounterRates())
        files: list[Path] = []
        for path in paths:
            data = read_bytes(Path(path), issues=sink.issues)
            if data is None:
                continue
            files.append(Path(path))
            if _is_json(Path(path), data):
                _json_requests(Path(path), data, sink)
            else:
                from preprocess.formats import otlp_proto  # the protobuf runtime only when a binary file comes

                for number, request in otlp_proto.requests(Path(path), data, issues=sink.issues):
                    sink.request(request, path=Path(path), line=None, prefix=f"message[{number}].")
        return sink.result(files)
