#!/usr/bin/env python
"""Real vs simulated telemetry: the statistics the randomised simulator's priors must cover.

    scripts/real_vs_sim.py --real work/real/onlineboutique-2022-08-22/data \\
        --sim-seed 105 --sim-seed 106 ... [--sim-dir work/real-vs-sim/now] [--json out.json]

For the real tuning set (Nezha OnlineBoutique 2022-08-22, imported by scripts/eval_real.py) and
a few randomised tuning seeds (simulated once under --sim-dir with ``--randomize --per-type 2``
and reused), the same statistics, each a list of values (one a case, a pod, an edge or a day):

- effect sizes per fault type present in both, window median / median of the 30 minutes before
  (other cases' windows left out of that baseline): pod_cpu_usage and the culprit's rrt (cpu stress), the culprit's
  rrt and its call edges' per-minute p95 latency (network delay), request ratio and error share
  of the culprit's calls, and the culprit's call made least often for the demand it serves
  (window share over usual share, ``preprocess.detect_trace.call_shares``) and the share of
  calls into the culprit after which its callers' handlers went on to another call (the lowest
  caller's, window over usual, ``followed_shares``) (code error, jvm exception);
- baseline noise per pod: MAD / median of pod_cpu_usage, rrt and request over each case's
  baseline, the median over cases;
- sparsity: share of minutes (30 minutes before the first case to 30 after the last) holding any
  span / any log line;
- latency of call edges outside the case windows: p50 and p95 over minutes of the per-minute p95
  latency (µs), and p95 / p50;
- spread: services other than the culprit whose rrt in the window is > 1.5x its baseline;
- closed loop: an entry service's (nobody calls it) request ratio in the windows where its rrt
  rose 2x or more: clients that wait for their answers send fewer requests.

Printed: real (the median of its values) against the simulated 5-95% range, whether the real
median is inside, the share of real values inside, and the normalised gap (distance outside the
range over its width, in log space for ratios and latencies; 0 when inside).

Protocol: the real set must be the tuning day; OnlineBoutique 2022-08-23 and TrainTicket are
evaluation sets and refused. Simulated seeds must be tuning seeds (100-199).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from rich.console import Console
from rich.table import Table

from bench.pipeline import TUNING_SEEDS, simulate_problem_set
from bench.problems import REFERENCE_SCHEDULE
from preprocess.detect_trace import TraceParams, call_edges, call_shares, followed_shares
from preprocess.readers import read_apm, read_infra, read_logs, read_traces
from rca.system import bundled_system
from rca.timeutil import as_utc

log = logging.getLogger("real_vs_sim")

FAULT_TYPES: tuple[str, ...] = ("cpu stress", "network delay", "code error", "jvm exception")
BASELINE_MINUTES = 30
# Minutes after a case's window still left out of other cases' baselines (recovery); the real
# tuning day injects a fault every 8-9 minutes, so a longer tail would leave no baseline at all.
AFTER_WINDOW_MINUTES = 1
SPREAD_THRESHOLD = 1.5
# An entry service's answers this much slower: do its clients (a closed-loop load) send fewer requests?
ENTRY_SLOWDOWN = 2.0
# Per-minute edge p95s from fewer calls than this are left out (one slow call is not a p95).
MIN_EDGE_CALLS = 3
EVALUATION_MARKERS: tuple[str, ...] = ("2022-08-23", "trainticket")


@dataclass(frozen=True)
class Case:
    """One fault: its type, window and culprits (services, and pods when the truth names them)."""

    uuid: str
    fault_type: str
    start: datetime
    end: datetime
    services: tuple[str, ...]
    pods: tuple[str, ...]


@dataclass(frozen=True)
class StatSpec:
    """How one statistic is compared: ``log`` scale for ratios and latencies."""

    name: str
    group: str
    log_scale: bool


@dataclass
class DatasetStats:
    """Every statistic's values for one dataset (one value a case, pod, edge or day)."""

    name: str
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, stat: str, value: float | None) -> None:
        if value is not None and math.isfinite(value):
            self.values.setdefault(stat, []).append(float(value))


SPECS: tuple[StatSpec, ...] = (
    StatSpec("cpu stress: pod_cpu_usage ratio", "effect", True),
    StatSpec("cpu stress: culprit rrt ratio", "effect", True),
    StatSpec("closed loop: entry request ratio when its rrt rose 2x+", "effect", True),
    StatSpec("network delay: culprit rrt ratio", "effect", True),
    StatSpec("network delay: edge p95 latency ratio", "effect", True),
    StatSpec("code error: request ratio", "effect", True),
    StatSpec("code error: error share in window", "effect", False),
    StatSpec("jvm exception: request ratio", "effect", True),
    StatSpec("jvm exception: error share in window", "effect", False),
    StatSpec("code error: fewest-made call share", "effect", False),
    StatSpec("jvm exception: fewest-made call share", "effect", False),
    StatSpec("code error: callers going on after its calls", "effect", False),
    StatSpec("jvm exception: callers going on after its calls", "effect", False),
    StatSpec("noise: pod_cpu_usage MAD/median", "noise", True),
    StatSpec("noise: pod rrt MAD/median", "noise", True),
    StatSpec("noise: pod request MAD/median", "noise", True),
    StatSpec("sparsity: minutes with a span", "sparsity", False),
    StatSpec("sparsity: minutes with a log line", "sparsity", False),
    StatSpec("edge latency: p50 of minute p95 (µs)", "latency", True),
    StatSpec("edge latency: p95 of minute p95 (µs)", "latency", True),
    StatSpec("edge latency: p95 / p50", "latency", True),
    StatSpec("spread: cpu stress", "spread", False),
    StatSpec("spread: network delay", "spread", False),
    StatSpec("spread: code error", "spread", False),
    StatSpec("spread: jvm exception", "spread", False),
)


# --------------------------------------------------------------------------- statistics on frames


def robust_cv(values: Sequence[float] | np.ndarray) -> float | None:
    """MAD / median (unscaled MAD); None without a positive median."""
    array = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if array.size < 3:
        return None
    median = float(np.median(array))
    if median <= 0:
        return None
    return float(np.median(np.abs(array - median))) / median


def _minute(time: datetime) -> datetime:
    return time.replace(second=0, microsecond=0)


def baseline_mask(times: pl.Series, *, start: datetime, excluded: Sequence[tuple[datetime, datetime]],
                  minutes: int = BASELINE_MINUTES) -> pl.Series:
    """Minutes in ``[start - minutes, start)`` outside every excluded interval."""
    lo = _minute(start) - timedelta(minutes=minutes)
    mask = (times >= lo) & (times < _minute(start))
    for ex_start, ex_end in excluded:
        mask = mask & ~((times >= _minute(ex_start)) & (times <= ex_end))
    return mask


def window_mask(times: pl.Series, *, start: datetime, end: datetime) -> pl.Series:
    return (times >= _minute(start)) & (times <= end)


def effect_ratio(series: pl.DataFrame, *, start: datetime, end: datetime,
                 excluded: Sequence[tuple[datetime, datetime]] = (), minutes: int = BASELINE_MINUTES) -> float | None:
    """Median of ``value`` in the window over its median in the baseline before it; None without both."""
    frame = series.drop_nulls("value").filter(pl.col("value").is_finite())
    inside = frame.filter(window_mask(frame["time"], start=start, end=end))["value"]
    before = frame.filter(baseline_mask(frame["time"], start=start, excluded=excluded, minutes=minutes))["value"]
    if inside.len() == 0 or before.len() < 3:
        return None
    base = float(before.median())  # type: ignore[arg-type]
    if base <= 0:
        return None
    return float(inside.median()) / base  # type: ignore[arg-type]


def error_share(apm: pl.DataFrame, *, start: datetime, end: datetime) -> float | None:
    """Errors over requests of the rows in the window (APM counts summed over minutes)."""
    rows = apm.filter(window_mask(apm["time"], start=start, end=end))
    requests = float(rows["request"].fill_null(0).sum())
    if requests <= 0:
        return None
    return float(rows["error"].fill_null(0).sum()) / requests


def minute_coverage(times: pl.Series, *, start: datetime, end: datetime) -> float:
    """Share of the minutes of ``[start, end]`` that hold at least one of ``times``."""
    lo, hi = _minute(start), _minute(end)
    total = int((hi - lo).total_seconds() // 60) + 1
    if total <= 0:
        return 0.0
    minutes = times.filter((times >= lo) & (times < hi + timedelta(minutes=1))).dt.truncate("1m").unique()
    return minutes.len() / total


def edge_minutes(spans: pl.DataFrame) -> pl.DataFrame:
    """Per minute and call edge: calls and p95 latency (µs)."""
    if spans.height == 0:
        return pl.DataFrame(schema={"time": pl.Datetime("us", "UTC"), "caller": pl.Utf8, "callee": pl.Utf8,
                                    "calls": pl.UInt32, "p95": pl.Float64, "followed": pl.UInt32})
    return (
        call_edges(spans)
        .with_columns(pl.col("time").dt.truncate("1m"), pl.col("latency_us").cast(pl.Float64))
        .group_by("time", "caller", "callee")
        .agg(pl.len().alias("calls"), pl.col("latency_us").quantile(0.95, "linear").alias("p95"),
             pl.col("followed").sum().alias("followed"))
    )


def edge_latency_profile(edges: pl.DataFrame, *, excluded: Sequence[tuple[datetime, datetime, Sequence[str]]] = (),
                         min_calls: int = MIN_EDGE_CALLS, min_minutes: int = 5) -> pl.DataFrame:
    """Per edge: p50 and p95 over minutes of the per-minute p95, and their ratio.

    ``excluded``: (start, end, services): the minutes of an edge touching one of the services
    (a case's culprits) inside [start, end] are left out. Real traces are recorded mostly
    around the injections, so leaving out whole windows would leave no minutes at all.
    """
    frame = edges.filter(pl.col("calls") >= min_calls)
    for ex_start, ex_end, services in excluded:
        touches = pl.col("caller").is_in(list(services)) | pl.col("callee").is_in(list(services))
        frame = frame.filter(~((pl.col("time") >= _minute(ex_start)) & (pl.col("time") <= ex_end) & touches))
    return (
        frame.group_by("caller", "callee")
        .agg(pl.len().alias("minutes"), pl.col("p95").quantile(0.5, "linear").alias("p50_of_p95"),
             pl.col("p95").quantile(0.95, "linear").alias("p95_of_p95"))
        .filter((pl.col("minutes") >= min_minutes) & (pl.col("p50_of_p95") > 0))
        .with_columns((pl.col("p95_of_p95") / pl.col("p50_of_p95")).alias("tail_ratio"))
        .sort("caller", "callee")
    )


def fewest_made_call(edge_counts: pl.DataFrame, *, callers: Iterable[str], start: datetime, end: datetime,
                     excluded: Sequence[tuple[datetime, datetime]] = ()) -> float | None:
    """Of the calls ``callers`` make, the one made least often for their demand: its share in the
    window over its usual share (``call_shares``; calls expected at least ``min_expected_calls``)."""
    shares = call_shares(edge_counts, start=start, end=end, baseline_start=start - timedelta(minutes=BASELINE_MINUTES),
                         params=TraceParams(), exclude=excluded)
    return _lowest_ratio(shares, column="caller", names=callers)


def callers_going_on(edge_counts: pl.DataFrame, *, callees: Iterable[str], start: datetime, end: datetime,
                     excluded: Sequence[tuple[datetime, datetime]] = ()) -> float | None:
    """Of the calls into ``callees``, the caller's whose handlers least often went on to another call
    after them: that share in the window over its usual share (``followed_shares``; calls expected
    at least ``min_expected_calls``). Under 1 where a failing callee ends its callers' handlers."""
    shares = followed_shares(edge_counts, start=start, end=end,
                             baseline_start=start - timedelta(minutes=BASELINE_MINUTES), params=TraceParams(),
                             exclude=excluded)
    return _lowest_ratio(shares, column="callee", names=callees)


def _lowest_ratio(shares: pl.DataFrame, *, column: str, names: Iterable[str]) -> float | None:
    """The lowest window-over-usual ``ratio`` of the ``shares`` rows whose ``column`` is one of ``names``
    (calls expected at least the detectors' ``min_expected_calls``)."""
    judged = shares.filter(pl.col(column).is_in(list(names))
                           & (pl.col("expected") >= TraceParams().min_expected_calls))
    return float(judged.select(pl.col("ratio").min()).item()) if judged.height else None


def entry_backoff(requests: pl.DataFrame, *, rrt_ratio: float | None, start: datetime, end: datetime,
                  excluded: Sequence[tuple[datetime, datetime]] = ()) -> float | None:
    """An entry service's request ratio in a window where its answers took ``ENTRY_SLOWDOWN`` times longer
    or more (None otherwise): clients that wait for each answer send fewer requests."""
    if rrt_ratio is None or rrt_ratio < ENTRY_SLOWDOWN:
        return None
    return effect_ratio(requests, start=start, end=end, excluded=excluded)


def spread_count(ratios: dict[str, float | None], *, culprits: Iterable[str], threshold: float = SPREAD_THRESHOLD) -> int:
    """Services other than the culprits whose rrt ratio exceeds ``threshold``."""
    skip = set(culprits)
    return sum(1 for service, ratio in ratios.items() if service not in skip and ratio is not None and ratio > threshold)


def coverage(real: Sequence[float], simulated: Sequence[float], *, log_scale: bool) -> dict[str, Any]:
    """Where the real values lie against the simulated 5-95% range.

    ``gap``: how far the real median lies outside the range, over the range's width (log
    space when ``log_scale``; at least log 1.1, or 10% of the range's size); 0 inside.
    ``share``: real values inside the range.
    """
    def tf(values: Sequence[float]) -> np.ndarray:
        array = np.asarray(values, dtype=float)
        return np.log(np.clip(array, 1e-9, None)) if log_scale else array

    if not real or not simulated:
        return {"real": float(np.median(real)) if real else None, "lo": None, "mid": None, "hi": None,
                "inside": None, "share": None, "gap": None, "n_real": len(real), "n_sim": len(simulated)}
    lo, mid, hi = (float(v) for v in np.percentile(np.asarray(simulated, dtype=float), [5, 50, 95]))
    real_median = float(np.median(real))
    t_lo, t_hi, t_real = (float(tf([v])[0]) for v in (lo, hi, real_median))
    # A degenerate range (every simulated day at 100% of minutes) still gets a width: 10% of its size.
    width = max(t_hi - t_lo, math.log(1.1) if log_scale else 0.1 * max(abs(lo), abs(hi), 1e-9))
    outside = max(t_lo - t_real, t_real - t_hi, 0.0)
    share = float(np.mean([(lo <= v <= hi) for v in real]))
    return {"real": real_median, "lo": lo, "mid": mid, "hi": hi, "inside": lo <= real_median <= hi,
            "share": share, "gap": outside / width, "n_real": len(real), "n_sim": len(simulated)}


# --------------------------------------------------------------------------- one dataset


def _parse_time(text: str) -> datetime:
    return as_utc(datetime.fromisoformat(text.replace("Z", "+00:00")))


def read_cases(truth_file: Path, *, services: set[str], pods: set[str]) -> list[Case]:
    """Cases of the compared fault types, with culprit services and pods resolved against the data."""
    cases = []
    for line in truth_file.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        instance = row.get("instance")
        names = [instance] if isinstance(instance, str) else list(instance or [])
        names += [row.get("source") or "", row.get("destination") or "", row.get("service") or ""]
        owners = {_service_of_pod(n, services) for n in names if n in pods}
        culprit_services = tuple(sorted({n for n in names if n in services} | {o for o in owners if o is not None}))
        named_pods = tuple(sorted(n for n in names if n in pods))
        culprit_pods = named_pods or tuple(sorted(p for p in pods if _service_of_pod(p, services) in culprit_services))
        cases.append(Case(uuid=row["uuid"], fault_type=row["fault_type"], start=_parse_time(row["start_time"]),
                          end=_parse_time(row["end_time"]), services=culprit_services, pods=culprit_pods))
    return cases


def _service_of_pod(pod: str, services: set[str]) -> str | None:
    """The longest service name that prefixes ``pod`` followed by a dash."""
    owners = [s for s in services if pod.startswith(s + "-")]
    return max(owners, key=len) if owners else None


def _series(frame: pl.DataFrame, *, key: str, name: str, value: str) -> pl.DataFrame:
    return frame.filter(pl.col(key) == name).select("time", pl.col(value).alias("value")).sort("time")


def dataset_stats(data_dir: Path, *, name: str) -> DatasetStats:
    """Every statistic of one dataset (its ``groundtruth.jsonl`` gives the cases)."""
    truth_file = data_dir / "groundtruth.jsonl"
    starts_ends = [(_parse_time(r["start_time"]), _parse_time(r["end_time"]))
                   for r in map(json.loads, filter(str.strip, truth_file.read_text(encoding="utf-8").splitlines()))]
    first = min(s for s, _ in starts_ends) - timedelta(minutes=BASELINE_MINUTES)
    last = max(e for _, e in starts_ends) + timedelta(minutes=BASELINE_MINUTES)
    apm = read_apm(data_dir, start=first, end=last).frame
    pod_apm, service_apm = apm.filter(pl.col("object_type") == "pod"), apm.filter(pl.col("object_type") == "service")
    cpu = (read_infra(data_dir, start=first, end=last, families=["infra_pod"], kpis=["pod_cpu_usage"]).frame
           .select("time", pl.col("component").alias("pod"), "value"))
    # Both sides are HipsterShop / OnlineBoutique (the imported set names its peers explicitly).
    spans = read_traces(data_dir, start=first, end=last, naming=bundled_system().trace, report_missing=False).frame
    logs = read_logs(data_dir, start=first, end=last, columns=["pod"], report_missing=False).frame
    services = set(service_apm["object_id"].unique().to_list())
    pods = set(pod_apm["object_id"].unique().to_list()) | set(cpu["pod"].unique().to_list())
    all_cases = read_cases(truth_file, services=services, pods=pods)
    windows = [(c.start, c.end + timedelta(minutes=AFTER_WINDOW_MINUTES)) for c in all_cases]
    edges = edge_minutes(spans)
    entries = set(edges["caller"].unique().to_list()) - set(edges["callee"].unique().to_list())  # nobody calls them
    # call_shares' and followed_shares' columns
    edge_counts = edges.select("time", "caller", "callee", pl.col("calls").alias("count"), "followed")
    stats = DatasetStats(name=name)

    noise: dict[str, dict[str, list[float]]] = {"pod_cpu_usage": {}, "rrt": {}, "request": {}}
    for index, case in enumerate(all_cases):
        others = windows[:index] + windows[index + 1:]
        _noise_of_case(noise, case=case, excluded=others, cpu=cpu, pod_apm=pod_apm)
        if case.fault_type not in FAULT_TYPES:
            continue
        _effects_of_case(stats, case=case, excluded=others, cpu=cpu, pod_apm=pod_apm, service_apm=service_apm,
                         edges=edges, edge_counts=edge_counts)
        ratios = {s: effect_ratio(_series(service_apm, key="object_id", name=s, value="rrt"), start=case.start,
                                  end=case.end, excluded=others) for s in sorted(services)}
        stats.add(f"spread: {case.fault_type}", spread_count(ratios, culprits=case.services))
        for entry in sorted(entries & services):
            stats.add("closed loop: entry request ratio when its rrt rose 2x+",
                      entry_backoff(_series(service_apm, key="object_id", name=entry, value="request"),
                                    rrt_ratio=ratios.get(entry), start=case.start, end=case.end, excluded=others))
    for kpi, label in (("pod_cpu_usage", "pod_cpu_usage"), ("rrt", "pod rrt"), ("request", "pod request")):
        for values in noise[kpi].values():
            stats.add(f"noise: {label} MAD/median", float(np.median(values)))

    stats.add("sparsity: minutes with a span", minute_coverage(spans["start"], start=first, end=last))
    stats.add("sparsity: minutes with a log line", minute_coverage(logs["time"], start=first, end=last))
    culprit_windows = [(start, end, case.services) for (start, end), case in zip(windows, all_cases, strict=True)]
    profile = edge_latency_profile(edges, excluded=culprit_windows)
    for row in profile.iter_rows(named=True):
        stats.add("edge latency: p50 of minute p95 (µs)", row["p50_of_p95"])
        stats.add("edge latency: p95 of minute p95 (µs)", row["p95_of_p95"])
        stats.add("edge latency: p95 / p50", row["tail_ratio"])
    return stats


def _noise_of_case(noise: dict[str, dict[str, list[float]]], *, case: Case,
                   excluded: Sequence[tuple[datetime, datetime]], cpu: pl.DataFrame, pod_apm: pl.DataFrame) -> None:
    in_cpu = cpu.filter(baseline_mask(cpu["time"], start=case.start, excluded=excluded))
    for (pod,), rows in in_cpu.group_by("pod"):
        value = robust_cv(rows["value"].drop_nulls().to_list())
        if value is not None:
            noise["pod_cpu_usage"].setdefault(str(pod), []).append(value)
    in_apm = pod_apm.filter(baseline_mask(pod_apm["time"], start=case.start, excluded=excluded))
    for (pod,), rows in in_apm.group_by("object_id"):
        for kpi in ("rrt", "request"):
            value = robust_cv(rows[kpi].drop_nulls().to_list())
            if value is not None:
                noise[kpi].setdefault(str(pod), []).append(value)


def _best(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return max(kept) if kept else None


def _effects_of_case(stats: DatasetStats, *, case: Case, excluded: Sequence[tuple[datetime, datetime]],
                     cpu: pl.DataFrame, pod_apm: pl.DataFrame, service_apm: pl.DataFrame, edges: pl.DataFrame,
                     edge_counts: pl.DataFrame) -> None:
    def ratio(frame: pl.DataFrame, *, key: str, name: str, value: str) -> float | None:
        return effect_ratio(_series(frame, key=key, name=name, value=value), start=case.start, end=case.end,
                            excluded=excluded)

    if case.fault_type == "cpu stress":
        stats.add("cpu stress: pod_cpu_usage ratio", _best(ratio(cpu, key="pod", name=p, value="value")
                                                           for p in case.pods))
        # The stressed pods' own rrt: a service's dilutes a stress on one of its pods (Nezha's
        # services have one pod each, the simulator's three).
        culprit_rrt = (ratio(pod_apm, key="object_id", name=p, value="rrt") for p in case.pods) if case.pods else (
            ratio(service_apm, key="object_id", name=s, value="rrt") for s in case.services)
        stats.add("cpu stress: culprit rrt ratio", _best(culprit_rrt))
    elif case.fault_type == "network delay":
        stats.add("network delay: culprit rrt ratio", _best(ratio(service_apm, key="object_id", name=s, value="rrt")
                                                            for s in case.services))
        touching = edges.filter(pl.col("calls") >= MIN_EDGE_CALLS)
        touching = touching.filter(pl.col("callee").is_in(list(case.services)) | pl.col("caller").is_in(list(case.services)))
        edge_ratios = [effect_ratio(rows.select("time", pl.col("p95").alias("value")).sort("time"), start=case.start,
                                    end=case.end, excluded=excluded)
                       for _, rows in touching.group_by("caller", "callee")]
        stats.add("network delay: edge p95 latency ratio", _best(edge_ratios))
    else:
        stats.add(f"{case.fault_type}: request ratio", _best(ratio(service_apm, key="object_id", name=s, value="request")
                                                              for s in case.services))
        stats.add(f"{case.fault_type}: error share in window",
                  _best(error_share(service_apm.filter(pl.col("object_id") == s), start=case.start, end=case.end)
                        for s in case.services))
        stats.add(f"{case.fault_type}: fewest-made call share",
                  fewest_made_call(edge_counts, callers=case.services, start=case.start, end=case.end, excluded=excluded))
        stats.add(f"{case.fault_type}: callers going on after its calls",
                  callers_going_on(edge_counts, callees=case.services, start=case.start, end=case.end,
                                   excluded=excluded))


# --------------------------------------------------------------------------- sets and report


def check_real_dir(path: Path) -> None:
    """Refuse the evaluation sets (OnlineBoutique 2022-08-23, every TrainTicket day)."""
    text = str(path.resolve()).lower()
    if any(marker in text for marker in EVALUATION_MARKERS):
        raise SystemExit(f"{path} looks like an evaluation set; only the tuning day (OnlineBoutique 2022-08-22) is read")


def simulated_dirs(seeds: Sequence[int], *, sim_dir: Path) -> list[Path]:
    """Each tuning seed's randomised set (two faults of each type), simulated once under ``sim_dir``."""
    outside = [s for s in seeds if s not in TUNING_SEEDS]
    if outside:
        raise SystemExit(f"tuning seeds only ({TUNING_SEEDS.start}-{TUNING_SEEDS.stop - 1}); got {outside}")
    dirs = []
    for seed in seeds:
        problem_set = simulate_problem_set(sim_dir / f"seed{seed}" / "data", seed=seed,
                                           reference_schedule=REFERENCE_SCHEDULE, per_type=2, randomize=True)
        dirs.append(problem_set.data_dir)
    return dirs


def compare(real: DatasetStats, simulated: Sequence[DatasetStats]) -> list[dict[str, Any]]:
    rows = []
    for spec in SPECS:
        pooled = [v for s in simulated for v in s.values.get(spec.name, [])]
        rows.append({"stat": spec.name, "group": spec.group,
                     **coverage(real.values.get(spec.name, []), pooled, log_scale=spec.log_scale)})
    return rows


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if abs(value) < 0.01 else f"{value:.2f}"


def report_table(rows: Sequence[dict[str, Any]], *, title: str) -> Table:
    table = Table(title=title)
    for column in ("statistic", "real (median)", "n", "sim p5", "sim p50", "sim p95", "n sim", "inside",
                   "real inside", "gap"):
        table.add_column(column, justify="left" if column == "statistic" else "right")
    for row in rows:
        inside = "-" if row["inside"] is None else ("yes" if row["inside"] else "[red]no[/red]")
        share = "-" if row["share"] is None else f"{row['share']:.0%}"
        table.add_row(row["stat"], _fmt(row["real"]), str(row["n_real"]), _fmt(row["lo"]), _fmt(row["mid"]),
                      _fmt(row["hi"]), str(row["n_sim"]), inside, share, _fmt(row["gap"]))
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--real", type=Path, default=Path("work/real/onlineboutique-2022-08-22/data"),
                        help="the real tuning set's data dir (scripts/eval_real.py --day 2022-08-22 imports it)")
    parser.add_argument("--sim-seed", type=int, action="append", default=[], help="randomised tuning seed; repeatable")
    parser.add_argument("--sim-dir", type=Path, default=Path("work/real-vs-sim/now"),
                        help="where the simulated sets are written once and reused")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    console = Console(width=150)
    check_real_dir(args.real)
    seeds = args.sim_seed or [105, 106, 107, 108, 109, 110]
    real = dataset_stats(args.real, name="real")
    simulated = [dataset_stats(d, name=f"seed{s}") for s, d in zip(seeds, simulated_dirs(seeds, sim_dir=args.sim_dir),
                                                                   strict=True)]
    rows = compare(real, simulated)
    seeds_text = ",".join(map(str, seeds))
    console.print(report_table(rows, title=f"real {args.real} vs randomised seeds {seeds_text} ({args.sim_dir})"))
    outside = [r["stat"] for r in rows if r["inside"] is False]
    console.print(f"real median inside the simulated 5-95% range: {sum(1 for r in rows if r['inside'])} of "
                  f"{sum(1 for r in rows if r['inside'] is not None)}; outside: {', '.join(outside) or 'none'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"real": str(args.real), "seeds": seeds, "sim_dir": str(args.sim_dir),
                                         "rows": rows}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
