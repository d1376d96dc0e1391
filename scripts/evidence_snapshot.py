#!/usr/bin/env python
"""Snapshot of what the diagnoser is shown about every case: candidates, evidence lines, SOP fits.

    scripts/evidence_snapshot.py --index-dir I --input input.json --out snapshot.jsonl

One JSON line per case: each ranked candidate with its score, its evidence text and the
SOP signal fits of the fault types that can happen to it (as the prompt renders them).
Diff two snapshots to prove a refactor of the index or the signal grammar changed nothing
the model reads.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from diagnose.cases import load_cases
from index.params import IndexParams
from index.query import query_window
from knowledge.documents import docs_dir, load_documents
from knowledge.retrieval import fault_signatures
from knowledge.signatures import rank_signatures
from rca.settings import load_settings
from rca.system import system_from_settings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index-dir", type=Path, required=True)
    parser.add_argument("--input", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--top-k", type=int, default=10)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    settings = load_settings()
    system = system_from_settings(settings)
    params = IndexParams.from_settings(settings.index, system=system)
    signatures = fault_signatures(load_documents(docs_dir(settings.knowledge)))
    with args.out.open("w", encoding="utf-8") as out:
        cases = load_cases(args.input)
        windows = [(case.start, case.end) for case in cases]
        for case in cases:
            # As the diagnoser queries it: the other cases' windows are no baseline.
            others = [w for w in windows if w != (case.start, case.end)]
            result = query_window(args.index_dir, start=case.start, end=case.end, top_k=args.top_k, params=params,
                                  exclude_windows=others)
            candidates = []
            for candidate in result.candidates:
                fits = rank_signatures(signatures, candidate.evidence,
                                       fault_types=system.applicable_fault_types(candidate.component))
                candidates.append({
                    "component": candidate.component, "level": candidate.level, "score": candidate.score,
                    "evidence": [f"{item.modality}: {item.text}" for item in candidate.evidence],
                    "fits": [fit.render() for fit in fits],
                })
            out.write(json.dumps({"uuid": case.uuid, "candidates": candidates}, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
