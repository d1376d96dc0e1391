"""APM per pod and per service, aggregated per minute from the simulated calls of a CST day.

The APM sees the calls of every request the simulator draws, traced or not (traces are a
sample of them); counts are multiplied by ``scale_up`` to reach the system's volume; latencies
(``rrt`` mean, ``rrt_max``) are in µs like the spans.
A pod whose container is down has no APM row for that minute.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulate.effects import CLIENT_SIDE_KINDS, POD_ID, TIMEOUT_KINDS, pod_down
from simulate.requests import CST_OFFSET_S, CallRecords
from simulate.schedule import Fault
from simulate.topology import APM_PODS, APM_SERVICES, pods_of

MINUTES_PER_DAY = 1440
_COUNTERS = ("request", "error", "client_error", "server_error", "timeout")


@dataclass
class ApmRows:
    """Column arrays of one APM file (object_type pod or service)."""

    time_s: np.ndarray  # minute start, epoch seconds
    object_id: str
    object_type: str
    columns: dict[str, np.ndarray]


class ApmDay:
    """Per-minute accumulators for every APM pod of one CST day."""

    def __init__(self, *, day_start_s: int, scale_up: float) -> None:
        self.day_start_s = day_start_s
        self.scale_up = scale_up
        self.covered = np.zeros(MINUTES_PER_DAY, dtype=bool)
        shape = (MINUTES_PER_DAY, len(APM_PODS))
        self.counts = {name: np.zeros(shape) for name in _COUNTERS}
        self.dur_sum = np.zeros(shape)
        self.dur_max = np.zeros(shape)
        self._row_of_pod = np.full(len(POD_ID), -1)
        for row, pod in enumerate(APM_PODS):
            self._row_of_pod[POD_ID[pod]] = row

    def add_hour(self, *, hour_start_s: int, calls: CallRecords) -> None:
        first = (hour_start_s - self.day_start_s) // 60
        self.covered[first:first + 60] = True
        rows = self._row_of_pod[calls.pod_id]
        keep = rows >= 0
        minute = ((calls.t_s[keep] + CST_OFFSET_S) % 86400 // 60).astype(int)
        rows, kinds, dur = rows[keep], calls.err_kind[keep], calls.dur_us[keep]
        client = np.isin(kinds, [int(k) for k in CLIENT_SIDE_KINDS])
        timeout = np.isin(kinds, [int(k) for k in TIMEOUT_KINDS])
        np.add.at(self.counts["request"], (minute, rows), 1)
        np.add.at(self.counts["error"], (minute, rows), kinds > 0)
        np.add.at(self.counts["client_error"], (minute, rows), client)
        np.add.at(self.counts["server_error"], (minute, rows), (kinds > 0) & ~client)
        np.add.at(self.counts["timeout"], (minute, rows), timeout)
        np.add.at(self.dur_sum, (minute, rows), dur)
        np.maximum.at(self.dur_max, (minute, rows), dur)

    def _rows(self, idx: list[int], keep: np.ndarray, object_id: str, object_type: str) -> ApmRows:
        minutes = np.nonzero(keep)[0]
        c = {k: self.counts[k][:, idx].sum(axis=1)[minutes] for k in _COUNTERS}
        dur_sum = self.dur_sum[:, idx].sum(axis=1)[minutes]
        dur_max = self.dur_max[:, idx].max(axis=1)[minutes]
        req = c["request"]
        safe = np.maximum(req, 1)
        scaled = {k: np.round(v * self.scale_up).astype(np.int64) for k, v in c.items()}
        columns = {
            "request": scaled["request"],
            "response": np.maximum(scaled["request"] - scaled["client_error"], 0),
            "rrt": np.round(dur_sum / safe, 2),
            "rrt_max": np.round(dur_max).astype(np.int64),
            "error": scaled["error"], "client_error": scaled["client_error"],
            "server_error": scaled["server_error"], "timeout": scaled["timeout"],
            "error_ratio": np.round(100 * c["error"] / safe, 2),
            "client_error_ratio": np.round(100 * c["client_error"] / safe, 2),
            "server_error_ratio": np.round(100 * c["server_error"] / safe, 2),
        }
        return ApmRows(self.day_start_s + 60 * minutes, object_id, object_type, columns)

    def pod_rows(self, *, pod: str, faults: list[Fault], first_minute: int = 0,
                 last_minute: int = MINUTES_PER_DAY) -> ApmRows:
        """APM of one pod for minutes [first_minute, last_minute) of the day, minus minutes it was down."""
        t_s = self.day_start_s + 60 * np.arange(MINUTES_PER_DAY)
        span = np.zeros(MINUTES_PER_DAY, dtype=bool)
        span[first_minute:last_minute] = True
        # How a dead pod's series look (``Fault.silence``): rows stop (the default), rows of
        # zeros, or rows that come and go (lossy scraping around the outage).
        down = pod_down([f for f in faults if f.silence == "stop"], pod=pod, t_s=t_s)
        gappy = pod_down([f for f in faults if f.silence == "gaps"], pod=pod, t_s=t_s)
        down |= gappy & (np.arange(MINUTES_PER_DAY) % 3 != 0)
        keep = self.covered & span & ~down
        return self._rows([APM_PODS.index(pod)], keep, pod, "pod")

    def service_rows(self, *, service: str) -> ApmRows:
        idx = [APM_PODS.index(p) for p in pods_of(service)]
        return self._rows(idx, self.covered, service, "service")

    def namespace_rows(self) -> ApmRows:
        idx = [APM_PODS.index(p) for s in APM_SERVICES for p in pods_of(s)]
        return self._rows(idx, self.covered, "hipstershop", "namespace")
