"""Window query: the evidence index -> ranked candidates with evidence for one incident window.

``query_window`` loads, for every registered detector (``preprocess.detect.DETECTORS``),
the feature tables covering [start - baseline, end] (one or two CST day partitions), runs
its ``score`` against the neighbouring baseline, and ranks candidates (``index.rank``).
Every knob comes in one ``IndexParams``.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from index import store
from index.models import WindowQueryResult
from index.params import IndexParams
from index.rank import rank_candidates
from index.status import window_status
from preprocess.detect import make_detectors
from preprocess.detect_metric import PLACEMENT_SCHEMA, SERIES_SCHEMA
from preprocess.detect_trace import call_graph
from rca.taxonomy import service_of
from rca.timeutil import as_utc

log = logging.getLogger(__name__)


def query_window(
    index_dir: Path,
    *,
    start: datetime,
    end: datetime,
    top_k: int = 10,
    params: IndexParams = IndexParams(),
) -> WindowQueryResult:
    """Ranked candidates for the incident window [start, end] (UTC).

    ``params.baseline_minutes`` of data before ``start`` are the fault-free reference; a window
    shorter than ``params.brief_window_minutes`` is scored over that many minutes from its start
    (a pod kill's evidence comes just after its one second). Each
    candidate carries up to ``params.max_evidence`` lines, one of each kind of signal first.
    What the index lacks for the window is in ``data_status`` (index/status.py); a window with
    no data at all gives no candidates.
    """
    start, end = as_utc(start), as_utc(end)
    if end < start:
        raise ValueError(f"window end {end.isoformat()} precedes start {start.isoformat()}")
    index_dir = Path(index_dir)
    manifest = store.load_manifest(index_dir)  # fails clearly on a foreign schema version
    baseline_start = start.replace(second=0, microsecond=0) - timedelta(minutes=params.baseline_minutes)
    # A brief fault is scored over the minutes after it too (params.brief_window_minutes).
    scored_end = max(end, start + timedelta(minutes=params.brief_window_minutes))
    window = {"start": start, "end": scored_end, "baseline_start": baseline_start}

    detectors = make_detectors(params.detector_params())
    features: dict[str, pl.DataFrame] = {}
    missing: dict[str, list[str]] = {}  # detector (modality) -> its absent partitions
    events: dict[str, pl.DataFrame] = {}
    for name, detector in detectors.items():
        for table in detector.feature_tables:
            features[table.name], absent = store.load_feature(index_dir, table, **window)
            missing.setdefault(name, []).extend(absent)
        events.update(detector.score(features, **window))

    series, counts, edges = features["metric_series"], features["log_counts"], features["trace_edges"]
    placement = features["metric_placement"]
    candidates = rank_candidates(
        events=events, graph=call_graph(edges), placement=placement,
        known_pods=_known_pods(series, counts, edges, placement), top_k=top_k, max_evidence=params.max_evidence,
        window_start=start, weights=params.rank,
    )
    data_status = window_status(manifest=manifest, start=start, end=end, frames={
        "metric": (series, missing.get("metric", [])), "log": (counts, missing.get("log", [])),
        "trace": (edges, missing.get("trace", []))})
    log.info("window %s..%s: %s -> %d candidates", start.isoformat(), end.isoformat(),
             ", ".join(f"{frame.height} {kind}" for kind, frame in events.items()), len(candidates))
    return WindowQueryResult(start=start, end=end, candidates=candidates, data_status=data_status,
                             parameters=params.as_dict())


def known_components(index_dir: Path, *, start: datetime, end: datetime) -> list[str]:
    """Every answerable component seen in the data around a window: services, pods, worker nodes.

    This is the candidate universe a ranking is drawn from (and the denominator of a
    chance baseline); single-pod components are named by their service.
    """
    start, end = as_utc(start), as_utc(end)
    series, _ = store.load_table(Path(index_dir), table="metric_series", start=start, end=end, schema=SERIES_SCHEMA)
    placement = store.load_intervals(Path(index_dir), table="metric_placement", start=start, end=end,
                                     schema=PLACEMENT_SCHEMA)
    pods = set(series.filter(pl.col("kind").is_in(["apm_pod", "infra_pod"])).get_column("component").unique())
    services = {service_of(p) for p in pods} | set(
        series.filter(pl.col("kind").is_in(["apm_service", "infra_tidb", "infra_tikv", "infra_pd"]))
        .get_column("component").unique())
    pod_counts = {s: sum(1 for p in pods if service_of(p) == s) for s in services}
    answerable_pods = {p for p in pods if pod_counts.get(service_of(p), 0) > 1}
    nodes = set(placement.get_column("node").drop_nulls().unique())
    return sorted(services | answerable_pods | nodes)


def _known_pods(series: pl.DataFrame, counts: pl.DataFrame, edges: pl.DataFrame, placement: pl.DataFrame) -> set[str]:
    """Pods seen in the data of the window (candidates are derived from data, not a list)."""
    pods = set(series.filter(pl.col("kind").is_in(["apm_pod", "infra_pod"])).get_column("component").unique())
    pods |= set(counts.get_column("pod").drop_nulls().unique())
    pods |= set(edges.get_column("callee_pod").drop_nulls().unique())
    pods |= set(placement.get_column("pod").unique())
    return pods
