"""Window query: the evidence index -> ranked candidates with evidence for one incident window.

``query_window`` loads, for every registered detector (``preprocess.detect.DETECTORS``),
the feature tables covering [start - baseline, end] (one or two CST day partitions), runs
its ``score`` against the neighbouring baseline, and ranks candidates (``index.rank``).
Every knob comes in one ``IndexParams``. ``score_window`` is the scoring half alone: the case
report and the agent tools read its events instead of scoring the window again.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from index import store
from index.confidence import answer_confidence
from index.models import ModalityStatus, WindowQueryResult
from index.params import IndexParams
from index.rank import rank_candidates
from index.status import window_status
from index.store import Manifest
from preprocess.baseline import drop_spans, extended_start, merged_spans, spans_before, window_first_minute
from preprocess.detect import make_detectors
from preprocess.detect_log import LOG_COUNT_SCHEMA
from preprocess.detect_metric import PLACEMENT_SCHEMA, SERIES_SCHEMA
from preprocess.detect_trace import EDGE_STATS_SCHEMA, call_graph
from rca.system import SystemSpec
from rca.timeutil import as_utc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScoredWindow:
    """One incident window scored by every detector under one ``IndexParams``.

    The one scoring path: the ranking (``query_window``), the case report and the agent tools
    all read these events, so a setting that moves one moves them all.
    """

    start: datetime
    end: datetime
    scored_end: datetime  # ``end``, or later for a brief window (``params.brief_window_minutes``)
    baseline_start: datetime  # reaches back past excluded incidents (``params.max_baseline_reach_minutes``)
    excluded: list[tuple[datetime, datetime]]  # other incidents' minutes left out of the baseline
    params: IndexParams
    features: dict[str, pl.DataFrame]  # feature table name -> rows read for the window
    core: dict[str, pl.DataFrame]  # metric / log / trace -> per-minute rows of [baseline_start, scored_end]
    events: dict[str, pl.DataFrame]  # event kind (metric, log, trace, fanout, ...) -> the detector's events
    history: dict[str, int]  # modality -> baseline minutes with data
    missing: dict[str, list[str]]  # detector (modality) -> its absent partitions
    manifest: Manifest


def score_window(
    index_dir: Path,
    *,
    start: datetime,
    end: datetime,
    params: IndexParams = IndexParams(),
    exclude_windows: Sequence[tuple[datetime, datetime]] = (),
) -> ScoredWindow:
    """Every detector's events for the window [start, end] (UTC); see ``query_window`` for the window rules."""
    start, end = as_utc(start), as_utc(end)
    if end < start:
        raise ValueError(f"window end {end.isoformat()} precedes start {start.isoformat()}")
    index_dir = Path(index_dir)
    manifest = store.load_manifest(index_dir)  # fails clearly on a foreign schema version
    window_start = window_first_minute(start)
    spans = spans_before([(as_utc(a), as_utc(b)) for a, b in exclude_windows], window_start=window_start,
                         margin=timedelta(minutes=params.exclude_margin_minutes))
    baseline_start = extended_start(window_start, minutes=params.baseline_minutes, spans=spans,
                                    max_minutes=params.max_baseline_reach_minutes)
    # Incidents that start after this one (with their tails): no reference either, where a
    # detector reads the minutes after the window (detectors clip ``exclude`` to their needs).
    later = [(as_utc(a), as_utc(b) + timedelta(minutes=params.exclude_margin_minutes))
             for a, b in exclude_windows if as_utc(a) > start]
    # A brief fault is scored over the minutes after it too (params.brief_window_minutes).
    scored_end = max(end, start + timedelta(minutes=params.brief_window_minutes))
    window = {"start": start, "end": scored_end, "baseline_start": baseline_start}
    core_days = set(store.days_for_window(baseline_start, scored_end))

    detectors = make_detectors(params.detector_params())
    features: dict[str, pl.DataFrame] = {}
    missing: dict[str, list[str]] = {}  # detector (modality) -> its absent partitions
    events: dict[str, pl.DataFrame] = {}
    for name, detector in detectors.items():
        # Per-minute tables are read with the detector's context too (older history, minutes
        # after the window, the same hour on earlier days); only the window's own days count as missing.
        reads = merged_spans([(baseline_start, scored_end), *detector.context_spans(**window)])
        for table in detector.feature_tables:
            if table.scope != "minute":
                features[table.name], absent = store.load_feature(index_dir, table, **window)
            else:
                parts = []
                for lo, hi in reads:
                    part, absent = store.load_feature(index_dir, table, start=start, end=hi, baseline_start=lo)
                    parts.append(part)
                    missing.setdefault(name, []).extend(a for a in absent if a.split("/", 1)[0] in core_days)
                features[table.name] = pl.concat(parts) if len(parts) > 1 else parts[0]
                continue
            missing.setdefault(name, []).extend(absent)
        events.update(detector.score(features, **window, system=params.system, exclude=[*spans, *later]))

    core = {name: _minutes_between(features[table], baseline_start, scored_end)
            for name, table in (("metric", "metric_series"), ("log", "log_counts"), ("trace", "trace_edges"))}
    history = {name: _baseline_minutes(frame, baseline_start=baseline_start, window_start=window_start, spans=spans)
               for name, frame in core.items()}
    return ScoredWindow(start=start, end=end, scored_end=scored_end, baseline_start=baseline_start,
                        excluded=list(spans), params=params, features=features, core=core, events=events,
                        history=history, missing=missing, manifest=manifest)


def query_window(
    index_dir: Path,
    *,
    start: datetime,
    end: datetime,
    top_k: int = 10,
    params: IndexParams = IndexParams(),
    exclude_windows: Sequence[tuple[datetime, datetime]] = (),
) -> WindowQueryResult:
    """Ranked candidates for the incident window [start, end] (UTC).

    ``params.baseline_minutes`` of data before ``start`` are the fault-free reference; a window
    shorter than ``params.brief_window_minutes`` is scored over that many minutes from its start
    (a pod kill's evidence comes just after its one second). ``exclude_windows`` are other
    incidents' windows known to the caller (the case windows of its input file: input, not
    ground truth): their minutes (and ``params.exclude_margin_minutes`` after each) are left
    out of the baseline, which reaches further back to keep its length. Each candidate carries
    up to ``params.max_evidence`` lines, one of each kind of signal first. What the index lacks
    for the window is in ``data_status`` (index/status.py), including a thin baseline (no
    history before the window); no candidates at all come with ``empty_reason``.
    """
    def rescore(relaxed: IndexParams) -> ScoredWindow:
        return score_window(index_dir, start=start, end=end, params=relaxed, exclude_windows=exclude_windows)

    result, _ = rank_or_relax(rescore(params), top_k=top_k, rescore=rescore)
    return result


def rank_or_relax(scored: ScoredWindow, *, top_k: int,
                  rescore: Callable[[IndexParams], ScoredWindow]) -> tuple[WindowQueryResult, ScoredWindow]:
    """``rank_window(scored)``, or where no candidate passed although telemetry was there, the
    candidates of a second scoring with relaxed thresholds (``rescore(scored.params.relaxed())``)
    rather than none: they say they rest on weak evidence. Returns them and the scoring they came from.
    """
    result = rank_window(scored, top_k=top_k)
    if result.candidates or all(s.state == "no_data" for s in result.data_status):
        return result, scored
    weak_scored = rescore(scored.params.relaxed())
    weak = rank_window(weak_scored, top_k=top_k)
    if not weak.candidates:
        return result, scored
    log.info("window %s..%s: candidates from relaxed thresholds", scored.start.isoformat(), scored.end.isoformat())
    return weak.model_copy(update={"relaxed": True, "parameters": result.parameters,
                                   "confidence": answer_confidence(weak.candidates, relaxed=True,
                                                                   weights=scored.params.rank,
                                                                   system=scored.params.system)}), weak_scored


def rank_window(scored: ScoredWindow, *, top_k: int = 10) -> WindowQueryResult:
    """Ranked candidates from a scored window (``query_window`` without the scoring)."""
    start, end, params, history, missing, events = (scored.start, scored.end, scored.params, scored.history,
                                                     scored.missing, scored.events)
    series, counts, edges = scored.core["metric"], scored.core["log"], scored.core["trace"]
    placement = scored.features["metric_placement"]
    candidates = rank_candidates(
        events=events, graph=call_graph(edges), placement=placement,
        known_pods=_known_pods(series, counts, edges, placement), top_k=top_k, max_evidence=params.max_evidence,
        window_start=start, weights=params.rank, system=params.system,
    )
    data_status = [
        status.model_copy(update={"baseline_minutes": history[status.modality],
                                  "baseline_thin": status.state != "no_data"
                                  and history[status.modality] < params.thin_baseline_minutes})
        # The minutes scored: a per-minute row stamped 13:03:00 holds 13:03:21, and a brief window
        # is scored over the minutes after it (a 1-second pod kill had "no data" in every modality).
        for status in window_status(manifest=scored.manifest, start=window_first_minute(start),
                                    end=scored.scored_end, frames={
            "metric": (series, missing.get("metric", [])), "log": (counts, missing.get("log", [])),
            "trace": (edges, missing.get("trace", []))})]
    empty_reason = None if candidates else _empty_reason(data_status, events)
    if empty_reason:
        log.warning("window %s..%s: no candidates: %s", start.isoformat(), end.isoformat(), empty_reason)
    log.info("window %s..%s: %s -> %d candidates", start.isoformat(), end.isoformat(),
             ", ".join(f"{frame.height} {kind}" for kind, frame in events.items()), len(candidates))
    return WindowQueryResult(start=start, end=end, candidates=candidates, data_status=data_status,
                             parameters=params.as_dict(), empty_reason=empty_reason,
                             confidence=answer_confidence(candidates, relaxed=False, weights=params.rank,
                                                          system=params.system))


def _minutes_between(frame: pl.DataFrame, lo: datetime, hi: datetime) -> pl.DataFrame:
    return frame.filter(pl.col("time").is_between(pl.lit(lo), pl.lit(hi))) if frame.height else frame


def _baseline_minutes(frame: pl.DataFrame, *, baseline_start: datetime, window_start: datetime,
                      spans: Sequence[tuple[datetime, datetime]]) -> int:
    """Distinct minutes with rows in the baseline (excluded spans left out)."""
    rows = drop_spans(frame.filter((pl.col("time") >= baseline_start) & (pl.col("time") < window_start)), spans)
    return rows.get_column("time").dt.truncate("1m").n_unique() if rows.height else 0


def _empty_reason(data_status: list[ModalityStatus], events: dict[str, pl.DataFrame]) -> str:
    """Why a window has no candidates, in words."""
    if all(s.state == "no_data" for s in data_status):
        return "the index holds no data for the window"
    if not any(frame.height for frame in events.values()):
        thin = [s.modality for s in data_status if s.baseline_thin]
        if thin:
            return (f"no component deviated from what little reference there is (thin baseline: "
                    f"{', '.join(thin)}; no history before the window, few minutes after it, no peers that differ)")
        return "no component deviated from its baseline in any modality"
    return "anomalies were found but none on an answerable component"


def known_components(index_dir: Path, *, start: datetime, end: datetime, system: SystemSpec) -> list[str]:
    """Every answerable component seen in the data around a window: services, pods, worker nodes.

    This is the candidate universe a ranking is drawn from (and the denominator of a
    chance baseline); single-pod components are named by their service. Every modality adds
    what it saw (a system may have no metrics, or no traces).
    """
    start, end = as_utc(start), as_utc(end)
    index_dir = Path(index_dir)
    series, _ = store.load_table(index_dir, table="metric_series", start=start, end=end, schema=SERIES_SCHEMA)
    counts, _ = store.load_table(index_dir, table="log_counts", start=start, end=end, schema=LOG_COUNT_SCHEMA)
    edges, _ = store.load_table(index_dir, table="trace_edges", start=start, end=end, schema=EDGE_STATS_SCHEMA)
    placement = store.load_intervals(index_dir, table="metric_placement", start=start, end=end,
                                     schema=PLACEMENT_SCHEMA)
    pods = _known_pods(series, counts, edges, placement)
    services = {system.service_of(p) for p in pods} | set(
        series.filter(pl.col("kind").is_in(["apm_service", "infra_tidb", "infra_tikv", "infra_pd"]))
        .get_column("component").unique()) | set(edges.get_column("caller").drop_nulls().unique()) | set(
        edges.get_column("callee").drop_nulls().unique())
    pod_counts = {s: sum(1 for p in pods if system.service_of(p) == s) for s in services}
    answerable_pods = {p for p in pods if pod_counts.get(system.service_of(p), 0) > 1}
    nodes = set(placement.get_column("node").drop_nulls().unique()) | set(
        counts.get_column("node").drop_nulls().unique()) | set(edges.get_column("callee_node").drop_nulls().unique())
    return sorted(services | answerable_pods | nodes)


def _known_pods(series: pl.DataFrame, counts: pl.DataFrame, edges: pl.DataFrame, placement: pl.DataFrame) -> set[str]:
    """Pods seen in the data of the window (candidates are derived from data, not a list)."""
    pods = set(series.filter(pl.col("kind").is_in(["apm_pod", "infra_pod"])).get_column("component").unique())
    pods |= set(counts.get_column("pod").drop_nulls().unique())
    # Both ends of a call: an entry service (or any pure caller) is seen only as a caller, and
    # where no metric or log names its pods, its pod-level evidence (a fan-out) needs them.
    pods |= set(edges.get_column("callee_pod").drop_nulls().unique())
    pods |= set(edges.get_column("caller_pod").drop_nulls().unique())
    pods |= set(placement.get_column("pod").unique())
    return pods
