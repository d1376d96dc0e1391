"""Retrieval quality: does an evidence summary retrieve the document of its fault type?

Queries are realistic evidence summaries labelled with the fault type they describe
(written for evaluation, never copied from the documents). Used by the test suite and
by ``scripts/eval_kb_retrieval.py``.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from knowledge.base import KnowledgeBase
from rca.taxonomy import FAULT_TYPES


@dataclass(frozen=True)
class QueryOutcome:
    fault_type: str
    query: str
    retrieved: list[str]  # fault types (or guide ids) in rank order

    @property
    def rank(self) -> int | None:
        return self.retrieved.index(self.fault_type) + 1 if self.fault_type in self.retrieved else None


@dataclass
class RetrievalEval:
    k: int
    outcomes: list[QueryOutcome] = field(default_factory=list)

    @property
    def top1(self) -> float:
        return sum(o.rank == 1 for o in self.outcomes) / len(self.outcomes)

    @property
    def top_k(self) -> float:
        return sum(o.rank is not None for o in self.outcomes) / len(self.outcomes)

    def misses(self) -> list[QueryOutcome]:
        return [o for o in self.outcomes if o.rank is None]


def load_queries(path: Path) -> dict[str, list[str]]:
    """``{fault_type: [summary, ...]}`` from a JSON file; fault types must be known."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read queries: {exc}") from exc
    unknown = [name for name in raw if name not in FAULT_TYPES]
    if unknown:
        raise ValueError(f"{path}: unknown fault types {unknown}")
    return {name: list(queries) for name, queries in raw.items()}


def evaluate_retrieval(kb: KnowledgeBase, queries: Mapping[str, Sequence[str]], *, k: int = 3) -> RetrievalEval:
    """Run every query through ``kb.retrieve`` and record where the right fault type ranked."""
    result = RetrievalEval(k=k)
    for fault_type, summaries in queries.items():
        for summary in summaries:
            hits = kb.retrieve(summary, k=k)
            result.outcomes.append(QueryOutcome(fault_type=fault_type, query=summary,
                                                retrieved=[h.fault_type or h.id for h in hits]))
    return result
