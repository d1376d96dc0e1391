"""Infrastructure KPIs of one CST day: pods, nodes, TiDB, TiKV and PD, once a minute.

Baselines follow the same diurnal load as the traces, get smooth noise (scaled by
difficulty), then fault and blip effects (``effects.apply_metric_effects``). The result is
long-format rows per KPI in the real column layout (data-contract §2.2); unused label
columns hold the string ``"null"``.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from simulate.effects import MetricFrame, apply_metric_effects
from simulate.requests import minute_load
from simulate.schedule import Fault
from simulate.topology import ALL_NODES, ALL_PODS, MASTER_NODES, NODE_IP, Placement, pod_ip

NULL = "null"
POD_KPIS = ("pod_cpu_usage", "pod_memory_working_set_bytes", "pod_processes", "pod_fs_reads_bytes",
            "pod_fs_writes_bytes", "pod_network_receive_bytes", "pod_network_transmit_bytes",
            "pod_network_receive_packets", "pod_network_transmit_packets")
NODE_KPIS = ("node_cpu_usage_rate", "node_memory_usage_rate", "node_memory_MemAvailable_bytes",
             "node_memory_MemTotal_bytes", "node_filesystem_usage_rate", "node_filesystem_size_bytes",
             "node_filesystem_free_bytes", "node_disk_read_bytes_total", "node_disk_read_time_seconds_total",
             "node_disk_written_bytes_total", "node_disk_write_time_seconds_total",
             "node_network_receive_bytes_total", "node_network_transmit_bytes_total",
             "node_network_receive_packets_total", "node_network_transmit_packets_total",
             "node_sockstat_TCP_inuse")
TIDB_KPIS = ("connection_count", "failed_query_ops", "duration_99th", "duration_95th", "duration_avg", "qps",
             "slow_query", "block_cache_size", "uptime", "cpu_usage", "memory_usage", "statement_avg_queries",
             "transaction_retry", "ddl_job_count", "top_sql_cpu", "server_is_up")
TIKV_KPIS = ("store_size", "available_size", "capacity_size", "cpu_usage", "memory_usage", "io_util",
             "write_wal_mbps", "read_mbps", "qps", "grpc_qps", "threadpool_readpool_cpu", "raft_propose_wait",
             "raft_apply_wait", "region_pending", "rocksdb_write_stall", "snapshot_apply_count", "server_is_up",
             "block_cache_size")
PD_KPIS = ("storage_capacity", "storage_size", "storage_used_ratio", "store_up_count", "store_down_count",
           "store_unhealth_count", "store_low_space_count", "store_slow_count", "abnormal_region_count",
           "region_health", "region_count", "leader_count", "learner_count", "witness_count", "leader_primary",
           "cpu_usage", "memory_usage")

# (baseline, relative noise, follows load) per KPI; pods get a per-service size factor.
_POD_BASE = {"pod_cpu_usage": (8.0, 0.08, True), "pod_memory_working_set_bytes": (2.5e8, 0.01, False),
             "pod_processes": (1.0, 0.0, False), "pod_fs_reads_bytes": (2e3, 0.5, False),
             "pod_fs_writes_bytes": (2e4, 0.4, False), "pod_network_receive_bytes": (6e4, 0.08, True),
             "pod_network_transmit_bytes": (8e4, 0.08, True), "pod_network_receive_packets": (300.0, 0.08, True),
             "pod_network_transmit_packets": (320.0, 0.08, True)}
_NODE_BASE = {"node_cpu_usage_rate": (25.0, 0.05, True), "node_memory_usage_rate": (55.0, 0.01, False),
              "node_memory_MemTotal_bytes": (32 * 2**30, 0.0, False), "node_filesystem_usage_rate": (42.0, 0.0, False),
              "node_filesystem_size_bytes": (100 * 2**30, 0.0, False), "node_disk_read_bytes_total": (4e4, 0.4, False),
              "node_disk_read_time_seconds_total": (0.004, 0.4, False),
              "node_disk_written_bytes_total": (6e5, 0.3, True),
              "node_disk_write_time_seconds_total": (0.03, 0.3, True),
              "node_network_receive_bytes_total": (9e5, 0.08, True),
              "node_network_transmit_bytes_total": (1e6, 0.08, True),
              "node_network_receive_packets_total": (2500.0, 0.08, True),
              "node_network_transmit_packets_total": (2600.0, 0.08, True), "node_sockstat_TCP_inuse": (450.0, 0.03, True)}
_TIDB_BASE = {"connection_count": (40.0, 0.05, True), "failed_query_ops": (0.0, 0.0, False),
              "duration_99th": (0.02, 0.15, True), "duration_95th": (0.008, 0.12, True),
              "duration_avg": (0.002, 0.1, True), "qps": (300.0, 0.06, True), "slow_query": (0.0, 0.0, False),
              "block_cache_size": (1e9, 0.0, False), "uptime": (1.0, 0.0, False), "cpu_usage": (12.0, 0.08, True),
              "memory_usage": (8e8, 0.01, False), "statement_avg_queries": (280.0, 0.06, True),
              "transaction_retry": (0.0, 0.0, False), "ddl_job_count": (0.0, 0.0, False),
              "top_sql_cpu": (5.0, 0.15, True), "server_is_up": (1.0, 0.0, False)}
_TIKV_BASE = {"store_size": (2.2e9, 0.0, False), "available_size": (8e10, 0.0, False),
              "capacity_size": (1e11, 0.0, False), "cpu_usage": (15.0, 0.08, True), "memory_usage": (1.5e9, 0.01, False),
              "io_util": (4.0, 0.2, True), "write_wal_mbps": (0.5, 0.2, True), "read_mbps": (1.5, 0.2, True),
              "qps": (600.0, 0.06, True), "grpc_qps": (650.0, 0.06, True),
              "threadpool_readpool_cpu": (3.0, 0.1, True), "raft_propose_wait": (0.002, 0.15, False),
              "raft_apply_wait": (0.004, 0.15, False), "region_pending": (0.0, 0.0, False),
              "rocksdb_write_stall": (0.0, 0.0, False), "snapshot_apply_count": (0.0, 0.0, False),
              "server_is_up": (1.0, 0.0, False), "block_cache_size": (5e8, 0.0, False)}
_PD_BASE = {"storage_capacity": (1e11, 0.0, False), "storage_size": (2.2e9, 0.0, False),
            "storage_used_ratio": (0.022, 0.0, False), "store_up_count": (1.0, 0.0, False),
            "store_down_count": (0.0, 0.0, False), "store_unhealth_count": (0.0, 0.0, False),
            "store_low_space_count": (0.0, 0.0, False), "store_slow_count": (0.0, 0.0, False),
            "abnormal_region_count": (0.0, 0.0, False), "region_health": (40.0, 0.0, False),
            "region_count": (40.0, 0.0, False), "leader_count": (40.0, 0.0, False), "learner_count": (0.0, 0.0, False),
            "witness_count": (0.0, 0.0, False), "leader_primary": (1.0, 0.0, False), "cpu_usage": (3.0, 0.1, False),
            "memory_usage": (2e8, 0.01, False)}
_SERVICE_SIZE = {"frontend": 2.0, "recommendationservice": 1.8, "adservice": 2.5, "cartservice": 1.5,
                 "checkoutservice": 0.8, "productcatalogservice": 1.2, "currencyservice": 1.4,
                 "redis-cart": 0.6, "tidb": 3.0}
# KPIs whose rows are split by a label in the real TiDB data.
TIDB_SPLITS: dict[str, tuple[str, tuple[str, ...], tuple[float, ...]]] = {
    "qps": ("type", ("Query", "StmtExecute", "StmtPrepare"), (0.6, 0.3, 0.1)),
    "duration_99th": ("sql_type", ("Select", "Insert", "general"), (1.0, 1.3, 0.6)),
    "failed_query_ops": ("type", ("executor", "planner"), (0.8, 0.2)),
}


@dataclass
class InfraRows:
    """Column arrays of one long-format KPI file."""

    family: str  # infra_pod | infra_node | infra_tidb | infra_tikv | infra_pd
    kpi_key: str
    time_s: np.ndarray
    labels: dict[str, np.ndarray]  # cf, device, instance, kubernetes_node, mountpoint, namespace, object_type, pod, sql_type, type
    value: np.ndarray


def _entity_scale(name: str) -> float:
    for key, size in _SERVICE_SIZE.items():
        if name.startswith(key):
            return size
    return 1.0


def _series(base: dict[str, tuple[float, float, bool]], kpis: tuple[str, ...], *, count: int, scales: np.ndarray,
            load: np.ndarray, noise_scale: float, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    t = len(load)
    for kpi in kpis:
        level, rel_noise, follows = base[kpi]
        shape = load[None, :] if follows else np.ones((1, t))
        values = level * scales[:, None] * shape
        if rel_noise:
            white = rng.normal(0, 1, (count, t))
            smooth = (white + np.roll(white, 1, axis=1) + np.roll(white, 2, axis=1)) / np.sqrt(3)
            values = values * np.maximum(1 + rel_noise * noise_scale * smooth, 0.05)
        out[kpi] = values.astype(float)
    return out


def build_day_metrics(*, minutes_s: np.ndarray, faults: list[Fault], placement: Placement,
                      pods_on_node: dict[str, tuple[str, ...]], strength: float, noise_scale: float,
                      rng: np.random.Generator) -> MetricFrame:
    """Baselines plus fault effects for the given minutes (epoch seconds, one CST day)."""
    load = minute_load(minutes_s=minutes_s, traces_per_hour=60.0)
    load = load / load.mean() if len(load) else load
    pod_scale = np.array([_entity_scale(p) * rng.uniform(0.8, 1.2) for p in ALL_PODS])
    node_scale = np.array([rng.uniform(0.7, 1.3) if n not in MASTER_NODES else 0.6 for n in ALL_NODES])
    frame = MetricFrame(
        minutes_s=minutes_s,
        pod=_series(_POD_BASE, POD_KPIS, count=len(ALL_PODS), scales=pod_scale, load=load,
                    noise_scale=noise_scale, rng=rng),
        pod_names=ALL_PODS,
        node=_series(_NODE_BASE | {"node_memory_MemAvailable_bytes": (0.0, 0.0, False),
                                   "node_filesystem_free_bytes": (0.0, 0.0, False)},
                     NODE_KPIS, count=len(ALL_NODES), scales=node_scale, load=load, noise_scale=noise_scale, rng=rng),
        node_names=ALL_NODES,
        tidb=_series(_TIDB_BASE, TIDB_KPIS, count=1, scales=np.ones(1), load=load, noise_scale=noise_scale, rng=rng),
        tikv=_series(_TIKV_BASE, TIKV_KPIS, count=1, scales=np.ones(1), load=load, noise_scale=noise_scale, rng=rng),
        pd=_series(_PD_BASE, PD_KPIS, count=1, scales=np.ones(1), load=load, noise_scale=noise_scale, rng=rng),
    )
    # Totals are constants per node; the dependent KPIs are derived so they stay consistent.
    node = frame.node
    node["node_memory_MemTotal_bytes"][:] = 32 * 2**30
    node["node_filesystem_size_bytes"][:] = 100 * 2**30
    node["node_filesystem_usage_rate"] += rng.uniform(-10, 15, (len(ALL_NODES), 1))
    node["node_memory_usage_rate"] *= rng.uniform(0.8, 1.2, (len(ALL_NODES), 1))
    node["node_memory_MemAvailable_bytes"][:] = node["node_memory_MemTotal_bytes"] * (1 - node["node_memory_usage_rate"] / 100)
    node["node_filesystem_free_bytes"][:] = node["node_filesystem_size_bytes"] * (1 - node["node_filesystem_usage_rate"] / 100)
    apply_metric_effects(frame, faults, strength=strength, pods_on_node=pods_on_node, rng=rng)
    for kpi in ("pod_processes",):
        frame.pod[kpi] = np.maximum(np.round(frame.pod[kpi]), 0)
    node["node_memory_usage_rate"] = np.clip(node["node_memory_usage_rate"], 0, 99.5)
    node["node_filesystem_usage_rate"] = np.clip(node["node_filesystem_usage_rate"], 0, 99.9)
    return frame


def _labels(n: int, **given: np.ndarray | str) -> dict[str, np.ndarray]:
    names = ("cf", "device", "instance", "kubernetes_node", "mountpoint", "namespace", "object_type", "pod",
             "sql_type", "type")
    out = {}
    for name in names:
        value = given.get(name, NULL)
        out[name] = np.full(n, value, dtype=object) if isinstance(value, str) else value.astype(object)
    return out


def infra_rows(frame: MetricFrame, *, placement: Placement, day_start_s: int) -> list[InfraRows]:
    """Long-format rows of every infra KPI file of the day."""
    t = frame.minutes_s
    n_t = len(t)
    minute_of_day = ((t - day_start_s) // 60).astype(int)
    files: list[InfraRows] = []
    for kpi in POD_KPIS:
        values = frame.pod[kpi]
        nodes = np.concatenate([placement.node_at(p, minute_of_day) for p in ALL_PODS]) if n_t else np.array([])
        pods = np.repeat(np.array(ALL_PODS, dtype=object), n_t)
        namespace = np.where(np.char.startswith(pods.astype(str), "tidb-"), "tidb", "hipstershop").astype(object)
        files.append(InfraRows("infra_pod", kpi, np.tile(t, len(ALL_PODS)),
                               _labels(len(pods), instance=nodes, pod=pods, namespace=namespace,
                                       object_type="pod"), np.round(values.reshape(-1), 4)))
    for kpi in NODE_KPIS:
        n = len(ALL_NODES) * n_t
        disk = "disk" in kpi
        fs = "filesystem" in kpi
        files.append(InfraRows(
            "infra_node", kpi, np.tile(t, len(ALL_NODES)),
            _labels(n, kubernetes_node=np.repeat(np.array(ALL_NODES, dtype=object), n_t),
                    instance=np.repeat(np.array([NODE_IP[x] + ":9100" for x in ALL_NODES], dtype=object), n_t),
                    device="vda" if disk else ("/dev/vda1" if fs else NULL), mountpoint="/" if fs else NULL,
                    object_type="node"),
            np.round(frame.node[kpi].reshape(-1), 4)))
    for family, series, kpis, obj, inst in (("infra_tidb", frame.tidb, TIDB_KPIS, "tidb", pod_ip("tidb-tidb-0") + ":10080"),
                                            ("infra_tikv", frame.tikv, TIKV_KPIS, "tikv", pod_ip("tidb-tikv-0") + ":20180"),
                                            ("infra_pd", frame.pd, PD_KPIS, "pd", pod_ip("tidb-pd-0") + ":2379")):
        for kpi in kpis:
            value = series[kpi][0]
            split = TIDB_SPLITS.get(kpi) if family == "infra_tidb" else None
            pod = f"tidb-{obj}-0"
            if split is None:
                files.append(InfraRows(family, kpi, t.copy(), _labels(n_t, instance=inst, namespace="tidb",
                                                                     object_type=obj, pod=pod), np.round(value, 6)))
                continue
            column, names, shares = split
            labels = _labels(n_t * len(names), instance=inst, namespace="tidb", object_type=obj, pod=pod)
            labels[column] = np.repeat(np.array(names, dtype=object), n_t)
            values = np.concatenate([value * share for share in shares])
            files.append(InfraRows(family, kpi, np.tile(t, len(names)), labels, np.round(values, 6)))
    return files


def stable_seed(*parts: str | int) -> int:
    """Deterministic 32-bit seed component from names (hash() is salted per process)."""
    return zlib.crc32("/".join(str(p) for p in parts).encode())
