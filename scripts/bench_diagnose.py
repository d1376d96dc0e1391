#!/usr/bin/env python3
"""Benchmark the full path (simulate -> preprocess -> diagnose -> judge) over all 18 fault types.

One real fault of every type (``--per-type``) from the reference schedule is replayed
into a simulated day, then diagnosed with the configured LLM (embedded 1.5B by default).
Prints the final score with LA / TA / Efficiency / Explainability (through judge/),
LLM-vs-index agreement, tokens, LLM calls and seconds per case.

    .venv/bin/python scripts/bench_diagnose.py --work-dir work/bench --per-type 1
    .venv/bin/python scripts/bench_diagnose.py --seed 201 --randomize     # an evaluation seed, randomised world

Beside the model's score it prints the score of the same cases answered by the rules alone
(index top-1 + its best SOP fit, recorded in every run record), the paired per-case
difference with a 95% bootstrap interval, and the cases where the two differ.
Seeds: 100-199 are for tuning, 200-299 for reporting (see scripts/eval_index.py).
Targets with the embedded 1.5B model: final >= 80, <= 3k prompt tokens, <= 2 calls, <= 30 s per case.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from rich.console import Console

from bench.pipeline import print_model_share, print_path_result, run_full_path, simulate_problem_set
from bench.report import model_share
from rca.logsetup import configure_logging
from rca.settings import load_settings

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference" / "aiops2025" / "groundtruth.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", type=Path, default=Path("work/bench"))
    parser.add_argument("--reference", type=Path, default=REFERENCE, help="ground truth whose faults are replayed")
    parser.add_argument("--per-type", type=int, default=1)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--difficulty", type=float, default=1.0)
    parser.add_argument("--randomize", action="store_true", help="domain-randomised simulation (simulate --randomize)")
    parser.add_argument("--model", default=None, help="embedded model name (qwen2.5-coder-1.5b / qwen2.5-coder-0.5b)")
    parser.add_argument("--config", type=Path, default=None)
    args = parser.parse_args()
    configure_logging(0)

    settings = load_settings(config_path=args.config, overrides={
        "paths": {"runs_dir": args.work_dir / "runs"}, "llm": {"embedded_model": args.model},
    })
    problem_set = simulate_problem_set(args.work_dir / "data", seed=args.seed, difficulty=args.difficulty,
                                       reference_schedule=args.reference, per_type=args.per_type,
                                       randomize=args.randomize)
    result = run_full_path(settings, problem_set, index_dir=args.work_dir / "index", result_file=args.work_dir / "result.jsonl")
    console = Console()
    print_path_result(result, console)
    share = model_share(truth_file=problem_set.truth_file, result_file=result.result_file,
                        runs_dir=settings.paths.runs_dir / result.result_file.stem, settings=settings)
    print_model_share(share, console)
    summary = {
        "final": round(result.report.overall.final, 2),
        "LA": result.report.overall.la, "TA": result.report.overall.ta,
        "efficiency": result.report.overall.efficiency, "explainability": result.report.overall.explainability,
        **result.costs, "stage_seconds": result.stage_seconds,
        "rules_only_final": round(share.rules_only.overall.final, 2),
        "model_gain_per_case": [round(x, 3) for x in share.difference],
        "differing_cases": share.differing,
    }
    (args.work_dir / "bench_summary.json").write_text(json.dumps(summary, indent=1, default=str))
    logging.getLogger("bench").info("summary: %s", json.dumps(summary, default=str))


if __name__ == "__main__":
    main()
