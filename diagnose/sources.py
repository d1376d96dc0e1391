"""Production sources for the diagnoser: the evidence index and the Chroma knowledge base."""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path

from diagnose.prompt import CatalogueLine, SopExcerpt
from index.models import EvidenceItem, WindowQueryResult
from index.query import query_window
from knowledge.retrieval import fault_catalogue, fault_signatures, retrieve
from knowledge.signatures import SignatureMatch, rank_signatures
from rca.errors import IndexMissing
from rca.settings import Settings


class IndexEvidence:
    """Candidates for a window from the on-disk evidence index."""

    def __init__(self, index_dir: Path, *, baseline_minutes: int) -> None:
        if not index_dir.is_dir():
            raise IndexMissing(f"evidence index {index_dir} does not exist: run `rca preprocess` first")
        self.index_dir = index_dir
        self.baseline_minutes = baseline_minutes

    def query(self, *, start: datetime, end: datetime, top_k: int) -> WindowQueryResult:
        return query_window(self.index_dir, start=start, end=end, top_k=top_k, baseline_minutes=self.baseline_minutes)


def _section(body: str, title: str) -> str:
    """The markdown section called ``title`` (without its heading), or the body's start."""
    for chunk in body.split("\n## ")[1:]:
        heading, _, text = chunk.partition("\n")
        if heading.strip().lower() == title.strip().lower():
            return " ".join(text.split())
    return " ".join(body.split())


class KnowledgeBase:
    """SOP catalogue (static prompt part) and retrieval (per case) from the knowledge package."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def _entries(self):
        return fault_catalogue(self.settings)

    @cached_property
    def _signatures(self):
        return fault_signatures(self.settings)

    def catalogue(self) -> list[CatalogueLine]:
        return [
            CatalogueLine(fault_type=e.fault_type, levels="/".join(e.levels), key_metrics=", ".join(e.key_metrics), signature=e.reason_template)
            for e in self._entries
        ]

    def key_metrics(self, fault_type: str) -> list[str]:
        return next((list(e.key_metrics) for e in self._entries if e.fault_type == fault_type), [])

    def retrieve(self, summary: str, *, hints: Sequence[str], k: int) -> list[SopExcerpt]:
        docs = retrieve(self.settings, summary, hints=hints, k=k)
        return [SopExcerpt(doc_id=d.id, title=d.title, score=d.score, text=_section(d.text, d.best_section), fault_type=d.fault_type) for d in docs]

    def signature_matches(self, evidence: Sequence[EvidenceItem], *, fault_types: Sequence[str]) -> list[SignatureMatch]:
        return rank_signatures(self._signatures, evidence, fault_types=fault_types)
