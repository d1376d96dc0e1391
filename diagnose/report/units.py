"""The unit of a KPI, for axis labels (data contract §2: APM, pod, node and TiDB KPIs).

The challenge's data does not carry units; these follow the data contract: rates named
``*_bytes``/``*_total`` are per-second (``irate``), ``*_rate``/``*_ratio`` and error ratios
are percent, ``rrt`` is microseconds, TiDB durations are seconds.
"""
from __future__ import annotations

_EXACT: dict[str, str] = {
    "rrt": "µs", "rrt_max": "µs",
    "error_ratio": "%", "client_error_ratio": "%", "server_error_ratio": "%",
    "request": "req/min", "response": "resp/min", "error": "errors/min", "client_error": "errors/min",
    "server_error": "errors/min", "timeout": "timeouts/min",
    "pod_cpu_usage": "%", "pod_processes": "processes",
    "pod_memory_working_set_bytes": "B",
    "qps": "queries/s", "grpc_qps": "req/s", "connection_count": "connections",
    "failed_query_ops": "ops/s", "slow_query": "queries/s", "statement_avg_queries": "queries/s",
    "io_util": "%", "cpu_usage": "%", "memory_usage": "B", "store_size": "B", "available_size": "B",
    "capacity_size": "B", "storage_size": "B", "storage_capacity": "B", "block_cache_size": "B",
    "write_wal_mbps": "MB/s", "read_mbps": "MB/s", "storage_used_ratio": "",
    "node_sockstat_TCP_inuse": "sockets",
}


def kpi_unit(kpi: str) -> str:
    """Unit of ``kpi`` as an axis label suffix ("" when dimensionless or unknown)."""
    if kpi in _EXACT:
        return _EXACT[kpi]
    if kpi.endswith(("_rate", "_ratio")):
        return "%"
    if kpi.endswith("_seconds_total"):
        return "s/s"
    if kpi.endswith(("_bytes_total",)) or (kpi.endswith("_bytes") and ("network" in kpi or "_fs_" in kpi)):
        return "B/s"
    if kpi.endswith("_bytes"):
        return "B"
    if kpi.endswith(("_packets", "_packets_total")):
        return "packets/s"
    if kpi.startswith("duration_") or kpi.endswith("_wait"):
        return "s"
    if kpi.endswith("_count"):
        return "count"
    return ""


def display_unit(unit: str) -> tuple[str, float]:
    """The unit to plot in and the factor to multiply values by: latencies in ms read better than µs."""
    if unit == "µs":
        return "ms", 1e-3
    return unit, 1.0
