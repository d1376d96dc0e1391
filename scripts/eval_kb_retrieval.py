"""Print retrieval quality of the SOP knowledge base (top-1 and top-k per fault type).

Usage: .venv/bin/python scripts/eval_kb_retrieval.py [QUERIES_JSON] [-k 3] [--kb-dir DIR]
"""
from __future__ import annotations

import argparse
import logging
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from knowledge.base import KnowledgeBase
from knowledge.evaluation import evaluate_retrieval, load_queries
from rca.settings import PathSettings, Settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("queries", nargs="?", type=Path, default=Path("tests/test_kb_queries.json"))
    parser.add_argument("-k", type=int, default=3)
    parser.add_argument("--kb-dir", type=Path, default=None, help="Chroma directory (default: a fresh temp dir).")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    kb_dir = args.kb_dir or Path(tempfile.mkdtemp(prefix="kb-eval-"))
    settings = Settings(paths=PathSettings(kb_dir=kb_dir))
    started = time.perf_counter()
    result = evaluate_retrieval(KnowledgeBase.from_settings(settings), load_queries(args.queries), k=args.k)
    elapsed = time.perf_counter() - started
    per_type: dict[str, list[int | None]] = defaultdict(list)
    for outcome in result.outcomes:
        per_type[outcome.fault_type].append(outcome.rank)
    print(f"{'fault type':24s} ranks")
    for fault_type, ranks in per_type.items():
        print(f"{fault_type:24s} {' '.join('-' if r is None else str(r) for r in ranks)}")
    for miss in result.misses():
        print(f"MISS {miss.fault_type}: {miss.query[:90]} -> {miss.retrieved}")
    print(f"queries={len(result.outcomes)} top1={result.top1:.3f} top{args.k}={result.top_k:.3f} "
          f"seconds={elapsed:.1f} (includes building the index)")


if __name__ == "__main__":
    main()
