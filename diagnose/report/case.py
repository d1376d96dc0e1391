"""The case page: one self-contained HTML file per diagnosed case, and an index page per batch.

    scorer = report_scorer(settings)                  # the index, scored as the diagnoser scores it
    system = system_from_settings(settings)           # the system under diagnosis names pods and nodes
    html = render_case_page(record, scorer=scorer, system=system)
    write_case_report(record, scorer=scorer, out=Path("reports/<uuid>.html"), system=system)
    write_batch_report(records, scorer=scorer, out_dir=Path("reports"), system=system)

Pages come from the Jinja templates in ``templates/``; figures are inline PNG data URIs and
the CSS is inline, so a page opens offline and can be mailed as one file. A modality with
no data renders as a sentence saying so, never as a missing page.
"""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from diagnose.record import RunRecord
from diagnose.report import plots
from diagnose.report.evidence import (
    CaseEvidence,
    WindowScorer,
    chosen_component,
    load_case_evidence,
    record_candidates,
)
from rca.atomic import write_bytes_atomic
from rca.settings import Settings
from rca.system import SystemSpec, system_from_settings
from rca.timeutil import UTC

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True)
class Figure:
    name: str  # stable id, e.g. "series-cartservice-1-pod_cpu_usage", "call-graph", "logs"
    caption: str
    plot: plots.Plot


def _environment() -> Environment:
    return Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]),
                       undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def case_figures(record: RunRecord, evidence: CaseEvidence) -> dict[str, list[Figure]]:
    """The page's figures by section: ``series`` (per candidate, chosen first), ``graph``, ``logs``."""
    window, baseline_start = evidence.window, evidence.baseline_start
    series: list[Figure] = []
    for component, panels in evidence.series.items():
        for panel in panels:
            series.append(Figure(
                name=f"series-{component}-{panel.component}-{panel.kpi}",
                caption=f"{panel.component} · {panel.kpi} ({panel.unit or 'value'})",
                plot=plots.series_plot(panel=panel, window=window, baseline_start=baseline_start)))
    graph: list[Figure] = []
    if evidence.graph_edges:
        graph.append(Figure(name="call-graph", caption="call graph of the window against its baseline",
                            plot=plots.call_graph_plot(nodes=evidence.graph_nodes, edges=evidence.graph_edges,
                                                       title=f"calls {window[0]:%H:%M}–{window[1]:%H:%M} UTC vs "
                                                             f"{baseline_start:%H:%M}–{window[0]:%H:%M} baseline")))
    logs: list[Figure] = []
    if evidence.logs:
        logs.append(Figure(name="log-templates", caption="bursting and new log templates, lines per minute",
                           plot=plots.log_counts_plot(templates=[b.counts for b in evidence.logs], window=window,
                                                      baseline_start=baseline_start)))
    return {"series": series, "graph": graph, "logs": logs}


def _page_context(record: RunRecord, evidence: CaseEvidence, figures: dict[str, list[Figure]]) -> dict[str, Any]:
    candidates = record_candidates(record)
    chosen = chosen_component(record)
    series_by_candidate: list[dict[str, Any]] = []
    for position, (component, panels) in enumerate(evidence.series.items()):
        names = {f"series-{component}-{p.component}-{p.kpi}" for p in panels}
        series_by_candidate.append({
            "component": component,
            "label": "answer" if component == chosen else f"runner-up {position}",
            "figures": [f for f in figures["series"] if f.name in names],
        })
    degraded = [e for e in evidence.degraded_edges if e.calls]
    vanished = [e for e in evidence.graph_edges if e.vanished]
    missing = list(dict.fromkeys(record.missing + evidence.missing))
    decision = record.decision
    return {
        "record": record,
        "answer": record.answer,
        "fault_type": decision.fault_type if decision else None,
        "model_reason": decision.reason if decision else None,
        "chosen": chosen,
        "candidates": candidates,
        "series_by_candidate": series_by_candidate,
        "graph_figures": figures["graph"],
        "graph_nodes": evidence.graph_nodes,
        "degraded_edges": sorted(degraded, key=lambda e: -(e.latency_ratio or 0)),
        "vanished_edges": vanished,
        "log_figures": figures["logs"],
        "logs": evidence.logs,
        "missing": missing,
        "window": evidence.window,
        "baseline_start": evidence.baseline_start,
        "figure_count": sum(len(v) for v in figures.values()),
    }


def report_scorer(settings: Settings) -> WindowScorer:
    """The configured index with the configured ``[index]`` parameters and the input file's case
    windows excluded: the diagnoser's own scoring. A missing index scores to no rows (the page says so)."""
    from diagnose.sources import IndexEvidence

    return IndexEvidence.from_settings(settings, require=False)


def render_case_page(record: RunRecord, *, scorer: WindowScorer, system: SystemSpec) -> str:
    """The HTML of one case's page (self-contained); ``system`` names pods' services and nodes."""
    evidence = load_case_evidence(record, scorer=scorer, system=system)
    figures = case_figures(record, evidence)
    return _environment().get_template("case.html.j2").render(**_page_context(record, evidence, figures))


def write_case_report(record: RunRecord, *, scorer: WindowScorer, out: Path, system: SystemSpec) -> Path:
    """Render and write one case's page atomically; returns ``out``."""
    html = render_case_page(record, scorer=scorer, system=system)
    write_bytes_atomic(out, html.encode("utf-8"))
    log.info("case report %s -> %s", record.uuid, out)
    return out


def write_batch_report(records: Sequence[RunRecord], *, scorer: WindowScorer, out_dir: Path,
                       system: SystemSpec) -> Path:
    """One page per case plus ``index.html`` linking them; returns the index page's path."""
    out_dir = Path(out_dir)
    rows: list[dict[str, Any]] = []
    for number, record in enumerate(records, start=1):
        page = write_case_report(record, scorer=scorer, out=out_dir / f"{record.uuid}.html", system=system)
        log.info("report %d/%d: %s", number, len(records), page.name)
        rows.append({"record": record, "page": page.name, "chosen": chosen_component(record),
                     "fault_type": record.decision.fault_type if record.decision else None})
    by_type = Counter(row["fault_type"] or "(failed)" for row in rows)
    agreement = Counter("agreed" if r.agreed_with_index else "disagreed" if r.agreed_with_index is False else "failed"
                        for r in records)
    summary: list[Figure] = []
    if rows:
        types = sorted(by_type, key=lambda t: (-by_type[t], t))
        summary.append(Figure(name="fault-types", caption="answers by fault type", plot=plots.bar_plot(
            categories=types, series={"cases": [by_type[t] for t in types]}, title="answers by fault type",
            value_label="cases", horizontal=True, value_format="{:.0f}")))
        kinds = [k for k in ("agreed", "disagreed", "failed") if agreement[k]]
        summary.append(Figure(name="agreement", caption="model vs index top candidate", plot=plots.bar_plot(
            categories=kinds, series={"cases": [agreement[k] for k in kinds]},
            title="model's answer vs the index's top candidate", value_label="cases", value_format="{:.0f}",
            height=2.4)))
    html = _environment().get_template("index.html.j2").render(rows=rows, figures=summary,
                                                                generated=f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    index = out_dir / "index.html"
    write_bytes_atomic(index, html.encode("utf-8"))
    return index


def write_reports_for_cases(uuids: Sequence[str], *, runs_dir: Path, settings: Settings, out_dir: Path) -> Path:
    """Pages for the run records ``<runs_dir>/<uuid>.json`` of ``uuids`` (those that exist) and their index page."""
    records: list[RunRecord] = []
    for uuid in uuids:
        path = Path(runs_dir) / f"{uuid}.json"
        if path.is_file():
            records.append(RunRecord.load(path))
        else:
            log.warning("%s: no run record, no page for %s", path, uuid)
    return write_batch_report(records, scorer=report_scorer(settings), out_dir=out_dir,
                              system=system_from_settings(settings))
