#!/usr/bin/env python
"""Quality report of the evidence index: AC@1/3/5 of its ranking against ground truth.

    scripts/eval_index.py --data-dir D --index-dir I --gt groundtruth.jsonl [--input input.json]

Windows come from the case descriptions (``input.json``, default ``D/input.json``) exactly
as the diagnoser sees them; ground truth is read here and only here. A hit at k means one
element of the truth ``instance`` (a string or a list) is among the first k candidates.
The chance baseline draws k components uniformly from the components seen in the data.
"""
from __future__ import annotations

import argparse
import logging
import sys
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diagnose.cases import load_cases  # noqa: E402
from index.params import IndexParams  # noqa: E402
from index.query import known_components, query_window  # noqa: E402
from judge.groundtruth import load_truth  # noqa: E402
from rca.settings import load_settings  # noqa: E402

KS = (1, 3, 5)


def evaluate(*, index_dir: Path, input_file: Path, gt_file: Path, params: IndexParams) -> dict:
    truths = {t.uuid: t for t in load_truth(gt_file)}
    per_type: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    misses: list[str] = []
    for case in load_cases(input_file):
        truth = truths.get(case.uuid)
        if truth is None:
            logging.warning("case %s has no ground truth; skipped", case.uuid)
            continue
        result = query_window(index_dir, start=case.start, end=case.end, top_k=max(KS), params=params)
        ranking = [c.component for c in result.candidates]
        universe = known_components(index_dir, start=case.start, end=case.end)
        answers = set(truth.instance)
        row = per_type[truth.fault_type]
        row["cases"] += 1
        for k in KS:
            row[f"AC@{k}"] += any(c in answers for c in ranking[:k])
            right = len(answers & set(universe)) or 1
            row[f"chance@{k}"] += min(1.0, k * right / max(len(universe), 1))
        if not any(c in answers for c in ranking[:3]):
            misses.append(f"{case.uuid} {truth.fault_type} truth={truth.instance} top3={ranking[:3]}")
    return {"per_type": per_type, "misses": misses}


def report(results: dict) -> Table:
    table = Table(title="evidence index ranking quality")
    columns = ["fault type", "cases"] + [f"AC@{k}" for k in KS] + [f"chance@{k}" for k in KS]
    for column in columns:
        table.add_column(column, justify="right" if column != "fault type" else "left")
    total: dict[str, float] = defaultdict(float)
    for fault_type, row in sorted(results["per_type"].items()):
        n = row["cases"]
        table.add_row(fault_type, f"{n:.0f}", *[f"{row[c] / n:.2f}" for c in columns[2:]])
        for key, value in row.items():
            total[key] += value
    n = total["cases"] or 1
    table.add_row("ALL", f"{total['cases']:.0f}", *[f"{total[c] / n:.2f}" for c in columns[2:]], style="bold")
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--index-dir", type=Path, required=True)
    parser.add_argument("--gt", type=Path, required=True)
    parser.add_argument("--input", type=Path, default=None, help="case file (default: DATA_DIR/input.json)")
    parser.add_argument("--config", type=Path, default=None, help="TOML config whose [index] section to use")
    parser.add_argument("--baseline-minutes", type=int, default=None, help="overrides [index] baseline_minutes")
    parser.add_argument("--show-misses", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    overrides = {"index": {"baseline_minutes": args.baseline_minutes}}
    params = IndexParams.from_settings(load_settings(config_path=args.config, overrides=overrides).index)
    results = evaluate(index_dir=args.index_dir, input_file=args.input or args.data_dir / "input.json",
                       gt_file=args.gt, params=params)
    console = Console()
    console.print(report(results))
    if args.show_misses:
        for line in results["misses"]:
            console.print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
