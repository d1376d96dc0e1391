"""Test-only writer of a tiny CST day directory in the exact released layout, with every variant.

Variants written on purpose (docs/data-contract.md):
- hour files named ``_HH-00-00`` and, for ``fifty_nine_hours``, ``_HH-59-00``; hours in
  ``missing_hours`` are not written;
- infra times as ``...Z`` strings (infra_pod), ``... +00:00`` strings (infra_node), naive strings
  (infra_tidb, tikv, pd); APM times as ISO strings (pod level) and tz-aware timestamps (service);
- label columns holding the string ``"null"``; one APM file whose name contains ``deleted``;
- Jaeger spans with pod in process tag ``name`` or ``podName``, node in ``node_name`` or
  ``nodeName``, serviceName ``redis``, status.code as a string, ``error`` and ``http.status_code``
  tags, ``rpc.service`` / ``db.system`` / operation-name callees, with and without a leading slash.

Known truth the tests rely on (per CST hour of the fixture):
- logs: one row per minute at second 27.724, pods cycling through ``LOG_PODS``;
- traces: one trace every ``TRACE_EVERY_MIN`` minutes starting at minute 0, each with the
  spans of ``_trace_spans`` and the call edges of ``TRACE_EDGES`` once;
- metrics: one row per minute over the whole CST day for each file;
  ``cartservice-1`` runs on aiops-k8s-02 before ``MOVE_AFTER_MIN`` minutes of the day, then on aiops-k8s-03.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from rca.timeutil import cst_day_bounds_utc

LOG_PODS = ("frontend-0", "cartservice-1", "adservice-2")
LOG_NODES = ("aiops-k8s-01", "aiops-k8s-02", "aiops-k8s-03")
TRACE_EVERY_MIN = 10
SPANS_PER_TRACE = 10
MOVE_AFTER_MIN = 600
APM_PODS = ("frontend-0", "cartservice-1")
APM_DELETED_POD = "cartservice-1"
APM_SERVICES = ("frontend", "cartservice")
INFRA_PODS = ("frontend-0", "cartservice-1", "redis-cart-0", "tidb-tidb-0")
NODES = ("aiops-k8s-01", "aiops-k8s-02", "aiops-k8s-03", "k8s-master1")
TRACE_EDGES = {
    ("frontend", "cartservice"),
    ("frontend", "adservice"),
    ("frontend", "checkoutservice"),
    ("checkoutservice", "paymentservice"),
    ("cartservice", "redis-cart"),
    ("recommendationservice", "productcatalogservice"),
}

_KV = pl.Struct({"key": pl.Utf8, "type": pl.Utf8, "value": pl.Utf8})
_REF = pl.Struct({"refType": pl.Utf8, "spanID": pl.Utf8, "traceID": pl.Utf8})
_LOG = pl.Struct({"fields": pl.List(_KV), "timestamp": pl.Int64})
TRACE_SCHEMA = {
    "traceID": pl.Utf8,
    "spanID": pl.Utf8,
    "flags": pl.Float64,
    "operationName": pl.Utf8,
    "references": pl.List(_REF),
    "startTime": pl.Int64,
    "startTimeMillis": pl.Int64,
    "duration": pl.Int64,
    "tags": pl.List(_KV),
    "logs": pl.List(_LOG),
    "process": pl.Struct({"serviceName": pl.Utf8, "tags": pl.List(_KV)}),
}


def _kv(**pairs: str) -> list[dict[str, str]]:
    return [{"key": k.replace("__", "."), "type": "string", "value": v} for k, v in pairs.items()]


def _process(service: str, *, pod: str, node: str, pod_key: str = "name", node_key: str = "node_name") -> dict:
    return {"serviceName": service, "tags": [{"key": pod_key, "type": "string", "value": pod},
                                             {"key": node_key, "type": "string", "value": node}]}


def _trace_spans(trace_no: int, start_us: int) -> list[dict]:
    """Ten spans of one trace; ids are deterministic from ``trace_no``."""
    trace_id = f"{trace_no:032x}"

    def sid(i: int) -> str:
        return f"{trace_no:08x}{i:08x}"

    def ref(i: int, kind: str = "CHILD_OF") -> dict[str, str]:
        return {"refType": kind, "spanID": sid(i), "traceID": trace_id}

    fe = _process("frontend", pod="frontend-0", node="aiops-k8s-01")
    cart = _process("cartservice", pod="cartservice-1", node="aiops-k8s-02", pod_key="podName", node_key="nodeName")
    redis = _process("redis", pod="redis-cart-0", node="aiops-k8s-03", pod_key="podName")
    checkout = _process("checkoutservice", pod="checkoutservice-0", node="aiops-k8s-01")
    reco = _process("recommendationservice", pod="recommendationservice-2", node="aiops-k8s-03")
    # Redis under its own process on every other trace of an hour, inside cartservice otherwise.
    redis_span_process = redis if (trace_no % 100 // TRACE_EVERY_MIN) % 2 else cart
    rows = [
        # (index, operation, references, tags, process)
        (1, "hipstershop.Frontend/Recv.", [], _kv(span__kind="server", http__status_code="503"), fe),
        (2, "hipstershop.CartService/GetCart", [ref(1)],
         _kv(span__kind="client", rpc__service="hipstershop.CartService", status__code="0"), fe),
        (3, "POST /hipstershop.CartService/GetCart", [ref(9, "FOLLOWS_FROM"), ref(2)],
         _kv(span__kind="server", status__code="0"), cart),
        (4, "HGET", [ref(3)], _kv(span__kind="client", db__system="redis"), redis_span_process),
        (5, "hipstershop.AdService/GetAds", [ref(1)],
         _kv(span__kind="client", status__code="2", error="true"), fe),
        (6, "hipstershop.CheckoutService/PlaceOrder", [ref(1)],
         _kv(span__kind="client", rpc__service="hipstershop.CheckoutService", status__code="0"), fe),
        (7, "hipstershop.CheckoutService/PlaceOrder", [ref(6)], _kv(span__kind="server", status__code="0"), checkout),
        (8, "hipstershop.PaymentService/Charge", [ref(7)],
         _kv(span__kind="client", rpc__service="hipstershop.PaymentService", status__code="0"), checkout),
        (9, "/hipstershop.RecommendationService/ListRecommendations", [], _kv(span__kind="server"), reco),
        (10, "/hipstershop.ProductCatalogService/ListProducts", [ref(9)], _kv(span__kind="client"), reco),
    ]
    return [
        {
            "traceID": trace_id, "spanID": sid(i), "flags": 1.0, "operationName": op, "references": refs,
            "startTime": start_us + i, "startTimeMillis": (start_us + i) // 1000, "duration": 1000 * i,
            "tags": tags, "logs": [], "process": process,
        }
        for i, op, refs, tags, process in rows
    ]


def _write(frame: pl.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(path)


def _minutes(day_start: datetime) -> list[datetime]:
    return [day_start + timedelta(minutes=m) for m in range(1440)]


def _infra_frame(times: list[datetime], *, kpi: str, time_format: str, rows: list[dict[str, str]]) -> pl.DataFrame:
    """Long-format KPI file: every row of ``rows`` (label overrides) at every minute."""
    records = []
    for label in rows:
        for m, t in enumerate(times):
            base = {c: "null" for c in ("cf", "device", "instance", "kpi_name", "kubernetes_node", "mountpoint",
                                        "namespace", "object_type", "pod", "sql_type", "type")}
            base.update({k: (v(m) if callable(v) else v) for k, v in label.items()})
            records.append({"time": t.strftime(time_format), "kpi_key": kpi, **base, kpi: float(m)})
    return pl.DataFrame(records)


def write_day(
    data_dir: Path,
    day: str,
    *,
    missing_hours: tuple[int, ...] = (),
    fifty_nine_hours: tuple[int, ...] = (3,),
) -> Path:
    """Write one CST day directory under ``data_dir`` and return it."""
    root = Path(data_dir) / day
    day_start, _ = cst_day_bounds_utc(day)
    epoch = datetime(1970, 1, 1, tzinfo=day_start.tzinfo)

    for hour in range(24):
        if hour in missing_hours:
            continue
        suffix = "59-00" if hour in fifty_nine_hours else "00-00"
        hour_start = day_start + timedelta(hours=hour)
        logs = pl.DataFrame({
            "k8_namespace": ["hipstershop"] * 60,
            "@timestamp": [(hour_start + timedelta(minutes=m, seconds=27, milliseconds=724))
                           .strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" for m in range(60)],
            "agent_name": ["filebeat-filebeat-nx7q2"] * 60,
            "k8_pod": [LOG_PODS[m % 3] for m in range(60)],
            "k8_node_name": [LOG_NODES[m % 3] if m != 59 else "null" for m in range(60)],
            "message": ['{"message":"request error","severity":"error"}' if m % 3 == 0 else "plain line"
                        for m in range(60)],
        })
        _write(logs, root / "log-parquet" / f"log_filebeat-server_{day}_{hour:02d}-{suffix}.parquet")
        spans: list[dict] = []
        for m in range(0, 60, TRACE_EVERY_MIN):
            start_us = int((hour_start + timedelta(minutes=m) - epoch).total_seconds()) * 1_000_000
            spans += _trace_spans(hour * 100 + m, start_us)
        _write(pl.DataFrame(spans, schema=TRACE_SCHEMA),
               root / "trace-parquet" / f"trace_jaeger-span_{day}_{hour:02d}-{suffix}.parquet")

    times = _minutes(day_start)
    metric = root / "metric-parquet"
    for pod in APM_PODS:
        name = f"pod_{pod}-deleted_{day}.parquet" if pod == APM_DELETED_POD else f"pod_{pod}_{day}.parquet"
        _write(_apm_frame(times, object_id=pod, object_type="pod", as_string=True), metric / "apm" / "pod" / name)
    for service in APM_SERVICES:
        _write(_apm_frame(times, object_id=service, object_type="service", as_string=False),
               metric / "apm" / "service" / f"service_{service}_{day}.parquet")

    pod_rows = [
        {"pod": p, "namespace": "tidb" if p.startswith("tidb") else "hipstershop",
         "instance": (lambda m: "aiops-k8s-02" if m < MOVE_AFTER_MIN else "aiops-k8s-03")
         if p == "cartservice-1" else "aiops-k8s-01"}
        for p in INFRA_PODS
    ]
    for kpi in ("pod_cpu_usage", "pod_processes"):
        _write(_infra_frame(times, kpi=kpi, time_format="%Y-%m-%dT%H:%M:%SZ", rows=pod_rows),
               metric / "infra" / "infra_pod" / f"infra_pod_{kpi}_{day}.parquet")
    node_rows = [{"kubernetes_node": n, "instance": f"10.0.0.{i}"} for i, n in enumerate(NODES)]
    _write(_infra_frame(times, kpi="node_cpu_usage_rate", time_format="%Y-%m-%d %H:%M:%S+00:00", rows=node_rows),
           metric / "infra" / "infra_node" / f"infra_node_node_cpu_usage_rate_{day}.parquet")
    naive = "%Y-%m-%d %H:%M:%S"
    _write(_infra_frame(times, kpi="qps", time_format=naive,
                        rows=[{"namespace": "tidb", "sql_type": "Select"}, {"namespace": "tidb", "sql_type": "Insert"}]),
           metric / "infra" / "infra_tidb" / f"infra_tidb_qps_{day}.parquet")
    _write(_infra_frame(times, kpi="io_util", time_format=naive,
                        rows=[{"object_type": "tikv", "instance": "10.0.1.1:20180"}]),
           metric / "other" / f"infra_tikv_io_util_{day}.parquet")
    _write(_infra_frame(times, kpi="store_up_count", time_format=naive, rows=[{"object_type": "pd"}]),
           metric / "other" / f"infra_pd_store_up_count_{day}.parquet")
    return root


def _apm_frame(times: list[datetime], *, object_id: str, object_type: str, as_string: bool) -> pl.DataFrame:
    n = len(times)
    frame = pl.DataFrame({
        "time": [t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in times] if as_string else times,
        "object_id": [object_id] * n,
        "object_type": [object_type] * n,
        "request": list(range(n)),
        "response": list(range(n)),
        "rrt": [1000.0] * n,
        "rrt_max": [5000] * n,
        "error": [0] * n,
        "client_error": [0] * n,
        "server_error": [0] * n,
        "timeout": [0] * n,
        "error_ratio": [0.0] * n,
        "client_error_ratio": [0.0] * n,
        "server_error_ratio": [0.0] * n,
    })
    return frame
