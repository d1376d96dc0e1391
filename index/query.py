"""Window query: the evidence index -> ranked candidates with evidence for one incident window.

``query_window`` loads the compact per-minute features covering [start - baseline, end]
(one or two CST day partitions), runs the three window scorers of ``preprocess`` against
the neighbouring baseline, and ranks candidates (``index.rank``).
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from index import store
from index.models import WindowQueryResult
from index.rank import rank_candidates
from index.status import window_status
from preprocess.detect_log import LOG_COUNT_SCHEMA, score_log_window
from preprocess.detect_metric import PLACEMENT_SCHEMA, SERIES_SCHEMA, score_metric_window
from preprocess.detect_trace import EDGE_STATS_SCHEMA, call_graph, caller_fanout, propagation_scores, score_trace_window
from rca.taxonomy import service_of
from rca.timeutil import as_utc

log = logging.getLogger(__name__)


def query_window(
    index_dir: Path,
    *,
    start: datetime,
    end: datetime,
    top_k: int = 10,
    baseline_minutes: int = 30,
    max_evidence: int = 12,
) -> WindowQueryResult:
    """Ranked candidates for the incident window [start, end] (UTC).

    ``baseline_minutes`` of data before ``start`` are the fault-free reference. Each
    candidate carries up to ``max_evidence`` lines, one of each kind of signal first. What the
    index lacks for the window is in ``data_status`` (index/status.py); a window with no data
    at all gives no candidates.
    """
    start, end = as_utc(start), as_utc(end)
    if end < start:
        raise ValueError(f"window end {end.isoformat()} precedes start {start.isoformat()}")
    index_dir = Path(index_dir)
    manifest = store.load_manifest(index_dir)  # fails clearly on a foreign schema version
    baseline_start = start.replace(second=0, microsecond=0) - timedelta(minutes=baseline_minutes)

    series, missing_metric = store.load_table(index_dir, table="metric_series", start=baseline_start, end=end,
                                              schema=SERIES_SCHEMA)
    counts, missing_log = store.load_table(index_dir, table="log_counts", start=baseline_start, end=end,
                                           schema=LOG_COUNT_SCHEMA)
    edges, missing_trace = store.load_table(index_dir, table="trace_edges", start=baseline_start, end=end,
                                            schema=EDGE_STATS_SCHEMA)
    placement = _placement(index_dir, start=start, end=end)

    metric_events = score_metric_window(series, start=start, end=end, baseline_start=baseline_start)
    log_events = score_log_window(counts, store.load_templates(index_dir), start=start, end=end,
                                  baseline_start=baseline_start)
    trace_events = score_trace_window(edges, start=start, end=end, baseline_start=baseline_start)
    fanout_events = caller_fanout(edges, start=start, end=end, baseline_start=baseline_start)
    graph = call_graph(edges)
    known_pods = _known_pods(series, counts, edges, placement)

    candidates = rank_candidates(
        metric_events=metric_events, log_events=log_events, trace_events=trace_events, fanout_events=fanout_events,
        propagation=propagation_scores(trace_events), graph=graph, placement=placement,
        known_pods=known_pods, top_k=top_k, max_evidence=max_evidence, window_start=start,
    )
    data_status = window_status(manifest=manifest, start=start, end=end, frames={
        "metric": (series, missing_metric), "log": (counts, missing_log), "trace": (edges, missing_trace)})
    log.info("window %s..%s: %d metric, %d log, %d trace events -> %d candidates",
             start.isoformat(), end.isoformat(), metric_events.height, log_events.height, trace_events.height,
             len(candidates))
    return WindowQueryResult(start=start, end=end, candidates=candidates, data_status=data_status)


def known_components(index_dir: Path, *, start: datetime, end: datetime) -> list[str]:
    """Every answerable component seen in the data around a window: services, pods, worker nodes.

    This is the candidate universe a ranking is drawn from (and the denominator of a
    chance baseline); single-pod components are named by their service.
    """
    start, end = as_utc(start), as_utc(end)
    series, _ = store.load_table(Path(index_dir), table="metric_series", start=start, end=end, schema=SERIES_SCHEMA)
    placement = _placement(Path(index_dir), start=start, end=end)
    pods = set(series.filter(pl.col("kind").is_in(["apm_pod", "infra_pod"])).get_column("component").unique())
    services = {service_of(p) for p in pods} | set(
        series.filter(pl.col("kind").is_in(["apm_service", "infra_tidb", "infra_tikv", "infra_pd"]))
        .get_column("component").unique())
    pod_counts = {s: sum(1 for p in pods if service_of(p) == s) for s in services}
    answerable_pods = {p for p in pods if pod_counts.get(service_of(p), 0) > 1}
    nodes = set(placement.get_column("node").drop_nulls().unique())
    return sorted(services | answerable_pods | nodes)


def _placement(index_dir: Path, *, start: datetime, end: datetime) -> pl.DataFrame:
    frames = []
    for day in store.days_for_window(start, end):
        frame = store.load_day_table(index_dir, day=day, table="metric_placement", schema=PLACEMENT_SCHEMA)
        if frame is not None:
            frames.append(frame.filter((pl.col("last") >= start) & (pl.col("first") <= end)))
    return pl.concat(frames) if frames else pl.DataFrame(schema=PLACEMENT_SCHEMA)


def _known_pods(series: pl.DataFrame, counts: pl.DataFrame, edges: pl.DataFrame, placement: pl.DataFrame) -> set[str]:
    """Pods seen in the data of the window (candidates are derived from data, not a list)."""
    pods = set(series.filter(pl.col("kind").is_in(["apm_pod", "infra_pod"])).get_column("component").unique())
    pods |= set(counts.get_column("pod").drop_nulls().unique())
    pods |= set(edges.get_column("callee_pod").drop_nulls().unique())
    pods |= set(placement.get_column("pod").unique())
    return pods
