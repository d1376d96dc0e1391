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
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

from preprocess.baseline import Span, bucket_spans, clean_minutes, drop_spans, spans_before, window_first_minute
from preprocess.schema import APM_KPIS, TIME, FeatureTable, RawInput, strongest_first
from rca.system import SystemSpec

log = logging.getLogger(__name__)

# Long per-minute series: the stored metric feature.
SERIES_SCHEMA: dict[str, pl.DataType] = {
    "time": TIME,
    "component": pl.Utf8(),
    # apm_pod | apm_service | infra_pod | infra_node | infra_tidb | infra_tikv | infra_pd
    "kind": pl.Utf8(),
    "kpi": pl.Utf8(),
    "value": pl.Float64(),
}

METRIC_EVENT_SCHEMA: dict[str, pl.DataType] = {
    "component": pl.Utf8(),
    "kind": pl.Utf8(),
    "kpi": pl.Utf8(),
    "direction": pl.Utf8(),  # up | down | silent
    "z": pl.Float64(),  # robust z of the window against the baseline (capped)
    "ratio": pl.Float64(),  # window level / baseline median (null when baseline is 0)
    "baseline": pl.Float64(),
    "window_value": pl.Float64(),
    "onset": TIME,
    # what the window was compared with: before (the baseline), history (older minutes, the
    # baseline holding a previous incident), same_hour (the same clock span on earlier days,
    # no history before the window), after (the minutes after the window) or peers (the other
    # pods of its service / other nodes, no history at all)
    "reference": pl.Utf8(),
}

# Pod -> node placement intervals (from infra_pod's hosting-node label).
PLACEMENT_SCHEMA: dict[str, pl.DataType] = {"pod": pl.Utf8(), "node": pl.Utf8(), "first": TIME, "last": TIME}

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
    # Older history before the baseline, read to check the baseline itself: two hours hold
    # several incident windows' worth of minutes, so a median over them survives one
    # previous incident, yet stay within the part of a diurnal cycle that looks alike.
    history_minutes: int = 120
    # A baseline that drifts (real metrics cover the whole day: traffic ramps, a slow leak) can
    # also be fitted with a robust linear trend (statsmodels RLM, Huber); a level event then
    # stands only if the window also departs from that trend carried forward (needs
    # min_trend_points). Off by default: on the real tuning day it changed no ranking, on the
    # simulator's tuning seeds 101-104 it cost one case of 144 (AC@1 0.98 -> 0.97).
    trend_check: bool = False
    min_trend_points: int = 10
    min_history_points: int = 20  # fewer older minutes than this: the baseline cannot be checked
    # The baseline is "contaminated" (it holds a previous incident) when its median sits this
    # many robust z and this share away from the older history's: the same bar as an event
    # (min_z), with a wider relative margin so that a diurnal drift over two hours (about 10 %
    # for a day-long cycle of +-30 %) never qualifies.
    contaminated_z: float = 4.0
    contaminated_relative: float = 0.3
    # Minutes after the window read as the reference when there is no history before it
    # (recording just started): as long as the usual baseline.
    after_minutes: int = 30
    # ... starting this long after the window's end: a fault's effects outlast its declared end
    # (a stressed pod's CPU stays up for minutes), as other incidents' tails do
    # (``IndexParams.exclude_margin_minutes``). Other incidents after the window are skipped too.
    after_skip_minutes: int = 5
    # Peer comparison (no history at all): a pod against the other pods of its service, a node
    # against the other nodes. Healthy peers differ by their share of traffic (often 1.5x), so
    # only a level at least twice (or at most half) the peers' is abnormal.
    peer_min_relative: float = 1.0
    min_peers: int = 2  # fewer peers than this: no robust peer level
    # Earlier days whose same clock span (baseline and window) is read: the same hour of the
    # day is the reference that shares the diurnal phase, used when the day itself has no
    # history (before the window, or to check a baseline). One day: the index keeps days.
    same_hour_days: int = 1
    # Pinned at a ceiling: at least half the window's minutes sit above every baseline minute
    # and within this share of the baseline's noise of one another (not for whole-number
    # series, nor from a flat zero). A utilisation held at its limit (a
    # stressed pod's CPU throttled at its quota, a saturated link) rises only as far as the
    # limit allows, often less than min_z, but real load never holds that still. Such a
    # window is an "up" event of at least min_z. 0 turns the check off.
    ceiling_spread: float = 0.1
    # ... for at least this many minutes: two equal minutes of a small count are a coincidence.
    ceiling_min_minutes: int = 3
    # A silence must be rare for the series: when its own recorded minutes before the window
    # (other incidents' included: on a crowded day they are most of them) already sit this low
    # at a rate that makes the window's silent minutes likely (binomial tail at least this), the
    # silence is the series' habit (a sparse count's empty minutes), not this window's. 0 turns it off.
    silence_habit_alpha: float = 0.01


def metric_series(*, apm: pl.DataFrame | None, infra: pl.DataFrame | None) -> pl.DataFrame:
    """Long per-minute series from canonical APM (wide) and infra (long) frames.

    Infra series split by device, mountpoint, type or sql_type are collapsed to one
    series per (component, kpi) by their maximum: the worst disk or statement type is
    what a fault moves, and one name per KPI keeps evidence lines exact.

    The key columns are coded as integers (``_SeriesKeys``) before the rows are made long:
    an APM row's component and kind are coded once for all its KPIs, so no string column of
    a full-scale day's 1.4 M long rows is built, then coded again (~0.15 s a day).
    """
    apm_kpis = [k for k in APM_KPIS if k not in _STATIC_KPIS]
    wide = None
    if apm is not None and apm.height:
        wide = apm.select("time", pl.col("object_id").alias("component"),
                          pl.concat_str(pl.lit("apm_"), pl.col("object_type")).alias("kind"),
                          *(pl.col(k).cast(pl.Float64) for k in apm_kpis))
    infra_rows = None
    if infra is not None and infra.height:
        # A missing value (an all-null column, a counter the exporter does not fill) is absent data,
        # not a zero: no row is kept for it, so it can never read as "went to zero".
        infra_rows = (infra.lazy().filter(pl.col("component").is_not_null())
                      .select("time", "component", pl.col("family").alias("kind"), pl.col("kpi_key").alias("kpi"),
                              pl.col("value").cast(pl.Float64))
                      .filter(~pl.col("kpi").is_in(list(_STATIC_KPIS)) & pl.col("value").is_finite())
                      .collect())
    if wide is None and infra_rows is None:
        return pl.DataFrame(schema=SERIES_SCHEMA)
    kpi_names = _Runs.of(pl.Series(apm_kpis, dtype=pl.Utf8))
    wide_runs = {name: _Runs.of(wide.get_column(name)) for name in ("component", "kind")} if wide is not None else {}
    infra_runs = ({name: _Runs.of(infra_rows.get_column(name)) for name in _SERIES_KEY}
                  if infra_rows is not None else {})
    keys = _SeriesKeys.of({name: [runs[name] for runs in (wide_runs, infra_runs, {"kpi": kpi_names}) if name in runs]
                           for name in _SERIES_KEY})
    parts: list[pl.DataFrame] = []
    if wide is not None:
        component, kind = keys.coded("component", wide_runs["component"]), keys.coded("kind", wide_runs["kind"])
        # KPI by KPI, each in row order: the order an unpivot gives (a maximum's ties keep it).
        for kpi, code in zip(apm_kpis, keys.coded("kpi", kpi_names), strict=True):
            parts.append(pl.DataFrame({
                "time": wide.get_column("time"), "component": component, "kind": kind,
                "kpi": np.full(wide.height, code), "value": wide.get_column(kpi),
            }).filter(pl.col("value").is_finite()))
    if infra_rows is not None:
        parts.append(pl.DataFrame({
            "time": infra_rows.get_column("time"),
            **{name: keys.coded(name, infra_runs[name]) for name in _SERIES_KEY},
            "value": infra_rows.get_column("value"),
        }))
    frame = pl.concat(parts)
    values = frame.get_column("value").to_numpy()
    if np.signbit(values[values == 0]).any():
        # The nightly job reads the rows in file order (MetricDetector's RawInput). Every maximum
        # is the same whatever the order but that of a zero and a negative zero, which depends
        # on their order: put the rows in time order (stable, exact times), the order within a
        # minute that the readers' sorted rows have.
        frame = frame.sort("time", maintain_order=True)
    coded = _max_per_minute(frame, radix=[keys.radix(name) for name in _SERIES_KEY])
    return keys.decoded(coded).cast(pl.Schema(SERIES_SCHEMA))


_SERIES_KEY = ("component", "kind", "kpi")
_MINUTE_US = 60_000_000


@dataclass(frozen=True)
class _Runs:
    """A key column as runs of equal values: each run's value and length.

    A source's rows come file by file, a series' rows together (a full-scale day: ~500 runs of
    components in 0.8 M infra rows), so its key columns are coded run by run. Any order is
    right, only slower.
    """

    values: pl.Series
    lengths: np.ndarray

    @classmethod
    def of(cls, column: pl.Series) -> _Runs:
        starts = np.flatnonzero(np.concatenate(([len(column) > 0], column[1:].ne_missing(column[:-1]).to_numpy())))
        return cls(values=column.gather(starts), lengths=np.diff(starts, append=len(column)))


@dataclass(frozen=True)
class _SeriesKeys:
    """Integer codes of the series key columns that sort as their strings do.

    Per column, the sorted distinct non-null values of every source: a value's code is 1 + its
    index there, a null's is 0 (polars sorts nulls first). Ordering or grouping by the codes
    is ordering or grouping by the strings.
    """

    values: dict[str, pl.Series]

    @classmethod
    def of(cls, columns: Mapping[str, Sequence[_Runs]]) -> _SeriesKeys:
        return cls({name: pl.concat([r.values for r in runs]).drop_nulls().unique().sort()
                    for name, runs in columns.items()})

    def radix(self, name: str) -> int:
        """How many codes ``name`` has, null included."""
        return len(self.values[name]) + 1

    def coded(self, name: str, runs: _Runs) -> np.ndarray:
        """Each row's code (of the rows ``runs`` was made of)."""
        values = self.values[name]
        codes = runs.values.replace_strict(values, pl.int_range(1, len(values) + 1, eager=True), default=0,
                                           return_dtype=pl.Int64).to_numpy()
        return np.repeat(codes, runs.lengths)

    def decoded(self, frame: pl.DataFrame) -> pl.DataFrame:
        """``frame`` with each key column's codes replaced by their strings."""
        # One chunk: a gather from a chunked column costs several times more.
        return frame.with_columns(
            pl.concat([pl.Series([None], dtype=pl.Utf8), values], rechunk=True).gather(frame.get_column(name)).alias(name)
            for name, values in self.values.items())


def _max_per_minute(frame: pl.DataFrame, *, radix: Sequence[int]) -> pl.DataFrame:
    """The maximum ``value`` per (minute, component, kind, kpi), sorted by (component, kind, kpi, minute).

    The key columns are integer codes in ``range(radix[i])`` (``_SeriesKeys``). A full-scale
    day has ~1.4 M such rows: the key and the minute are packed into the bit fields of one
    int64 whose order is the wanted order, and numpy sorts and reduces that (polars' group and
    sort: several times slower). Bit fields rather than mixed radix: unpacking the groups'
    keys is then shifts and masks (a 64-bit division costs ~30 ms a day). Frames this does not
    fit (null times, times before 1970, more than 63 bits of key and minute) take polars' way.
    """
    if frame.height == 0:
        return frame.select("time", *_SERIES_KEY, "value").clear()
    # Whole minutes since 1970 from the µs: numpy divides by a constant cheaply (polars'
    # truncate and division cost several times more).
    micros = frame.get_column("time").dt.epoch("us")
    first = micros.min()
    if micros.null_count() or not isinstance(first, int) or first < 0:
        return _max_per_minute_polars(frame)
    minutes = micros.to_numpy() // _MINUTE_US
    first_minute = int(minutes.min())
    widths = [int(size - 1).bit_length() for size in radix]
    minute_width = int(minutes.max() - first_minute).bit_length()
    if sum(widths) + minute_width > 63:
        return _max_per_minute_polars(frame)
    # In place: each temporary of 1.4 M int64 is a fresh allocation's page faults.
    code = np.zeros(frame.height, dtype=np.int64)
    for name, width in zip(_SERIES_KEY, widths, strict=True):
        code <<= width
        code |= frame.get_column(name).to_numpy()
    code <<= minute_width
    minutes -= first_minute
    code |= minutes
    order = np.argsort(code, kind="stable")
    code = code[order]
    starts = np.flatnonzero(np.concatenate(([True], code[1:] != code[:-1])))
    value = np.maximum.reduceat(frame.get_column("value").to_numpy()[order], starts)
    # The groups' keys and minutes from their sorted codes (cheaper than a gather from the rows
    # in their sorted order).
    code = code[starts]
    minute = (code & ((1 << minute_width) - 1)) + first_minute
    code >>= minute_width
    columns: dict[str, np.ndarray] = {}
    for name, width in reversed(list(zip(_SERIES_KEY, widths, strict=True))):
        columns[name] = code & ((1 << width) - 1)
        code >>= width
    return pl.DataFrame({
        "time": pl.Series(minute * _MINUTE_US).cast(pl.Datetime("us", "UTC")),
        **{name: columns[name] for name in _SERIES_KEY},
        "value": pl.Series(value, dtype=pl.Float64),
    })


def _max_per_minute_polars(frame: pl.DataFrame) -> pl.DataFrame:
    """``_max_per_minute`` by polars' group and sort: any frame (null times, times before 1970)."""
    return (
        frame.lazy().group_by(pl.col("time").dt.truncate("1m"), *_SERIES_KEY)
        .agg(pl.col("value").max())
        .sort(*_SERIES_KEY, "time")
        .collect()
    )


def placement(infra: pl.DataFrame | None) -> pl.DataFrame:
    """Pod -> node placement intervals from infra_pod rows: ``[pod, node, first, last]``."""
    if infra is None or infra.height == 0:
        return pl.DataFrame(schema=PLACEMENT_SCHEMA)
    # Lazy: the filter then copies the three columns used, not all of the day's infra columns.
    return (
        infra.lazy().filter((pl.col("family") == "infra_pod") & pl.col("node").is_not_null())
        .group_by(pl.col("component").alias("pod"), "node")
        .agg(pl.col("time").min().alias("first"), pl.col("time").max().alias("last"))
        .sort("pod", "first", "node").cast(pl.Schema(PLACEMENT_SCHEMA))
        .collect()
    )


def robust_location_scale(values: np.ndarray, *, ordered: bool = False, spread_floor: bool = True) -> tuple[float, float]:
    """Median and a floored MAD scale (σ-consistent).

    The floor keeps a near-constant baseline (e.g. zero errors) from turning any
    single blip into an infinite z: 5 % of the level, or half the baseline's spread.
    Without ``spread_floor`` the spread is left out: a reference pooled from other
    incidents' minutes has outliers by design, and their spread would hide any change.
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
    spread = float(np.std(values)) if spread_floor else 0.0
    scale = max(mad, 0.05 * abs(median), 0.5 * spread, 1e-6)
    # A flat zero baseline (error counters): one unit is the smallest meaningful change.
    if median == 0.0 and mad == 0.0 and spread == 0.0:
        scale = 1.0
    return median, scale


def change_point_onset(values: np.ndarray, *, times_us: np.ndarray, window_start_us: int) -> int | None:
    """Index of the most likely change point near the window start (ruptures, Binseg l2).

    Only breaks from three minutes before the window on, by the clock, are accepted: a
    change far in the baseline is not this incident's onset. (By position they could be
    far earlier: a baseline that skips other incidents' minutes jumps in time.)
    """
    if values.size < 6 or np.allclose(values, values[0]):
        return None
    # Imported here: ruptures brings scipy.stats (~0.8 s), which the nightly job never needs.
    import ruptures

    algo = ruptures.Binseg(model="l2", min_size=2, jump=1).fit(values.reshape(-1, 1))
    breaks = [b for b in algo.predict(n_bkps=2) if b < values.size]
    eligible = [b for b in breaks if times_us[b] >= window_start_us - 3 * _MINUTE_US]
    return min(eligible) if eligible else None


def score_metric_window(
    series: pl.DataFrame,
    *,
    start: datetime,
    end: datetime,
    baseline_start: datetime,
    system: SystemSpec,
    params: MetricParams = MetricParams(),
    exclude: Sequence[Span] = (),
) -> pl.DataFrame:
    """One event per series whose window [start, end] deviates from [baseline_start, start).
    ``system`` names which pods belong to one service (peers, where a series has no history).

    The window level is the median of the window for a sustained change, or the
    second most extreme minute for short faults (a pod kill lasts a minute or two),
    discounted so that sustained shifts rank above single blips.

    Real telemetry's habits (``series`` may hold the ``context_spans``: minutes from
    ``params.history_minutes`` before ``baseline_start`` to ``params.after_minutes`` after
    ``end``, and the same clock span on ``params.same_hour_days`` earlier days):

    * rows in ``exclude`` spans before the window (other incidents' windows) are not baseline;
    * a baseline that itself sits far from the older history (or, without one, from the same
      hour on earlier days) holds a previous incident: an event against it stands only if it
      also stands against that history;
    * with no baseline (recording just started) the same hour on earlier days is the
      reference, else the minutes after the window (from ``params.after_skip_minutes`` after
      its end; ``exclude`` spans after the window left out while enough minutes remain), else a
      pod is compared with its peers;
    * a silence (against any reference) is dropped when the series' own recorded minutes before the
      window (other incidents' included) are as often that low (``params.silence_habit_alpha``):
      on a crowded day the baseline is a few scattered minutes, which can all miss a sparse
      count's empty minutes.
    """
    window_start = window_first_minute(start)
    history_start = baseline_start - timedelta(minutes=params.history_minutes)
    after_end = end + timedelta(minutes=params.after_minutes)
    spans = spans_before(exclude, window_start=window_start)
    earlier = _earlier_spans(baseline_start=baseline_start, end=end, params=params)
    keep = (pl.col("time") >= history_start) & (pl.col("time") <= after_end)
    for lo, hi in earlier:
        keep = keep | pl.col("time").is_between(pl.lit(lo), pl.lit(hi))
    # Missing values are absent (an index written before ``metric_series`` dropped them may hold null rows).
    sub = drop_spans(series.filter(keep & pl.col("value").is_finite()), spans)
    if sub.height == 0:
        return pl.DataFrame(schema=METRIC_EVENT_SCHEMA)
    expected_window_minutes = max(1, int((end - window_start).total_seconds() // 60) + 1)
    # A minute in which no series has a row is unrecorded (before the recording began, between
    # two days' files, a lost file), not every series' missing row: a day whose files start at
    # 03:51 leaves a baseline reaching back to 03:27 seven minutes, all of them recorded (dense).
    recorded_minutes = sub.get_column("time").dt.truncate("1m").unique()

    def expected_minutes(lo: datetime, hi: datetime) -> int:
        """Minutes of [lo, hi) outside other incidents in which the source recorded anything."""
        return max(1, int(min(clean_minutes(lo, hi, spans), recorded_minutes.is_between(lo, hi, closed="left").sum())))

    expected_baseline_minutes = expected_minutes(baseline_start, window_start)
    expected_history_minutes = expected_minutes(history_start, baseline_start)
    expected_earlier_minutes = max(1, int(sum((hi - lo).total_seconds() // 60 for lo, hi in earlier)))
    data_end = sub.get_column("time").max()
    assert isinstance(data_end, datetime)  # ``time`` is TIME and ``sub`` is not empty
    after_start = end + timedelta(minutes=params.after_skip_minutes)
    # Only the incidents that overlap the minutes after the window matter (a phase has hundreds).
    later = bucket_spans([(lo, hi) for lo, hi in exclude if lo >= window_start and lo <= after_end and hi >= after_start])
    expected_after_minutes = max(1, int((min(after_end, data_end) - after_start).total_seconds() // 60))
    later_us = [(epoch_us(lo), epoch_us(hi)) for lo, hi in later]
    # A component that keeps reporting other KPIs in the window is alive: one of its series
    # missing there is an absent column (an exporter that stops filling it), not silence.
    alive = {(component, kind): minutes for component, kind, minutes in
             sub.filter((pl.col("time") >= window_start) & (pl.col("time") <= end))
             .group_by("component", "kind").agg(pl.col("time").n_unique()).iter_rows()}
    recorded = _recorded_before(series, lo=history_start, window_start=window_start, params=params)
    grouped = sub.sort("time").group_by("component", "kind", "kpi", maintain_order=True).agg(
        pl.col("time").dt.epoch("us").alias("time_us"), pl.col("value"))
    bounds = (epoch_us(baseline_start), epoch_us(window_start), epoch_us(end), epoch_us(history_start),
              epoch_us(after_start))
    events: list[dict] = []
    # Series without a baseline: (row, window values, first window minute, already an event against
    # the same hour or the minutes after). All are one another's peers; those without an event are judged so.
    no_history: list[tuple[dict, np.ndarray, int, bool]] = []
    for row in grouped.iter_rows(named=True):
        times = np.array(row["time_us"], dtype=np.int64)
        values = np.array(row["value"], dtype=float)
        finite = np.isfinite(values)
        times, values = times[finite], values[finite]
        earlier_mask, older_mask = times < bounds[3], (times >= bounds[3]) & (times < bounds[0])
        base_mask = (times >= bounds[0]) & (times < bounds[1])
        win_mask, after_mask = (times >= bounds[1]) & (times <= bounds[2]), times > bounds[4]
        base, win, same_hour = values[base_mask], values[win_mask], values[earlier_mask]
        component_alive = alive.get((row["component"], row["kind"]), 0) >= params.silent_fraction * expected_window_minutes
        reference = "before"
        if base.size >= params.min_baseline_points:
            event = _score_one(base=base, win=win, expected_window_minutes=expected_window_minutes,
                               expected_baseline_minutes=expected_baseline_minutes, params=params,
                               missing_is_silence=not component_alive,
                               gap=_has_gap(times[win_mask], window_start_us=bounds[1], minutes=expected_window_minutes))
            older, older_minutes = values[older_mask], expected_history_minutes
            if older.size < params.min_history_points:
                older, older_minutes = same_hour, expected_earlier_minutes
            if (params.trend_check and event is not None and event[0] in ("up", "down")
                    and base.size >= params.min_trend_points
                    and not _departs_from_trend(times[base_mask], base, times[win_mask], win, direction=event[0],
                                                params=params)):
                event = None
            if event is not None and older.size >= params.min_history_points and _contaminated(base, older, params):
                checked = _score_one(base=older, win=win, expected_window_minutes=expected_window_minutes,
                                     expected_baseline_minutes=older_minutes, params=params,
                                     missing_is_silence=not component_alive)
                event = checked if checked is not None and checked[0] == event[0] else None
                reference = "history"
        else:
            # No baseline: the same hour on earlier days, else the minutes after the window (else
            # the peers, below). Rows that come and go while recording starts are not silence: levels only.
            if same_hour.size >= params.min_baseline_points:
                reference, other, other_minutes = "same_hour", same_hour, expected_earlier_minutes
            else:
                reference, other_minutes = "after", expected_after_minutes
                other = values[_after_reference(times, after_mask, later_us=later_us, params=params)]
            event = (_score_one(base=other, win=win, expected_window_minutes=expected_window_minutes,
                                expected_baseline_minutes=other_minutes, params=params, missing_is_silence=False)
                     if other.size >= params.min_baseline_points else None)
        own = recorded.get((row["component"], row["kind"], row["kpi"]))
        if event is not None and own is not None and _habitual_silence(event, win=win, recorded=own, params=params):
            event = None
        if base.size < params.min_baseline_points and win.size:
            no_history.append((row, win, int(times[win_mask][0]), event is not None))
        if event is None:
            continue
        direction, z, level, median = event
        scored_times = np.concatenate([times[base_mask], times[win_mask]])
        onset_index = (change_point_onset(np.concatenate([base, win]), times_us=scored_times, window_start_us=bounds[1])
                       if direction != "silent" and reference == "before" else None)
        if onset_index is not None and onset_index < scored_times.size:
            onset = from_epoch_us(scored_times[onset_index])
        elif win.size:
            onset = from_epoch_us(times[win_mask][_first_exceeding(win, median, direction)])
        else:
            onset = window_start
        events.append({
            "component": row["component"], "kind": row["kind"], "kpi": row["kpi"],
            "direction": direction, "z": min(z, Z_CAP),
            "ratio": (level / median) if median != 0 else None,
            "baseline": median, "window_value": level,
            "onset": onset, "reference": reference,
        })
    events += _peer_events(no_history, system=system, params=params)
    if not events:
        return pl.DataFrame(schema=METRIC_EVENT_SCHEMA)
    return strongest_first(pl.DataFrame(events, schema=METRIC_EVENT_SCHEMA), "component", "kind", "kpi", "direction")


def _after_reference(times: np.ndarray, after_mask: np.ndarray, *, later_us: list[tuple[int, int]],
                     params: MetricParams) -> np.ndarray:
    """The minutes after the window to compare it with: without the incidents that follow while
    enough minutes remain, else with them (Nezha injects a fault every ~8 minutes; the robust
    median and MAD still read the level, most incidents being elsewhere)."""
    clean = after_mask.copy()
    for lo_us, hi_us in later_us:
        clean &= (times < lo_us) | (times > hi_us)
    return clean if clean.sum() >= params.min_baseline_points else after_mask


def _recorded_before(series: pl.DataFrame, *, lo: datetime, window_start: datetime,
                     params: MetricParams) -> dict[tuple[str, str, str], np.ndarray]:
    """Each series' recorded values in [lo, window_start), no minute left out; empty when the habit check is off."""
    if params.silence_habit_alpha <= 0:
        return {}
    rows = series.filter((pl.col("time") >= lo) & (pl.col("time") < window_start) & pl.col("value").is_finite())
    return {(component, kind, kpi): np.array(values, dtype=float) for component, kind, kpi, values in
            rows.group_by("component", "kind", "kpi").agg(pl.col("value")).iter_rows()}


def _habitual_silence(event: tuple[str, float, float, float], *, win: np.ndarray, recorded: np.ndarray,
                      params: MetricParams) -> bool:
    """Whether a silence's low minutes are as common before the window (``MetricParams.silence_habit_alpha``)."""
    direction, _, _, median = event
    if direction != "silent" or win.size == 0 or recorded.size == 0:
        return False
    floor = params.near_silent_ratio * median
    low = int(np.sum(win <= floor))
    rate = float(np.mean(recorded <= floor))
    if low == 0 or rate == 0.0:
        return False  # silent by missing minutes, or never this low before: the silence stands
    tail = sum(math.comb(win.size, k) * rate ** k * (1.0 - rate) ** (win.size - k) for k in range(low, win.size + 1))
    return tail >= params.silence_habit_alpha


def _departs_from_trend(base_times: np.ndarray, base: np.ndarray, win_times: np.ndarray, win: np.ndarray, *,
                        direction: str, params: MetricParams) -> bool:
    """Whether the window still departs (in ``direction``) from the baseline's robust linear trend carried forward.

    A flat baseline gives a flat trend, so the question is only asked of series that drift:
    a level reached by following the baseline's own slope is not an anomaly.
    """
    import statsmodels.api as sm  # one fit per candidate event only; statsmodels is slow to import

    if win.size == 0 or np.ptp(base) == 0:
        return True
    minutes = (base_times - base_times[0]) / 60e6
    design = sm.add_constant(minutes, has_constant="add")
    try:
        fit = sm.RLM(base, design, M=sm.robust.norms.HuberT()).fit()
    except (ValueError, np.linalg.LinAlgError, ZeroDivisionError):
        return True  # a degenerate baseline: the level test alone decides
    slope = float(fit.params[1])
    if abs(slope) * minutes[-1] < 0.5 * robust_location_scale(base)[1]:
        return True  # no drift worth the name across the baseline
    predicted = fit.predict(sm.add_constant((win_times - base_times[0]) / 60e6, has_constant="add"))
    residual = float(np.median(win - predicted))
    scale = max(float(fit.scale), 0.05 * abs(float(np.median(predicted))), 1e-9)
    relative = abs(residual) / max(abs(float(np.median(predicted))), 1e-9)
    if direction == "up":
        return residual / scale >= params.min_z and relative >= params.min_relative_change
    return -residual / scale >= params.min_z and relative >= params.min_relative_change


def _has_gap(window_times: np.ndarray, *, window_start_us: int, minutes: int) -> bool:
    """Whether a minute of the window is missing before the series' last minute in it.

    Minutes missing at the end are not a gap: the data may simply not be there yet.
    """
    if window_times.size == 0:
        return False
    expected = window_start_us + 60_000_000 * np.arange(minutes, dtype=np.int64)
    missing = np.setdiff1d(expected, window_times)
    return bool(np.any(missing < window_times.max()))


def _earlier_spans(*, baseline_start: datetime, end: datetime, params: MetricParams) -> list[Span]:
    """[baseline_start, end] on each of the ``same_hour_days`` earlier days."""
    return [(baseline_start - timedelta(days=d), end - timedelta(days=d)) for d in range(1, params.same_hour_days + 1)]


def context_spans(*, start: datetime, end: datetime, baseline_start: datetime, params: MetricParams) -> list[Span]:
    """Minutes of ``metric_series`` the scorer reads besides [baseline_start, end]: older history and the
    minutes after the window (one span), the same clock span on earlier days."""
    history = (baseline_start - timedelta(minutes=params.history_minutes), end + timedelta(minutes=params.after_minutes))
    return [history, *_earlier_spans(baseline_start=baseline_start, end=end, params=params)]


def _contaminated(base: np.ndarray, older: np.ndarray, params: MetricParams) -> bool:
    """The baseline's level sits far from the older history's: it holds something (a previous incident)."""
    older_median, older_scale = robust_location_scale(older, ordered=True)
    shift = abs(float(np.median(base)) - older_median)
    relative = shift / abs(older_median) if older_median != 0 else (float("inf") if shift > 0 else 0.0)
    return shift / older_scale >= params.contaminated_z and relative >= params.contaminated_relative


def _peer_group(component: str, kind: str, *, system: SystemSpec) -> str | None:
    """Which components a series is comparable with when there is no history: pods of one service, nodes."""
    if kind in ("apm_pod", "infra_pod"):
        return f"service:{system.service_of(component)}"
    if kind == "infra_node":
        return "nodes"
    return None


def _peer_events(rows: list[tuple[dict, np.ndarray, int, bool]], *, system: SystemSpec,
                 params: MetricParams) -> list[dict]:
    """Series without a baseline and without an event yet, each against its peers' window levels (pooled
    minutes, robust). A fault that outlasts its window looks normal against the minutes after it; its
    peers still tell."""
    groups: dict[tuple[str, str, str], list[tuple[dict, np.ndarray, int, bool]]] = {}
    for member in rows:
        group = _peer_group(member[0]["component"], member[0]["kind"], system=system)
        if group is not None:
            groups.setdefault((group, member[0]["kind"], member[0]["kpi"]), []).append(member)
    events: list[dict] = []
    for members in groups.values():
        if len(members) < params.min_peers + 1:
            continue
        for index, (row, win, first_us, scored) in enumerate(members):
            if scored:
                continue
            peers = np.concatenate([m[1] for k, m in enumerate(members) if k != index])
            median, scale = robust_location_scale(peers)
            level = float(np.median(win))
            raw_z = (level - median) / scale
            relative = abs(level - median) / abs(median) if median != 0 else (float("inf") if level != 0 else 0.0)
            if abs(raw_z) < params.min_z or relative < params.peer_min_relative:
                continue
            events.append({
                "component": row["component"], "kind": row["kind"], "kpi": row["kpi"],
                "direction": "up" if raw_z > 0 else "down", "z": min(abs(raw_z), Z_CAP),
                "ratio": (level / median) if median != 0 else None, "baseline": median, "window_value": level,
                "onset": from_epoch_us(first_us), "reference": "peers",
            })
    return events


def _score_one(
    *, base: np.ndarray, win: np.ndarray, expected_window_minutes: int, expected_baseline_minutes: int,
    params: MetricParams, missing_is_silence: bool = True, gap: bool = False,
) -> tuple[str, float, float, float] | None:
    median, scale = robust_location_scale(base, ordered=True)
    # Went silent: a series that was dense and non-zero in the baseline is now mostly
    # missing, or mostly zero. Sparse or often-zero series (idle pods) never qualify.
    dense_baseline = base.size >= 0.9 * expected_baseline_minutes
    coverage = win.size / expected_window_minutes
    if missing_is_silence and dense_baseline and coverage < params.silent_fraction and expected_window_minutes >= 3:
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
    if z < params.min_z and raw_z > 0:
        pinned = _pinned_level(base=base, win=win, scale=scale, expected_window_minutes=expected_window_minutes,
                               params=params)
        if pinned is not None and abs(pinned - median) >= params.min_relative_change * abs(median):
            return "up", params.min_z, pinned, median
    if z < params.min_z or relative < params.min_relative_change:
        return None
    return ("up" if raw_z > 0 else "down"), z, level, median


def _pinned_level(*, base: np.ndarray, win: np.ndarray, scale: float, expected_window_minutes: int,
                  params: MetricParams) -> float | None:
    """The level a window is held at when it sits at a ceiling (``MetricParams.ceiling_spread``), else None."""
    if params.ceiling_spread <= 0 or base.size < params.min_baseline_points:
        return None
    # A rise from a flat zero is the from-zero rule's (one error a minute is not a ceiling), and
    # whole numbers (counts, processes) repeat a value by nature: stillness says nothing there.
    if not np.any(base) or (_whole_numbers(base) and _whole_numbers(win)):
        return None
    # The window's top minutes (its onset minute may still be climbing) held within the band,
    # for half the minutes the window spans, not only of those it holds.
    high = win[win >= float(np.max(win)) - params.ceiling_spread * scale]
    needed = max(params.ceiling_min_minutes, (expected_window_minutes + 1) // 2)
    if high.size < needed or float(np.min(high)) <= float(np.max(base)):
        return None
    return float(np.median(high))


def _whole_numbers(values: np.ndarray) -> bool:
    return bool(np.all(np.mod(values, 1.0) == 0.0))


def _first_exceeding(win: np.ndarray, median: float, direction: str) -> int:
    deviation = win - median if direction == "up" else median - win
    if not deviation.size:
        return 0
    above = np.flatnonzero(deviation > 0.5 * np.max(deviation))
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
    # metric_series and placement group the rows by their keys and sort what they write: the
    # readers' sort of the day's rows would be work thrown away.
    raw = RawInput(sources=("apm", "infra"), ordered=False)
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
            if (apm_chunk := chunk.get("apm")) is not None:
                apm.append(apm_chunk)
            if (infra_chunk := chunk.get("infra")) is not None:
                infra.append(infra_chunk)
        apm_frame = pl.concat(apm) if apm else None
        infra_frame = pl.concat(infra) if infra else None
        return {"metric_series": metric_series(apm=apm_frame, infra=infra_frame),
                "metric_placement": placement(infra_frame)}

    def context_spans(self, *, start: datetime, end: datetime, baseline_start: datetime) -> list[Span]:
        """Older history and the minutes after the window; the same clock span on earlier days."""
        return context_spans(start=start, end=end, baseline_start=baseline_start, params=self.params)

    def score(self, features: Mapping[str, pl.DataFrame], *, start: datetime, end: datetime,
              baseline_start: datetime, system: SystemSpec, exclude: Sequence[Span] = ()) -> dict[str, pl.DataFrame]:
        events = score_metric_window(features["metric_series"], start=start, end=end, baseline_start=baseline_start,
                                     system=system, params=self.params, exclude=exclude)
        return {"metric": events}
