"""Observation tools over the product's own sources for one case window.

Interim set until ``diagnose.tools.Toolbox`` (the raw-telemetry tools ``get_metrics``,
``get_logs``, ``get_traces``) lands on main: ``get_candidates`` (the evidence index, with
each candidate's best SOP signal fits), ``search_sops`` (the knowledge base) and
``get_sop`` (one SOP section, e.g. its Mitigation). Same contract as the Toolbox
(``names``, ``describe()``, ``call(name, args) -> str``); outputs are bounded.
"""
from __future__ import annotations

from functools import cached_property
from typing import Any

from diagnose.cases import Case
from diagnose.pipeline import PreparedCase
from diagnose.service import Diagnoser
from knowledge.documents import SopDocument, docs_dir, load_documents
from rca.settings import Settings
from rca.taxonomy import FAULT_TYPES, canonical_fault_type

DOCS = {
    "get_candidates": 'get_candidates({"top": 5}) - components of the window ranked by the evidence index '
                      "(metric, log and trace anomalies against the time before), each with its strongest evidence "
                      "lines and the fault types whose SOP signals its evidence fits best.",
    "search_sops": 'search_sops({"query": "connection refused on cartservice", "k": 3}) - SOP documents of the '
                   "knowledge base closest to the text: id, fault type, score and the best-matching section.",
    "get_sop": 'get_sop({"fault_type": "cpu stress", "section": "Mitigation"}) - one section of a fault\'s SOP '
               "(Metrics, Logs, Traces, Look-alikes, Level and reason, Mitigation).",
}


def sop_documents(settings: Settings) -> dict[str, SopDocument]:
    """Fault SOPs by fault type."""
    return {d.meta.fault_type: d for d in load_documents(docs_dir(settings)) if d.meta.fault_type}


def sop_section(doc: SopDocument, heading: str) -> str | None:
    return next((s.text for s in doc.sections if s.heading.strip().lower() == heading.strip().lower()), None)


class CaseTools:
    """The observation tools of one case, computed lazily from ``Diagnoser.prepare``."""

    def __init__(self, *, diagnoser: Diagnoser, case: Case, prepared: PreparedCase | None = None) -> None:
        self.diagnoser = diagnoser
        self.case = case
        self._prepared = prepared

    @property
    def names(self) -> list[str]:
        return list(DOCS)

    def describe(self) -> str:
        return "\n".join(DOCS.values())

    @cached_property
    def prepared(self) -> PreparedCase | None:
        if self._prepared is not None:
            return self._prepared
        try:
            return self.diagnoser.prepare(self.case)
        except LookupError:
            return None

    @cached_property
    def sops(self) -> dict[str, SopDocument]:
        return sop_documents(self.diagnoser.settings)

    def call(self, name: str, args: dict[str, Any]) -> str:
        if name == "get_candidates":
            top = args.get("top", 5)
            if not isinstance(top, int) or isinstance(top, bool) or not 1 <= top <= 10:
                return "get_candidates: top must be an integer from 1 to 10"
            return self._candidates(top)
        if name == "search_sops":
            query, k = args.get("query"), args.get("k", 3)
            if not isinstance(query, str) or not query.strip():
                return 'search_sops needs "query": a non-empty string'
            if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 5:
                return "search_sops: k must be an integer from 1 to 5"
            found = self.diagnoser.knowledge.retrieve(query[:500], hints=[], k=k)
            return "\n".join(f"- {s.doc_id} ({s.fault_type or 'guide'}, score {s.score:.2f}): {s.text[:300]}"
                             for s in found) or "no SOP matched"
        if name == "get_sop":
            fault_type = canonical_fault_type(str(args.get("fault_type", "")))
            doc = self.sops.get(fault_type)
            if doc is None:
                return f"unknown fault_type; valid: {', '.join(FAULT_TYPES)}"
            heading = str(args.get("section", "Mitigation"))
            text = sop_section(doc, heading)
            if text is None:
                return f"{doc.meta.id} has no section {heading!r}; sections: {', '.join(s.heading for s in doc.sections)}"
            return f"{doc.meta.title} - {heading}\n{text[:1500]}"
        return f"unknown tool {name!r}; valid: {', '.join(DOCS)}"

    def _candidates(self, top: int) -> str:
        prepared = self.prepared
        if prepared is None or not prepared.candidates:
            return "the index holds no anomalous component for this window"
        lines = []
        for c in prepared.candidates[:top]:
            fits = prepared.signature_matches.get(c.component, [])
            fit = "; ".join(m.render() for m in fits[:2])
            lines.append(f"{c.component} ({c.level}, score {c.score:.2f})" + (f" - SOP fit: {fit}" if fit else ""))
            lines += [f"    {e.text}" for e in c.evidence[:4]]
        return "\n".join(lines)
