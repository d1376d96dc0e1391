"""Retrieval quality on the shipped documents: realistic summaries find their fault type."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from knowledge.base import KnowledgeBase
from knowledge.evaluation import evaluate_retrieval, load_queries
from rca.settings import PathSettings, Settings
from rca.taxonomy import FAULT_TYPES

QUERIES = Path(__file__).parent / "test_kb_queries.json"
# Written after tuning the document scoring on QUERIES, to check it did not overfit.
HELD_OUT = Path(__file__).parent / "test_kb_queries_heldout.json"
log = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def kb_shipped(tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    return KnowledgeBase.from_settings(Settings(paths=PathSettings(kb_dir=tmp_path_factory.mktemp("kb-shipped"))))


def test_query_set_covers_every_fault_type() -> None:
    queries = load_queries(QUERIES)
    held_out = load_queries(HELD_OUT)
    assert set(queries) == set(FAULT_TYPES) == set(held_out)
    assert all(len(queries[name]) >= 3 for name in FAULT_TYPES)


@pytest.mark.parametrize("query_file", [QUERIES, HELD_OUT], ids=["tuning", "held-out"])
def test_right_document_in_top3(kb_shipped: KnowledgeBase, query_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = evaluate_retrieval(kb_shipped, load_queries(query_file), k=3)
    with capsys.disabled():
        print(f"\nKB retrieval ({query_file.name}): {len(result.outcomes)} queries, "
              f"top1={result.top1:.3f}, top3={result.top_k:.3f}")
    for miss in result.misses():
        log.warning("retrieval miss for %s: %r -> %s", miss.fault_type, miss.query, miss.retrieved)
    assert result.top_k >= 0.95
    assert result.top1 >= 0.7


@pytest.mark.parametrize(("summary", "guide"), [
    ("adservice throws java.lang.Error Injected error every hour and frontend warns ads retrieval failed; is it a fault?",
     "guide-background-noise"),
    ("should I answer the node, the pod or the whole service when pods of several services on one host degrade?",
     "guide-locating-level"),
])
def test_guides_are_retrievable(kb_shipped: KnowledgeBase, summary: str, guide: str) -> None:
    assert guide in [hit.id for hit in kb_shipped.retrieve(summary, k=3)]


def test_hints_steer_retrieval(kb_shipped: KnowledgeBase) -> None:
    summary = "latency of frontend calls up, some errors"
    hinted = kb_shipped.retrieve(summary, hints=["adservice", "GCHelper", "adservice--gc"], k=1)
    assert hinted[0].fault_type == "jvm gc"


def test_distinctions_say_how_each_open_type_differs_from_the_others(kb_shipped: KnowledgeBase) -> None:
    lines = kb_shipped.distinctions(["pod failure", "pod kill"])
    assert lines == [
        "pod kill rather than pod failure: the pod is restarted within seconds; only a short error burst and a "
        "`pod_processes` restart step.",
        "pod failure rather than pod kill: unavailability lasts the whole window.",
    ]
    assert kb_shipped.distinctions(["node disk fill"]) == []  # one type: nothing to tell apart
