"""Observation tools of a session: issue 14's ``diagnose.tools`` Toolbox, plus ``get_sop``.

``diagnose.tools.case_toolbox`` gives ``get_metrics``, ``get_logs``, ``get_traces`` (raw
telemetry of the window, summarised and bounded), ``get_candidates`` (the evidence index)
and ``search_sops`` (the knowledge base). This module adds ``get_sop``: one section of a
fault's SOP, e.g. its Mitigation, which retrieval does not index. Same contract
(``names``, ``describe()``, ``call(name, args) -> str``); outputs are bounded.
"""
from __future__ import annotations

from functools import cached_property
from typing import Any

from diagnose.cases import Case
from diagnose.service import Diagnoser
from diagnose.tools import Toolbox, case_toolbox
from knowledge.documents import SopDocument, docs_dir, load_documents
from rca.errors import InputError
from rca.settings import Settings
from rca.system import system_from_settings
from rca.taxonomy import FAULT_TYPES, canonical_fault_type

DOCS = {
    "get_sop": 'get_sop({"fault_type": "cpu stress", "section": "Mitigation"}) - one section of a fault\'s SOP '
               "(Metrics, Logs, Traces, Look-alikes, Level and reason, Mitigation).",
}


def sop_documents(settings: Settings) -> dict[str, SopDocument]:
    """Fault SOPs by fault type."""
    return {d.meta.fault_type: d for d in load_documents(docs_dir(settings.knowledge)) if d.meta.fault_type}


def sop_section(doc: SopDocument, heading: str) -> str | None:
    return next((s.text for s in doc.sections if s.heading.strip().lower() == heading.strip().lower()), None)


class SopSections:
    """``get_sop``: the SOP documents by fault type, read once."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    def names(self) -> list[str]:
        return list(DOCS)

    def describe(self) -> str:
        return "\n".join(DOCS.values())

    @cached_property
    def sops(self) -> dict[str, SopDocument]:
        return sop_documents(self.settings)

    def call(self, name: str, args: dict[str, Any]) -> str:
        if name != "get_sop":
            return f"unknown tool {name!r}; valid: {', '.join(DOCS)}"
        fault_type = canonical_fault_type(str(args.get("fault_type", "")))
        doc = self.sops.get(fault_type)
        if doc is None:
            return f"unknown fault_type; valid: {', '.join(FAULT_TYPES)}"
        heading = str(args.get("section", "Mitigation"))
        text = sop_section(doc, heading)
        if text is None:
            return f"{doc.meta.id} has no section {heading!r}; sections: {', '.join(s.heading for s in doc.sections)}"
        return f"{doc.meta.title} - {heading}\n{text[:1500]}"


def case_tools(diagnoser: Diagnoser, case: Case) -> Toolbox:
    """Issue 14's observation tools over ``case``'s window (raw telemetry of the diagnoser's data dir)."""
    if diagnoser.telemetry is None:
        raise InputError("the diagnoser was built without raw telemetry; the observation tools need it")
    return case_toolbox(case, telemetry=diagnoser.telemetry, evidence=diagnoser.evidence,
                        knowledge=diagnoser.knowledge,
                        max_chars=diagnoser.settings.diagnose.observation_chars,
                        system=system_from_settings(diagnoser.settings))
