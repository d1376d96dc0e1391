"""What the case page shows, read from a run record and the evidence index's scoring of its window.

The run record says what was decided and on which candidates; the index's one scoring of the
window (``index.query.ScoredWindow``: the configured ``IndexParams``, other incidents left out
of the baseline) gives the series, call edges and log counts to draw and the events that mark
them, so the page moves with the ranking when a setting changes. A modality without rows is
reported as missing (the page says so), never invented.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import numpy as np
import polars as pl

from diagnose.record import RunRecord
from diagnose.report.plots import GraphEdge, GraphNode, SeriesPanel, TemplateCounts
from diagnose.report.units import display_unit, kpi_unit
from index.models import Candidate, EvidenceItem
from index.query import ScoredWindow
from preprocess.baseline import window_first_minute
from preprocess.detect_log import template_keyword
from preprocess.detect_metric import robust_location_scale
from preprocess.detect_trace import TraceParams
from rca.system import SystemSpec
from rca.timeutil import as_utc, parse_utc

log = logging.getLogger(__name__)

BAND_SIGMAS = 3.0  # the baseline band drawn around the median: ± this many robust σ


class WindowScorer(Protocol):
    """The evidence index's one scoring of a window (``diagnose.sources.IndexEvidence``)."""

    def score(self, *, start: datetime, end: datetime) -> ScoredWindow: ...


@dataclass(frozen=True)
class LogBurst:
    """One bursting, new or silenced log template on one pod."""

    pod: str
    template: str
    direction: str  # new | up | silent
    window_count: int
    baseline_count: int
    example: str
    counts: TemplateCounts


@dataclass
class CaseEvidence:
    """Everything the page draws besides the record's own fields."""

    window: tuple[datetime, datetime]
    baseline_start: datetime
    series: dict[str, list[SeriesPanel]] = field(default_factory=dict)  # candidate -> panels
    graph_nodes: list[GraphNode] = field(default_factory=list)
    graph_edges: list[GraphEdge] = field(default_factory=list)
    degraded_edges: list[GraphEdge] = field(default_factory=list)  # slowed or failing by the trace detector's thresholds
    logs: list[LogBurst] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # what the index lacks for this window, at render time


def record_candidates(record: RunRecord) -> list[Candidate]:
    return list(record.candidates)


def chosen_component(record: RunRecord) -> str | None:
    if record.answer is not None:
        return record.answer.component
    return record.index_top


def load_case_evidence(
    record: RunRecord,
    *,
    scorer: WindowScorer,
    runner_ups: int = 3,
    series_per_component: int = 3,
    series_per_runner_up: int = 2,
    max_templates: int = 5,
    system: SystemSpec,
) -> CaseEvidence:
    """Series of the chosen component and ``runner_ups`` others, the window's call graph and log bursts.

    ``system`` names pods' services and nodes.
    """
    scored = scorer.score(start=parse_utc(record.window["start"]), end=parse_utc(record.window["end"]))
    start, end, baseline_start = scored.start, scored.end, scored.baseline_start
    series, counts, edges = scored.core["metric"], scored.core["log"], scored.core["trace"]
    evidence = CaseEvidence(window=(start, end), baseline_start=baseline_start,
                            missing=[m for absent in scored.missing.values() for m in absent])
    for modality, frame in (("metric", series), ("log", counts), ("trace", edges)):
        if frame.height == 0:
            evidence.missing.append(f"{modality}: no rows for {baseline_start:%H:%M}..{end:%H:%M} UTC")

    candidates = record_candidates(record)
    chosen = chosen_component(record)
    shown = ([c for c in candidates if c.component == chosen] + [c for c in candidates if c.component != chosen])
    shown = shown[: 1 + runner_ups]
    if series.height:
        for candidate in shown:
            evidence.series[candidate.component] = _series_panels(
                candidate, series=series, events=scored.events["metric"], start=start,
                limit=series_per_component if candidate.component == chosen else series_per_runner_up, system=system)
    evidence.graph_nodes, evidence.graph_edges, evidence.degraded_edges = _call_graph(
        edges, start=start, baseline_start=baseline_start, chosen=chosen, candidates=candidates,
        placement=scored.features.get("metric_placement") if chosen and system.is_node(chosen) else None,
        thresholds=scored.params.trace, system=system)
    if counts.height:
        evidence.logs = _log_bursts(counts, scored.events["log"], end=end, baseline_start=baseline_start,
                                    components=[c.component for c in shown], limit=max_templates, system=system)
    return evidence


# --------------------------------------------------------------------------- metric series

def _series_panels(candidate: Candidate, *, series: pl.DataFrame, events: pl.DataFrame, start: datetime,
                   limit: int, system: SystemSpec) -> list[SeriesPanel]:
    """The candidate's most anomalous series: its metric evidence first, then the detector's strongest."""
    wanted: list[tuple[str, str, EvidenceItem | None]] = [
        (item.component, item.key, item) for item in candidate.evidence if item.modality == "metric"]
    family = events.filter((pl.col("component") == candidate.component)
                           | (pl.col("component").map_elements(system.service_of, return_dtype=pl.Utf8)
                              == candidate.component))
    for component, kpi in family.select("component", "kpi").iter_rows():
        wanted.append((component, kpi, None))
    panels: list[SeriesPanel] = []
    seen: set[tuple[str, str]] = set()
    for component, kpi, item in wanted:
        if (component, kpi) in seen or len(panels) >= limit:
            continue
        seen.add((component, kpi))
        rows = (series.filter((pl.col("component") == component) & (pl.col("kpi") == kpi))
                .group_by("time").agg(pl.col("value").max()).sort("time"))
        if rows.height == 0:
            continue
        times = [as_utc(t) for t in rows.get_column("time").to_list()]
        values = rows.get_column("value").to_numpy()
        base = values[np.array([t < start for t in times])]
        band = median = None
        if base.size:
            median, scale = robust_location_scale(base, ordered=True)
            band = (median - BAND_SIGMAS * scale, median + BAND_SIGMAS * scale)
        note = _short_note(item.text[len(kpi):] if item.text.startswith(kpi) else item.text) if item else ""
        unit, factor = display_unit(kpi_unit(kpi))
        panels.append(SeriesPanel(component=component, kpi=kpi, unit=unit, times=times,
                                  values=(values * factor).tolist(),
                                  band=(band[0] * factor, band[1] * factor) if band else None,
                                  baseline_median=median * factor if median is not None else None,
                                  onset=as_utc(item.onset) if item is not None and item.onset else None, note=note))
    return panels


def _short_note(text: str) -> str:
    """``up 44x (z=50.0) on shippingservice from 17:14`` -> ``up 44x (z=50.0)``: the title names the rest."""
    return text.split(" on ")[0].strip()


# --------------------------------------------------------------------------- call graph

def _call_graph(
    edges: pl.DataFrame, *, start: datetime, baseline_start: datetime, chosen: str | None,
    candidates: Sequence[Candidate], placement: pl.DataFrame | None, thresholds: TraceParams, system: SystemSpec,
) -> tuple[list[GraphNode], list[GraphEdge], list[GraphEdge]]:
    """Service-level edges of the window against the baseline, each service's role on the page, and the degraded edges.

    An edge is drawn degraded by the trace detector's own thresholds (``thresholds``)."""
    if edges.height == 0:
        return [], [], []
    window_start = window_first_minute(start)
    in_window = pl.col("time") >= window_start
    weighted_p95 = ((pl.col("p95_us") * pl.col("count")).sum() / pl.col("count").sum())  # call-weighted minutes
    per_edge = edges.filter(pl.col("time") >= baseline_start).group_by("caller", "callee").agg(
        pl.col("count").filter(in_window).sum().alias("calls"),
        pl.col("errors").filter(in_window).sum().alias("errors"),
        pl.col("count").filter(~in_window).sum().alias("base_calls"),
        pl.col("errors").filter(~in_window).sum().alias("base_errors"),
    )
    base_p95 = edges.filter(pl.col("time") < window_start).group_by("caller", "callee").agg(weighted_p95.alias("base_p95"))
    window_p95 = edges.filter(in_window).group_by("caller", "callee").agg(weighted_p95.alias("p95"))
    per_edge = (per_edge.join(window_p95, on=["caller", "callee"], how="left")
                .join(base_p95, on=["caller", "callee"], how="left").sort("caller", "callee"))
    graph_edges: list[GraphEdge] = []
    for row in per_edge.iter_rows(named=True):
        ratio = row["p95"] / row["base_p95"] if row["p95"] and row["base_p95"] else None
        graph_edges.append(GraphEdge(
            caller=row["caller"], callee=row["callee"], calls=int(row["calls"]), latency_ratio=ratio,
            error_rate=row["errors"] / row["calls"] if row["calls"] else 0.0,
            baseline_error_rate=row["base_errors"] / row["base_calls"] if row["base_calls"] else 0.0,
            vanished=row["base_calls"] > 0 and row["calls"] == 0))

    service_of = system.service_of
    root = service_of(chosen) if chosen else None
    names = sorted({e.caller for e in graph_edges} | {e.callee for e in graph_edges})
    degraded = [e for e in graph_edges if e.vanished or (e.latency_ratio or 0) >= thresholds.min_latency_ratio
                or e.error_rate - e.baseline_error_rate >= thresholds.min_error_rate_increase]
    # Victims feel the fault: they call (directly or not) into a degraded edge, or their own edge degraded
    # while they are not the chosen component.
    victims = {e.caller for e in degraded} | {e.callee for e in degraded}
    candidate_services = {service_of(c.component) for c in candidates}
    nodes: list[GraphNode] = []
    for name in names:
        if name == root:
            role, detail = "root", (chosen if chosen and chosen != root else "")
        elif name in victims:
            role, detail = "victim", ""
        elif name in candidate_services:
            role, detail = "candidate", ""
        else:
            role, detail = "normal", ""
        nodes.append(GraphNode(name=name, role=role, detail=detail))  # type: ignore[arg-type]
    if chosen and system.is_node(chosen):
        hosted = sorted({service_of(p) for p in placement.get_column("pod").to_list()}) if placement is not None else []
        nodes.append(GraphNode(name=chosen, role="root", detail="node"))
        # A node is not on the call path: draw it hosting the services with pods on it.
        graph_edges += [GraphEdge(caller=chosen, callee=s, calls=0) for s in hosted if s in names]
    return nodes, graph_edges, degraded


def _log_bursts(
    counts: pl.DataFrame, events: pl.DataFrame, *, end: datetime, baseline_start: datetime,
    components: Sequence[str], limit: int, system: SystemSpec,
) -> list[LogBurst]:
    """Bursting / new templates of the index's log events, those of the shown candidates first, with per-minute counts."""
    events = events.filter(pl.col("template_id") >= 0)  # a silent stream has no template to draw
    if events.height == 0:
        return []
    service_of = system.service_of
    families = {service_of(c) for c in components} | set(components)
    events = events.with_columns(
        pl.col("component").map_elements(lambda p: p in families or service_of(p) in families,
                                         return_dtype=pl.Boolean).alias("shown"),
    ).sort(["shown", "z"], descending=[True, True]).head(limit)
    minutes = pl.datetime_range(baseline_start.replace(second=0, microsecond=0), end, interval="1m",
                                time_zone="UTC", eager=True).dt.cast_time_unit("us").alias("time")
    bursts: list[LogBurst] = []
    for row in events.iter_rows(named=True):
        per_minute = (counts.filter((pl.col("pod") == row["component"]) & (pl.col("template_id") == row["template_id"]))
                      .group_by("time").agg(pl.col("count").sum()))
        filled = pl.DataFrame({"time": minutes}).join(per_minute, on="time", how="left").fill_null(0).sort("time")
        template = row["template"] or ""
        direction = row["direction"]
        label = f"{row['component']} · {'burst' if direction == 'up' else direction} · {template_keyword(template)}"
        bursts.append(LogBurst(
            pod=row["component"], template=template, direction=direction, window_count=int(row["window_count"] or 0),
            baseline_count=int(row["baseline_count"] or 0), example=row["example"] or "",
            counts=TemplateCounts(label=label, times=[as_utc(t) for t in filled.get_column("time").to_list()],
                                  counts=filled.get_column("count").to_list())))
    return bursts
