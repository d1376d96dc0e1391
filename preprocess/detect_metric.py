"""Metric detector: per (component, KPI) minute series scored against a robust baseline.

This module owns three things:

* ``metric_series``: turn the canonical APM and infra frames into one long frame of
  per-minute series ``[time, component, kind, kpi, value]`` (the compact form the
  nightly job stores);
* ``score_metric_window``: compare a window with the neighbouring fault-free baseline
  (median / MAD robust z, ratio to the baseline median, onset from a ruptures change
  point) and report one event per deviating series, including the "went silent"
  pattern (a series that goes missing, flat or to zero when a pod dies);
* ``MetricDetector``: the two halves above behind the ``preprocess.detect.Detector``
  contract (build: series + pod placement of a day; score: metric events of a window).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl
import ruptures

from preprocess.schema import APM_KPIS, TIME, FeatureTable, RawInput

log = logging.getLogger(__name__)

# Long per-minute series: the stored metric feature.
SERIES_SCHEMA: dict[str, pl.DataType] = {
    "time": TIME,
    "component": pl.Utf8,
    # apm_pod | apm_service | infra_pod | infra_node | infra_tidb | infra_tikv | infra_pd
    "kind": pl.Utf8,
    "kpi": pl.Utf8,
    "value": pl.Float64,
}

METRIC_EVENT_SCHEMA: dict[str, pl.DataType] = {
    "component": pl.Utf8,
    "kind": pl.Utf8,
    "kpi": pl.Utf8,
    "direction": pl.Utf8,  # up | down | silent
    "z": pl.Float64,  # robust z of the window against the baseline (capped)
    "ratio": pl.Float64,  # window level / baseline median (null when baseline is 0)
    "baseline": pl.Float64,
    "window_value": pl.Float64,
    "onset": TIME,
}

# Pod -> node placement intervals (from infra_pod's hosting-node label).
PLACEMENT_SCHEMA: dict[str, pl.DataType] = {"pod": pl.Utf8, "node": pl.Utf8, "first": TIME, "last": TIME}

# Series whose values say little about faults (constants, capacities, clocks).
_STATIC_KPIS = frozenset({
    "node_memory_MemTotal_bytes", "node_filesystem_size_bytes", "uptime", "capacity_size",
    "storage_capacity", "ddl_job_count",
})
Z_CAP = 50.0


@dataclass(frozen=True)
class MetricParams:
    """Knobs of the metric window scorer; defaults tuned on simulated data."""

    min_z: float = 4.0  # robust z a window must reach to become an event
    min_relative_change: float = 0.2  # |window/baseline - 1| must also reach this
    min_baseline_points: int = 5
    silent_fraction: float = 0.5  # window coverage below this fraction => silent
    # Sustained level below this share of the baseline => silent. 0.22, not 0.15: a service
    # whose port is misrouted receives no traffic, yet its noisy network counters keep about a
    # fifth (probes, retries, other pods' chatter); read as a mere "down" (z about 10) it lost
    # to its callers' loud errors. A fall to a quarter stays a "down" (a halved load is not death).
    near_silent_ratio: float = 0.22
    from_zero_z: float = 12.0  # z given to a rise from a flat-zero baseline
    # Windows of at most this many minutes are brief (a pod kill, scored over the few minutes
    # after it, index.params.IndexParams.brief_window_minutes): there one missing or near-zero
    # minute of a complete, steady series is the restart gap, the only trace a kill leaves.
    brief_window_minutes: int = 5


def metric_series(*, apm: pl.DataFrame | None, infra: pl.DataFrame | None) -> pl.DataFrame:
    """Long per-minute series from canonical APM (wide) and infra (long) frames.

    Infra series split by device, mountpoint, type or sql_type are collapsed to one
    series per (component, kpi) by their maximum: the worst disk or statement type is
    what a fault moves, and one name per KPI keeps evidence lines exact.
    """
    parts: list[pl.DataFrame] = []
    if apm is not None and apm.height:
        long = apm.unpivot(index=["time", "object_type", "object_id"], on=list(APM_KPIS),
                           variable_name="kpi", value_name="value")
        parts.append(long.select(
            pl.col("time").dt.truncate("1m"),
            pl.col("object_id").alias("component"),
            pl.concat_str(pl.lit("apm_"), pl.col("object_type")).alias("kind"),
            "kpi", pl.col("value").cast(pl.Float64),
        ))
    if infra is not None and infra.height:
        parts.append(infra.filter(pl.col("component").is_not_null()).select(
            pl.col("time").dt.truncate("1m"),
            "component",
            pl.col("family").alias("kind"),
            pl.col("kpi_key").alias("kpi"),
            pl.col("value").cast(pl.Float64),
        ))
    if not parts:
        return pl.DataFrame(schema=SERIES_SCHEMA)
    frame = pl.concat(parts).filter(~pl.col("kpi").is_in(list(_STATIC_KPIS)))
    return (
        frame.group_by("time", "component", "kind", "kpi")
        .agg(pl.col("value").max())
        .sort("component", "kind", "kpi", "time")
        .cast(SERIES_SCHEMA)
    )


def placement(infra: pl.DataFrame | None) -> pl.DataFrame:
    """Pod -> node placement intervals from infra_pod rows: ``[pod, node, first, last]``."""
    if infra is None or infra.height == 0:
        return pl.DataFrame(schema=PLACEMENT_SCHEMA)
    pods = infra.filter((pl.col("family") == "infra_pod") & pl.col("node").is_not_null())
    return (
        pods.group_by(pl.col("component").alias("pod"), "node")
        .agg(pl.col("time").min().alias("first"), pl.col("time").max().alias("last"))
        .sort("pod", "first", "node").cast(PLACEMENT_SCHEMA)
    )


def robust_location_scale(values: np.ndarray, *, ordered: bool = False) -> tuple[float, float]:
    """Median and a floored MAD scale (σ-consistent).

    The floor keeps a near-constant baseline (e.g. zero errors) from turning any
    single blip into an infinite z: 5 % of the level, or half the baseline's spread.
    With ``ordered`` (values in time order) a slow drift does not widen the scale: the
    MAD is capped at twice the noise seen minute to minute (MAD of first differences),
    so a diurnal ramp in the baseline does not hide a step in the window.
    """
    median = float(np.median(values))
    mad = 1.4826 * float(np.median(np.abs(values - median)))
    if ordered and values.size >= 3:
        step_noise = 1.4826 * float(np.median(np.abs(np.diff(values)))) / np.sqrt(2.0)
        if step_noise > 0:
            mad = min(mad, 2.0 * step_noise)
    spread = float(np.std(values))
    scale = max(mad, 0.05 * abs(median), 0.5 * spread, 1e-6)
    # A flat zero baseline (error counters): one unit is the smallest meaningful change.
    if median == 0.0 and mad == 0.0 and spread == 0.0:
        scale = 1.0
    return median, scale


def change_point_onset(values: np.ndarray, *, first_window_index: int) -> int | None:
    """Index of the most likely change point near the window start (ruptures, Binseg l2).

    Only breaks from three minutes before the window on are accepted: a change far in
    the baseline is not this incident's onset.
    """
    if values.size < 6 or np.allclose(values, values[0]):
        return None
    algo = ruptures.Binseg(model="l2", min_size=2, jump=1).fit(values.reshape(-1, 1))
    breaks = [b for b in algo.predict(n_bkps=2) if b < values.size]
    eligible = [b for b in breaks if b >= first_window_index - 3]
    return min(eligible) if eligible else None


def score_metric_window(
    series: pl.DataFrame,
    *,
    start: datetime,
    end: datetime,
    baseline_start: datetime,
    params: MetricParams = MetricParams(),
) -> pl.DataFrame:
    """One event per series whose window [start, end] deviates from [baseline_start, start).

    The window level is the median of the window for a sustained change, or the
    second most extreme minute for short faults (a pod kill lasts a minute or two),
    discounted so that sustained shifts rank above single blips.
    """
    window_start = start.replace(second=0, microsecond=0)
    sub = series.filter((pl.col("time") >= baseline_start) & (pl.col("time") <= end))
    if sub.height == 0:
        return pl.DataFrame(schema=METRIC_EVENT_SCHEMA)
    expected_window_minutes = max(1, int((end - window_start).total_seconds() // 60) + 1)
    expected_baseline_minutes = max(1, int((window_start - baseline_start).total_seconds() // 60))
    grouped = sub.sort("time").group_by("component", "kind", "kpi", maintain_order=True).agg(
        pl.col("time").dt.epoch("us").alias("time_us"), pl.col("value"))
    window_start_us = epoch_us(window_start)
    events: list[dict] = []
    for row in grouped.iter_rows(named=True):
        times = np.array(row["time_us"], dtype=np.int64)
        values = np.array(row["value"], dtype=float)
        finite = np.isfinite(values)
        times, values = times[finite], values[finite]
        in_window = times >= window_start_us
        base, win = values[~in_window], values[in_window]
        if base.size < params.min_baseline_points:
            continue
        event = _score_one(base=base, win=win, expected_window_minutes=expected_window_minutes,
                           expected_baseline_minutes=expected_baseline_minutes, params=params,
                           gap=_has_gap(times[in_window], window_start_us=window_start_us,
                                        minutes=expected_window_minutes))
        if event is None:
            continue
        direction, z, level, median = event
        onset_index = change_point_onset(values, first_window_index=base.size) if direction != "silent" else None
        if onset_index is not None and onset_index < times.size:
            onset = from_epoch_us(times[onset_index])
        elif win.size:
            onset = from_epoch_us(times[base.size + _first_exceeding(win, median, direction)])
        else:
            onset = window_start
        events.append({
            "component": row["component"], "kind": row["kind"], "kpi": row["kpi"],
            "direction": direction, "z": min(z, Z_CAP),
            "ratio": (level / median) if median != 0 else None,
            "baseline": median, "window_value": level,
            "onset": onset,
        })
    if not events:
        return pl.DataFrame(schema=METRIC_EVENT_SCHEMA)
    return pl.DataFrame(events, schema=METRIC_EVENT_SCHEMA).sort("z", descending=True)


def _has_gap(window_times: np.ndarray, *, window_start_us: int, minutes: int) -> bool:
    """Whether a minute of the window is missing before the series' last minute in it.

    Minutes missing at the end are not a gap: the data may simply not be there yet.
    """
    if window_times.size == 0:
        return False
    expected = window_start_us + 60_000_000 * np.arange(minutes, dtype=np.int64)
    missing = np.setdiff1d(expected, window_times)
    return bool(np.any(missing < window_times.max()))


def _score_one(
    *, base: np.ndarray, win: np.ndarray, expected_window_minutes: int, expected_baseline_minutes: int,
    params: MetricParams, gap: bool = False,
) -> tuple[str, float, float, float] | None:
    median, scale = robust_location_scale(base, ordered=True)
    # Went silent: a series that was dense and non-zero in the baseline is now mostly
    # missing, or mostly zero. Sparse or often-zero series (idle pods) never qualify.
    dense_baseline = base.size >= 0.9 * expected_baseline_minutes
    coverage = win.size / expected_window_minutes
    if dense_baseline and coverage < params.silent_fraction and expected_window_minutes >= 3:
        return "silent", Z_CAP * (1.0 - coverage), float(np.median(win)) if win.size else 0.0, median
    if win.size == 0:
        return None
    window_zeros = float(np.mean(win == 0.0))
    if dense_baseline and median > 0 and np.mean(base == 0.0) <= 0.1 and window_zeros >= 0.5:
        return "silent", Z_CAP * window_zeros, 0.0, median

    if (expected_window_minutes <= params.brief_window_minutes and base.size >= expected_baseline_minutes
            and median > 0 and float(np.min(base)) >= 0.5 * median):
        lowest = 0.0 if gap else float(np.min(win))  # a missing minute is a gap
        # ... and the dip must be implausible as noise (a sparse count can hit zero by chance).
        if lowest <= params.near_silent_ratio * median and (median - lowest) / scale >= params.min_z:
            return "silent", Z_CAP * (1.0 - lowest / median), lowest, median

    sustained = float(np.median(win))
    ordered = np.sort(win)
    peak_up = float(ordered[-2]) if win.size >= 2 else float(ordered[-1])
    peak_down = float(ordered[1]) if win.size >= 2 else float(ordered[0])
    candidates = [
        (sustained, (sustained - median) / scale, 1.0),
        (peak_up, (peak_up - median) / scale, 0.6),
        (peak_down, (peak_down - median) / scale, 0.6),
    ]
    level, raw_z, weight = max(candidates, key=lambda c: abs(c[1]) * c[2])
    z = abs(raw_z) * weight
    if not np.any(base):
        # From a flat zero (errors, timeouts) any count is "new": its size in raw units
        # says little (counts may be sampled or scaled), so the z is bounded.
        z = min(z, params.from_zero_z * weight)
    # A sustained fall to a small fraction of a healthy level is the component dying,
    # whatever the KPI (a stopped pod keeps reporting a residue on some exporters).
    steady_baseline = dense_baseline and median > 0 and float(np.quantile(base, 0.1)) >= 0.5 * median
    if steady_baseline and sustained <= params.near_silent_ratio * median:
        return "silent", max(z, Z_CAP * (1.0 - sustained / median)), sustained, median
    relative = abs(level - median) / abs(median) if median != 0 else float("inf")
    if z < params.min_z or relative < params.min_relative_change:
        return None
    return ("up" if raw_z > 0 else "down"), z, level, median


def _first_exceeding(win: np.ndarray, median: float, direction: str) -> int:
    deviation = win - median if direction == "up" else median - win
    above = np.flatnonzero(deviation > 0.5 * np.max(deviation)) if deviation.size else []
    return int(above[0]) if len(above) else 0


def epoch_us(value: datetime) -> int:
    """Microseconds since the epoch of an aware datetime (the integer form used in loops)."""
    return int(round(value.timestamp() * 1_000_000))


def from_epoch_us(value: int) -> datetime:
    return datetime.fromtimestamp(int(value) / 1_000_000, tz=UTC)


class MetricDetector:
    """Metric series and pod placement at build time; robust-z and silence events at score time."""

    Params = MetricParams
    name = "metric"
    sequential = False
    raw = RawInput(sources=("apm", "infra"))
    feature_tables = (
        FeatureTable("metric_series", SERIES_SCHEMA),
        FeatureTable("metric_placement", PLACEMENT_SCHEMA, scope="interval"),
    )
    event_schemas = {"metric": METRIC_EVENT_SCHEMA}

    def __init__(self, params: MetricParams = MetricParams()) -> None:
        self.params = params

    def build(self, chunks: Iterable[Mapping[str, pl.DataFrame | None]], *, state_dir: Path | None = None,
              ) -> dict[str, pl.DataFrame]:
        """One chunk per day: ``{"apm": frame | None, "infra": frame | None}`` (None: unreadable)."""
        apm: list[pl.DataFrame] = []
        infra: list[pl.DataFrame] = []
        for chunk in chunks:
            if chunk.get("apm") is not None:
                apm.append(chunk["apm"])
            if chunk.get("infra") is not None:
                infra.append(chunk["infra"])
        apm_frame = pl.concat(apm) if apm else None
        infra_frame = pl.concat(infra) if infra else None
        return {"metric_series": metric_series(apm=apm_frame, infra=infra_frame),
                "metric_placement": placement(infra_frame)}

    def score(self, features: Mapping[str, pl.DataFrame], *, start: datetime, end: datetime,
              baseline_start: datetime) -> dict[str, pl.DataFrame]:
        events = score_metric_window(features["metric_series"], start=start, end=end, baseline_start=baseline_start,
                                     params=self.params)
        return {"metric": events}
