"""What each fault (and each benign blip) does to calls and to infrastructure KPIs.

This is the one place where fault semantics live. Two views of the same fault:
- ``call_effects``: per call (a span), latency multipliers, added latency, error
  probabilities with an error kind, and refused connections;
- ``apply_metric_effects``: per minute, shifts of pod/node/TiDB KPIs.
Effect sizes are multiplied by ``strength`` (= 1 / difficulty).
Benign blips and confounders are ``Fault`` objects whose type starts with ``blip``;
they never reach the ground truth.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from simulate.schedule import Fault
from simulate.topology import ALL_PODS, pods_of

POD_ID: dict[str, int] = {p: i for i, p in enumerate(ALL_PODS)}
POD_KILL_OUTAGE_S = 45  # a killed pod refuses connections until its replacement is ready
# A cpu stress beyond the fixed world's (strength 1) queues each call for this many times its own
# time per squared unit of the excess: 4x the stress, about 50x the time (real: median 50x).
CPU_QUEUE_GROWTH = 4.5


class ErrorKind(IntEnum):
    NONE = 0
    REFUSED = 1
    DEADLINE = 2
    UNAVAILABLE = 3
    CANCELED = 4
    DNS = 5
    INJECTED = 6
    INTERNAL = 7
    REGION = 8
    PD_TIMEOUT = 9
    TIDB_REFUSED = 10
    IO_TIMEOUT = 11


# gRPC status code carried by a failed span of each kind.
GRPC_CODE: dict[ErrorKind, int] = {
    ErrorKind.REFUSED: 14, ErrorKind.DEADLINE: 4, ErrorKind.UNAVAILABLE: 14, ErrorKind.CANCELED: 1,
    ErrorKind.DNS: 14, ErrorKind.INJECTED: 2, ErrorKind.INTERNAL: 13, ErrorKind.REGION: 2,
    ErrorKind.PD_TIMEOUT: 2, ErrorKind.TIDB_REFUSED: 2, ErrorKind.IO_TIMEOUT: 14,
}
# Client-side failures (the call never got a proper answer) versus server-side ones, for APM.
CLIENT_SIDE_KINDS = frozenset({ErrorKind.REFUSED, ErrorKind.UNAVAILABLE, ErrorKind.CANCELED, ErrorKind.DNS,
                               ErrorKind.IO_TIMEOUT})
TIMEOUT_KINDS = frozenset({ErrorKind.DEADLINE, ErrorKind.IO_TIMEOUT})
# A handler that throws or returns an error from its own code stops there: the calls it would
# have made after that point are never made (Nezha's injected code faults, docs/generalisation.md).
EARLY_RETURN_KINDS = frozenset({ErrorKind.INJECTED, ErrorKind.INTERNAL})
CODE_FAULTS = ("jvm exception", "code error")

CHRONIC_INJECTED_SHARE = 0.012  # adservice's everyday "Injected error" on GetAds calls


@dataclass
class CallEffect:
    """Per-call effect arrays (length n)."""

    mult: np.ndarray  # multiplier on the callee's own processing time
    add_us: np.ndarray  # latency added on the wire
    err_p: np.ndarray  # probability the call fails with err_kind
    err_kind: np.ndarray  # ErrorKind codes (int8)
    refused_p: np.ndarray  # probability the connection is refused (callee never sees the call)
    site: np.ndarray  # the code fault whose code the call runs (code_site), 0 for none

    @classmethod
    def neutral(cls, n: int) -> CallEffect:
        return cls(np.ones(n), np.zeros(n), np.zeros(n), np.zeros(n, dtype=np.int8), np.zeros(n),
                   np.zeros(n, dtype=np.int64))

    def fail(self, mask: np.ndarray, p: float, kind: ErrorKind) -> None:
        self.err_p = np.where(mask, np.maximum(self.err_p, p), self.err_p)
        self.err_kind = np.where(mask & (self.err_kind == 0), np.int8(kind), self.err_kind).astype(np.int8)


def code_site(fault: Fault) -> int:
    """A code fault's place in the code, stable across runs: where its handlers fail."""
    return zlib.crc32(fault.uuid.encode()) + 1


def _pod_mask(pods: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
    return np.isin(pods, [POD_ID[p] for p in names if p in POD_ID])


def server_effects(eff: CallEffect, faults: list[Fault], *, t_s: np.ndarray, service: str, pods: np.ndarray,
                   pods_on_node: dict[str, tuple[str, ...]], strength: float) -> None:
    """Effects on the processing of a call by ``service``'s pods (server side)."""
    base_strength = strength
    for f in faults:
        active = f.active(t_s) if f.fault_type != "pod kill" else np.zeros(t_s.shape, bool)
        if not active.any():
            continue
        strength = base_strength * f.effect
        ft = f.fault_type
        if ft == "node cpu stress" or ft == "blip node cpu" or ft == "node memory stress":
            on = active & _pod_mask(pods, pods_on_node.get(f.node, ()))
            eff.mult = np.where(on, eff.mult * (1 + (0.6 if ft == "node cpu stress" else 0.25) * strength), eff.mult)
            eff.add_us = np.where(on, eff.add_us + (4_000 if ft == "node cpu stress" else 1_500) * strength,
                                  eff.add_us)
            continue
        hit = active & _pod_mask(pods, f.pods)
        if not hit.any():
            continue
        # CPU starvation also queues requests in the pod: a fixed delay on top of slower work, and a
        # wait that grows faster than the stress once the CPU is held at its quota (the culprit's
        # rrt under a real cpu stress: median 50x, Nezha 2022-08-22; a linear effect gave 1.7-16x).
        if ft == "cpu stress":
            queue = CPU_QUEUE_GROWTH * max(0.0, strength - 1.0) ** 2
            eff.mult = np.where(hit, eff.mult * (1 + 2.0 * strength + queue), eff.mult)
            eff.add_us = np.where(hit, eff.add_us + 15_000 * strength, eff.add_us)
        elif ft == "memory stress":
            eff.mult = np.where(hit, eff.mult * (1 + 0.6 * strength), eff.mult)
            eff.add_us = np.where(hit, eff.add_us + 4_000 * strength, eff.add_us)
            eff.fail(hit, 0.03 * strength, ErrorKind.UNAVAILABLE)
        elif ft == "jvm cpu":
            eff.mult = np.where(hit, eff.mult * (1 + 4.0 * strength), eff.mult)
            eff.add_us = np.where(hit, eff.add_us + 20_000 * strength, eff.add_us)
        elif ft == "jvm gc":
            eff.mult = np.where(hit, eff.mult * (1 + 6.0 * strength), eff.mult)
            eff.fail(hit, 0.15 * strength, ErrorKind.DEADLINE)
        elif ft == "jvm latency":
            eff.add_us = np.where(hit, eff.add_us + 400_000 * strength, eff.add_us)
            eff.fail(hit, 0.25 * strength, ErrorKind.DEADLINE)
        elif ft == "jvm exception":
            eff.fail(hit, min(0.9, 0.6 * strength), ErrorKind.INJECTED)
        elif ft == "code error":
            eff.mult = np.where(hit, eff.mult * 1.3, eff.mult)
            eff.fail(hit, min(0.9, 0.45 * strength), ErrorKind.INTERNAL)
        elif ft in ("blip latency",):
            eff.mult = np.where(hit, eff.mult * 2.5, eff.mult)
        elif ft == "blip errors":
            eff.fail(hit, 0.08, ErrorKind.DEADLINE)
        if ft in CODE_FAULTS:
            eff.site = np.where(hit, code_site(f), eff.site)
    if service == "productcatalogservice":
        _tidb_effects(eff, faults, t_s=t_s, strength=base_strength)


def _tidb_effects(eff: CallEffect, faults: list[Fault], *, t_s: np.ndarray, strength: float) -> None:
    """TiDB never appears in traces: its faults surface in productcatalogservice's queries."""
    base_strength = strength
    for f in faults:
        active = f.active(t_s)
        if not active.any() or not f.service.startswith("tidb-"):
            continue
        strength = base_strength * f.effect
        if f.fault_type == "io fault":
            eff.mult = np.where(active, eff.mult * (1 + 30 * strength), eff.mult)
            eff.fail(active, 0.2 * strength, ErrorKind.REGION)
        elif f.fault_type == "pod failure" and f.service == "tidb-tikv":
            eff.mult = np.where(active, eff.mult * (1 + 60 * strength), eff.mult)
            eff.fail(active, min(0.9, 0.5 * strength), ErrorKind.REGION)
        elif f.fault_type == "pod failure" and f.service == "tidb-pd":
            eff.mult = np.where(active, eff.mult * (1 + 20 * strength), eff.mult)
            eff.fail(active, 0.3 * strength, ErrorKind.PD_TIMEOUT)
        elif f.fault_type == "pod failure" and f.service == "tidb-tidb":
            eff.fail(active, min(0.95, 0.8 * strength), ErrorKind.TIDB_REFUSED)


def edge_effects(eff: CallEffect, faults: list[Fault], *, t_s: np.ndarray, caller: str, caller_pods: np.ndarray,
                 callee: str, callee_pods: np.ndarray, strength: float, rng: np.random.Generator) -> None:
    """Effects on the wire between caller and callee (network, DNS, refused connections)."""
    base_strength = strength
    for f in faults:
        ft = f.fault_type
        strength = base_strength * f.effect
        if ft == "pod kill":
            window = (t_s >= f.start.timestamp()) & (t_s <= f.start.timestamp() + POD_KILL_OUTAGE_S)
            hit = window & _pod_mask(callee_pods, f.pods)
            eff.refused_p = np.where(hit, 0.9, eff.refused_p)
            continue
        active = f.active(t_s)
        if not active.any():
            continue
        if ft.startswith("network") and f.source == caller and f.destination == callee:
            n = int(active.sum())
            if ft == "network delay":
                extra = rng.normal(200_000, 20_000, n) * strength
                eff.add_us[active] += np.maximum(extra, 0)
                eff.fail(active, 0.03 * strength, ErrorKind.DEADLINE)
            else:  # loss and corrupt: retransmissions, then timeouts and broken streams
                retrans = (rng.random(n) < 0.35 * strength) * rng.exponential(300_000, n)
                eff.add_us[active] += retrans
                kind = ErrorKind.UNAVAILABLE if ft == "network loss" else ErrorKind.CANCELED
                eff.fail(active, 0.12 * strength, kind)
        elif ft == "dns error":
            hit = active & _pod_mask(caller_pods, f.pods)
            eff.fail(hit, min(0.9, 0.6 * strength), ErrorKind.DNS)
            eff.add_us = np.where(hit, eff.add_us + 20_000, eff.add_us)
        elif ft == "target port misconfig":
            hit = active & _pod_mask(callee_pods, f.pods)
            eff.refused_p = np.where(hit, 1.0, eff.refused_p)
        elif ft == "pod failure" and not f.service.startswith("tidb-"):
            hit = active & _pod_mask(callee_pods, f.pods)
            eff.refused_p = np.where(hit, 0.97, eff.refused_p)


def pod_down(faults: list[Fault], *, pod: str, t_s: np.ndarray) -> np.ndarray:
    """Minutes (epoch seconds ``t_s``) in which the pod's container is not running."""
    down = np.zeros(t_s.shape, dtype=bool)
    for f in faults:
        if pod not in f.pods:
            continue
        if f.fault_type == "pod failure":
            down |= f.active(t_s) | f.active(t_s + 59)
        elif f.fault_type == "pod kill":
            down |= (t_s <= f.start.timestamp()) & (t_s + 60 > f.start.timestamp())
    return down


def _minute_overlap(f: Fault, minutes_s: np.ndarray) -> np.ndarray:
    """Fraction of each minute [m, m+60) covered by the fault's effect window, scaled by its ramp."""
    lo = np.maximum(minutes_s, f.effect_start_s)
    hi = np.minimum(minutes_s + 60, f.effect_end_s)
    covered = np.clip(hi - lo, 0, 60) / 60.0
    if f.ramp_s > 0:
        covered = covered * np.clip((minutes_s + 30 - f.effect_start_s) / f.ramp_s, 0.0, 1.0)
    return covered


Series = dict[str, np.ndarray]  # kpi_key -> (entities, minutes) values of one family


@dataclass
class MetricFrame:
    """Baseline KPI arrays of one day, indexed by entity name, modified in place by effects."""

    minutes_s: np.ndarray
    pod: Series
    pod_names: tuple[str, ...]
    node: Series
    node_names: tuple[str, ...]
    tidb: Series  # single entity (row 0)
    tikv: Series
    pd: Series

    def pod_rows(self, pods: tuple[str, ...]) -> list[int]:
        return [self.pod_names.index(p) for p in pods if p in self.pod_names]

    def node_row(self, node: str) -> int:
        return self.node_names.index(node)


def apply_metric_effects(frame: MetricFrame, faults: list[Fault], *, strength: float,
                         pods_on_node: dict[str, tuple[str, ...]], rng: np.random.Generator) -> None:
    """Shift KPIs during each fault window (partial minutes get a proportional share)."""
    for f in faults:
        s = strength * f.effect
        w = _minute_overlap(f, frame.minutes_s)
        if f.fault_type == "pod kill":
            w = ((frame.minutes_s <= f.start.timestamp()) & (frame.minutes_s + 60 > f.start.timestamp())).astype(float)
        if not w.any():
            continue
        ft, rows = f.fault_type, frame.pod_rows(f.pods)
        p = frame.pod
        if ft in ("cpu stress", "jvm cpu"):
            p["pod_cpu_usage"][rows] += w * (60.0 if ft == "cpu stress" else 45.0) * s
            p["pod_processes"][rows] += w * (2 if ft == "cpu stress" else 0)
        elif ft == "memory stress":
            ramp = np.cumsum(w) / max(w.sum(), 1)
            p["pod_memory_working_set_bytes"][rows] += w * ramp * 1.2e9 * s
            p["pod_processes"][rows] += w * 2
        elif ft == "jvm gc":
            p["pod_cpu_usage"][rows] += w * 25.0 * s
            p["pod_memory_working_set_bytes"][rows] += w * rng.uniform(0.1e9, 0.4e9, w.shape) * s
        elif ft == "jvm exception":
            p["pod_cpu_usage"][rows] += w * 6.0 * s
            for k in ("pod_network_receive_bytes", "pod_network_transmit_bytes",
                      "pod_network_receive_packets", "pod_network_transmit_packets"):
                p[k][rows] *= 1 + w * 0.3 * s
        elif ft.startswith("network"):
            src = frame.pod_rows(pods_of(f.source))
            dst = frame.pod_rows(pods_of(f.destination))
            factor = {"network delay": -0.45, "network loss": -0.35, "network corrupt": 0.3}[ft] * s
            for k in ("pod_network_receive_bytes", "pod_network_transmit_bytes",
                      "pod_network_receive_packets", "pod_network_transmit_packets"):
                p[k][src + dst] *= np.maximum(1 + w * factor, 0.05)
            if ft == "network delay":
                p["pod_memory_working_set_bytes"][src] += w * 6e7 * s
            if ft == "network loss":
                p["pod_cpu_usage"][src] *= 1 + w * 0.4 * s
        elif ft == "pod failure" and not f.service.startswith("tidb-"):
            for k in p:
                p[k][rows] *= 1 - w
        elif ft == "pod kill":
            for k in p:
                p[k][rows] *= 1 - 0.95 * w
            after = (frame.minutes_s > f.start.timestamp()) & (frame.minutes_s < f.start.timestamp() + 900)
            regrow = np.clip((frame.minutes_s - f.start.timestamp()) / 900, 0.3, 1.0)
            p["pod_memory_working_set_bytes"][rows] *= np.where(after, regrow, 1.0)
        elif ft == "code error":
            flap = (rng.random(w.shape) < 0.5) * w
            p["pod_processes"][rows] += np.where(flap > 0, -1.0, 1.0) * w
            p["pod_cpu_usage"][rows] += w * 8.0 * s
        elif ft == "target port misconfig":
            for k in ("pod_network_receive_bytes", "pod_network_receive_packets",
                      "pod_network_transmit_bytes", "pod_network_transmit_packets"):
                p[k][rows] *= 1 - 0.8 * w
        elif ft == "dns error":
            p["pod_network_transmit_packets"][rows] *= 1 + 0.3 * w * s
        elif ft == "blip pod cpu":
            p["pod_cpu_usage"][rows] += w * 30.0
        elif ft in ("node cpu stress", "blip node cpu"):
            r = frame.node_row(f.node)
            frame.node["node_cpu_usage_rate"][r] += w * (50.0 * s if ft == "node cpu stress" else 25.0)
            if ft == "node cpu stress":
                for k in ("node_network_receive_packets_total", "node_network_transmit_packets_total"):
                    frame.node[k][r] *= 1 - 0.3 * w * s
        elif ft == "node memory stress":
            r = frame.node_row(f.node)
            frame.node["node_memory_usage_rate"][r] += w * 35.0 * s
            total = frame.node["node_memory_MemTotal_bytes"][r]
            frame.node["node_memory_MemAvailable_bytes"][r] -= w * 0.35 * s * total
            frame.node["node_disk_read_bytes_total"][r] *= 1 + w * 8 * s
            frame.node["node_disk_read_time_seconds_total"][r] *= 1 + w * 6 * s
        elif ft == "node disk fill":
            r = frame.node_row(f.node)
            size = frame.node["node_filesystem_size_bytes"][r]
            frame.node["node_filesystem_usage_rate"][r] += w * 40.0 * s
            frame.node["node_filesystem_free_bytes"][r] -= w * 0.4 * s * size
            frame.node["node_disk_written_bytes_total"][r] *= 1 + w * 20 * s
        elif ft == "io fault":
            _tikv_io(frame, w, s)
        elif ft == "pod failure" and f.service.startswith("tidb-"):
            _tidb_down(frame, f.service, w, s)
        if ft in ("node cpu stress", "node memory stress") and f.node:
            # Pods of the node feel it a little too (this is what makes node faults node-level).
            for pod_name in pods_on_node.get(f.node, ()):
                for r in frame.pod_rows((pod_name,)):
                    frame.pod["pod_cpu_usage"][r] *= 1 + 0.3 * w * s


def _tikv_io(frame: MetricFrame, w: np.ndarray, s: float) -> None:
    frame.tikv["io_util"][0] += w * 60.0 * s
    frame.tikv["region_pending"][0] += w * 40.0 * s
    frame.tikv["raft_apply_wait"][0] *= 1 + w * 15 * s
    frame.tikv["raft_propose_wait"][0] *= 1 + w * 5 * s
    frame.tikv["memory_usage"][0] *= 1 + w * 0.5 * s
    frame.tikv["cpu_usage"][0] *= 1 + w * 1.0 * s
    frame.tikv["qps"][0] *= 1 - w * 0.5 * s
    frame.tikv["grpc_qps"][0] *= 1 - w * 0.5 * s
    frame.tikv["store_size"][0] *= 1 + w * 0.01 * s
    frame.tidb["duration_99th"][0] *= 1 + w * 10 * s
    frame.tidb["failed_query_ops"][0] += w * 5 * s


def _tidb_down(frame: MetricFrame, service: str, w: np.ndarray, s: float) -> None:
    if service == "tidb-tikv":
        frame.tikv["server_is_up"][0] *= 1 - w
        for k in ("cpu_usage", "memory_usage", "qps", "grpc_qps", "io_util", "read_mbps", "write_wal_mbps"):
            frame.tikv[k][0] *= 1 - 0.9 * w
        frame.tikv["region_pending"][0] += w * 30 * s
        frame.pd["store_down_count"][0] += w
        frame.pd["store_up_count"][0] -= w
        frame.pd["abnormal_region_count"][0] += w * 50 * s
        frame.tidb["qps"][0] *= 1 - 0.6 * w
        frame.tidb["failed_query_ops"][0] += w * 20 * s
    elif service == "tidb-pd":
        for k in ("cpu_usage", "memory_usage", "leader_primary"):
            frame.pd[k][0] *= 1 - 0.9 * w
        frame.tidb["duration_99th"][0] *= 1 + w * 8 * s
        frame.tidb["failed_query_ops"][0] += w * 8 * s
    else:  # tidb-tidb
        for k in ("server_is_up", "connection_count", "qps", "cpu_usage", "memory_usage"):
            frame.tidb[k][0] *= 1 - 0.95 * w
        frame.tikv["grpc_qps"][0] *= 1 - 0.7 * w
