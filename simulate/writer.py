"""On-disk layout of the simulated release (data-contract §1) and its real-world variants.

Owns file names and column encodings, and writes every file atomically (temp file in the
same directory, then ``os.replace``). Variants the readers must tolerate are produced
deterministically from names, so the same run always yields the same bytes:
- infra ``time`` in three string encodings, chosen per KPI file;
- APM ``time`` as ISO string or tz-aware timestamp, chosen per object;
- some hour files named ``..._<HH>-59-00.parquet``;
- the earlier incarnation of a rescheduled pod in an APM file with ``deleted`` in its name.
"""
from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rca import atomic
from rca.atomic import atomic_path
from simulate.apm import ApmRows
from simulate.effects import GRPC_CODE, ErrorKind
from simulate.logs import LogRows, rpc_detail
from simulate.metrics import InfraRows
from simulate.requests import SpanBatch
from simulate.topology import pod_ip, service_ip

INFRA_TIME_FORMATS = ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%d %H:%M:%S+00:00", "%Y-%m-%d %H:%M:%S")
LATE_NAMED_CST_HOURS = frozenset({5, 17})  # hour files of these CST hours are named <HH>-59-00
_KV = pa.struct([("key", pa.string()), ("type", pa.string()), ("value", pa.string())])


def _pick(name: str, choices: int) -> int:
    return zlib.crc32(name.encode()) % choices


def write_atomic(table: pa.Table, path: Path) -> None:
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="snappy")


def write_text_atomic(text: str, path: Path) -> None:
    atomic.write_text_atomic(path, text)


def hour_file(out: Path, *, family: str, day: str, cst_hour: int) -> Path:
    """``<day>/log-parquet/log_filebeat-server_<day>_<HH>-00-00.parquet`` and the trace equivalent."""
    minute = "59" if cst_hour in LATE_NAMED_CST_HOURS else "00"
    stem = {"log": "log-parquet/log_filebeat-server", "trace": "trace-parquet/trace_jaeger-span"}[family]
    return out / day / f"{stem}_{day}_{cst_hour:02d}-{minute}-00.parquet"


def _iso_strings(time_s: np.ndarray, fmt: str) -> pa.Array:
    stamps = time_s.astype("datetime64[s]").astype(str)  # 2025-06-05T16:00:00
    if fmt == INFRA_TIME_FORMATS[0]:
        return pa.array(np.char.add(stamps, "Z"))
    spaced = np.char.replace(stamps, "T", " ")
    return pa.array(np.char.add(spaced, "+00:00") if fmt == INFRA_TIME_FORMATS[1] else spaced)


def infra_path(out: Path, *, day: str, family: str, kpi_key: str) -> Path:
    base = out / day / "metric-parquet"
    if family in ("infra_tikv", "infra_pd"):
        return base / "other" / f"{family}_{kpi_key}_{day}.parquet"
    return base / "infra" / family / f"{family}_{kpi_key}_{day}.parquet"


def infra_table(rows: InfraRows) -> pa.Table:
    fmt = INFRA_TIME_FORMATS[_pick(f"{rows.family}/{rows.kpi_key}", 3)]
    order = ("cf", "device", "instance")
    cols: dict[str, pa.Array] = {"time": _iso_strings(rows.time_s, fmt)}
    for name in order:
        cols[name] = pa.array(rows.labels[name], pa.string())
    cols["kpi_key"] = pa.array(np.full(len(rows.value), rows.kpi_key, dtype=object), pa.string())
    cols["kpi_name"] = pa.array(np.full(len(rows.value), rows.kpi_key.replace("_", " "), dtype=object), pa.string())
    for name in ("kubernetes_node", "mountpoint", "namespace", "object_type", "pod"):
        cols[name] = pa.array(rows.labels[name], pa.string())
    cols[rows.kpi_key] = pa.array(rows.value.astype(np.float64))
    cols["sql_type"] = pa.array(rows.labels["sql_type"], pa.string())
    cols["type"] = pa.array(rows.labels["type"], pa.string())
    return pa.table(cols)


APM_INT = ("request", "response", "rrt_max", "error", "client_error", "server_error", "timeout")


def apm_path(out: Path, *, day: str, rows: ApmRows, deleted: bool = False) -> Path:
    base = out / day / "metric-parquet" / "apm"
    if rows.object_type == "namespace":
        return base / f"pod_ns_{rows.object_id}_{day}.parquet"
    suffix = " (deleted)" if deleted else ""
    return base / rows.object_type / f"{rows.object_type}_{rows.object_id}{suffix}_{day}.parquet"


def apm_table(rows: ApmRows) -> pa.Table:
    if _pick(rows.object_id, 2) == 0:
        time = pa.array(np.char.add(rows.time_s.astype("datetime64[s]").astype(str), "Z"))
    else:
        time = pa.array((rows.time_s * 1_000_000_000).astype(np.int64), pa.timestamp("ns", tz="UTC"))
    n = len(rows.time_s)
    cols: dict[str, pa.Array] = {
        "time": time,
        "object_id": pa.array(np.full(n, rows.object_id, dtype=object), pa.string()),
        "object_type": pa.array(np.full(n, rows.object_type, dtype=object), pa.string()),
    }
    for name in ("request", "response", "rrt", "rrt_max", "error", "client_error", "server_error", "timeout",
                 "error_ratio", "client_error_ratio", "server_error_ratio"):
        values = rows.columns[name]
        cols[name] = pa.array(values.astype(np.int64 if name in APM_INT else np.float64))
    return pa.table(cols)


def log_table(rows: LogRows, *, agents: dict[str, str]) -> pa.Table:
    stamps = np.datetime_as_string(rows.timestamp_us.astype("datetime64[us]").astype("datetime64[ms]"), unit="ms")
    return pa.table({
        "k8_namespace": pa.array(rows.namespace, pa.string()),
        "@timestamp": pa.array(np.char.add(stamps.astype(str), "Z")),
        "agent_name": pa.array([agents[n] for n in rows.node.tolist()], pa.string()),
        "k8_pod": pa.array(rows.pod, pa.string()),
        "k8_node_name": pa.array(rows.node, pa.string()),
        "message": pa.array(rows.message, pa.string()),
    })


def agent_names(nodes: tuple[str, ...]) -> dict[str, str]:
    """One Filebeat pod per node, with a stable random-looking suffix."""
    letters = "bcdfghjklmnpqrstvwxz2456789"
    out = {}
    for node in nodes:
        h = zlib.crc32(node.encode())
        out[node] = "filebeat-filebeat-" + "".join(letters[(h >> (5 * i)) % len(letters)] for i in range(5))
    return out


def _kv_list(matrix: np.ndarray, present: np.ndarray, types: np.ndarray | None = None) -> pa.ListArray:
    """list<struct{key,type,value}> from an (N, K, 2) key/value matrix and an (N, K) mask."""
    keys = matrix[..., 0][present]
    values = matrix[..., 1][present]
    kinds = np.full(len(keys), "string", dtype=object) if types is None else types[present]
    offsets = np.concatenate([[0], np.cumsum(present.sum(axis=1))]).astype(np.int32)
    structs = pa.StructArray.from_arrays([pa.array(keys, pa.string()), pa.array(kinds, pa.string()),
                                          pa.array(values, pa.string())], fields=list(_KV))
    return pa.ListArray.from_arrays(pa.array(offsets), structs)


def _hex(values: np.ndarray, width: int) -> np.ndarray:
    return np.array([format(v, f"0{width}x") for v in values.tolist()], dtype=object)


def span_table(spans: SpanBatch) -> pa.Table:
    """Jaeger export layout: nested references, tags, logs and process (µs times)."""
    n = len(spans)
    trace_id = np.char.add(_hex(spans.trace_hi, 16).astype(str), _hex(spans.trace_lo, 16).astype(str)).astype(object)
    span_id = _hex(spans.span_id, 16)
    parent = _hex(spans.parent_id, 16)
    is_root = spans.parent_id == 0
    ref_struct = pa.StructArray.from_arrays(
        [pa.array(np.full(int((~is_root).sum()), "CHILD_OF", dtype=object), pa.string()),
         pa.array(parent[~is_root], pa.string()), pa.array(trace_id[~is_root], pa.string())],
        names=["refType", "spanID", "traceID"])
    references = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(~is_root)]).astype(np.int32)),
                                          ref_struct)

    err = spans.err_kind > 0
    code = np.array([GRPC_CODE.get(ErrorKind(k), 2) if k else 0 for k in spans.err_kind.tolist()])
    is_redis = spans.service == "redis"
    detail = np.array([rpc_detail(k, c) if k else "" for k, c in
                       zip(spans.err_kind.tolist(), spans.origin_callee.tolist())], dtype=object)
    third_key = np.where(is_root, "http.method", np.where(is_redis, "db.system", "rpc.service")).astype(object)
    third_val = np.where(is_root, spans.http_method,
                         np.where(is_redis, "redis", [op.split("/")[0].lstrip("/").rsplit(" ", 1)[-1]
                                                      for op in spans.operation.tolist()])).astype(object)
    peer = np.array([pod_ip(p) if k == "client" else service_ip("frontend") for p, k in
                     zip(spans.callee_pod.tolist(), spans.kind.tolist())], dtype=object)
    tags = np.empty((n, 7, 2), dtype=object)
    tags[:, 0] = np.stack([np.full(n, "span.kind", dtype=object), spans.kind], axis=1)
    tags[:, 1] = np.stack([np.full(n, "status.code", dtype=object), code.astype(str).astype(object)], axis=1)
    tags[:, 2] = np.stack([third_key, third_val], axis=1)
    tags[:, 3] = np.stack([np.full(n, "net.peer.ip", dtype=object), peer], axis=1)
    tags[:, 4] = np.stack([np.full(n, "error", dtype=object), np.full(n, "true", dtype=object)], axis=1)
    tags[:, 5] = np.stack([np.full(n, "status.message", dtype=object), detail], axis=1)
    tags[:, 6] = np.stack([np.full(n, "http.status_code", dtype=object),
                           spans.http_status.astype(str).astype(object)], axis=1)
    tag_mask = np.ones((n, 7), dtype=bool)
    tag_mask[:, 4] = err
    tag_mask[:, 5] = err
    tag_mask[:, 6] = is_root
    tag_types = np.full((n, 7), "string", dtype=object)
    tag_types[:, 1] = "int64"
    tag_types[:, 4] = "bool"
    tag_types[:, 6] = "int64"

    # One log event on failed spans: the error the client saw.
    event_fields = np.empty((n, 2, 2), dtype=object)
    event_fields[:, 0] = np.stack([np.full(n, "event", dtype=object), np.full(n, "error", dtype=object)], axis=1)
    event_fields[:, 1] = np.stack([np.full(n, "message", dtype=object), detail], axis=1)
    fields = _kv_list(event_fields[err], np.ones((int(err.sum()), 2), dtype=bool))
    events = pa.StructArray.from_arrays([fields, pa.array((spans.start_us + spans.dur_us)[err], pa.int64())],
                                        names=["fields", "timestamp"])
    logs = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(err)]).astype(np.int32)), events)

    camel = np.isin(spans.service, ["cartservice", "redis"])
    ptags = np.empty((n, 3, 2), dtype=object)
    ptags[:, 0] = np.stack([np.where(camel, "podName", "name").astype(object), spans.pod], axis=1)
    ptags[:, 1] = np.stack([np.where(camel, "nodeName", "node_name").astype(object), spans.node], axis=1)
    ptags[:, 2] = np.stack([np.full(n, "ip", dtype=object), np.array([pod_ip(p) for p in spans.pod.tolist()],
                                                                        dtype=object)], axis=1)
    process = pa.StructArray.from_arrays([pa.array(spans.service, pa.string()),
                                          _kv_list(ptags, np.ones((n, 3), dtype=bool))],
                                         names=["serviceName", "tags"])
    return pa.table({
        "traceID": pa.array(trace_id, pa.string()),
        "spanID": pa.array(span_id, pa.string()),
        "flags": pa.array(np.ones(n), pa.float64()),
        "operationName": pa.array(spans.operation, pa.string()),
        "references": references,
        "startTime": pa.array(spans.start_us, pa.int64()),
        "startTimeMillis": pa.array(spans.start_us // 1000, pa.int64()),
        "duration": pa.array(spans.dur_us, pa.int64()),
        "tags": _kv_list(tags, tag_mask, tag_types),
        "logs": logs,
        "process": process,
    })


NO_FAULT_FILE = "nofault.jsonl"


def write_cases(out: Path, *, records: list[dict[str, Any]], descriptions: list[str],
                quiet: Sequence[dict[str, str]] = ()) -> None:
    """``input.json`` (array of uuid + description) and ``groundtruth.jsonl`` in the real formats.

    ``quiet`` no-fault cases join ``input.json`` (all cases then in window order, so the
    position says nothing) and get their truth in ``nofault.jsonl`` (``"fault": false``);
    ``groundtruth.jsonl`` keeps only real faults, as the challenge scorer expects.
    """
    cases = [{"Anomaly Description": d, "uuid": r["uuid"], "_start": r["start_time"]}
             for r, d in zip(records, descriptions)]
    if quiet:
        cases += [{"Anomaly Description": q["description"], "uuid": q["uuid"], "_start": q["start_time"]} for q in quiet]
        cases.sort(key=lambda c: c["_start"])
        write_text_atomic("".join(json.dumps({"uuid": q["uuid"], "fault": False, "start_time": q["start_time"],
                                              "end_time": q["end_time"]}) + "\n" for q in quiet), out / NO_FAULT_FILE)
    cases = [{"Anomaly Description": c["Anomaly Description"], "uuid": c["uuid"]} for c in cases]
    write_text_atomic(json.dumps(cases, indent=4, ensure_ascii=False) + "\n", out / "input.json")
    write_text_atomic("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), out / "groundtruth.jsonl")
