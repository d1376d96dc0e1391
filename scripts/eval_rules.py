#!/usr/bin/env python
"""The rules alone, scored like a submission: index top-1 + its best SOP fit for every case.

No model is called, so a seed set is scored in seconds: this is how the index and the SOP
signatures are tuned before the model runs (scripts/bench_diagnose.py). It prints the judge's
table and the per-fault-type final, LA and TA with 95% intervals (bootstrap over cases).

    scripts/eval_rules.py --simulate-seed 101 --simulate-seed 102 --randomize --per-type 2

Seed sets are simulated and indexed under --work-dir, named as scripts/eval_index.py names
them, so the two scripts share them. Tuning seeds are 100-199, evaluation seeds 200-299; the
script refuses to mix the ranges in one report.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from rich.console import Console

from bench.pipeline import (
    add_seed_set_arguments,
    aimed_settings,
    print_score_intervals,
    refuse_mixed_seeds,
    rules_answers,
    seed_index_sets,
    seed_report_name,
    seeded_truth_rows,
)
from bench.report import score_file, score_intervals
from judge.render import print_challenge
from rca.challenge import rule_version
from rca.settings import load_settings

log = logging.getLogger("eval_rules")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_seed_set_arguments(parser, required=True)
    parser.add_argument("--work-dir", type=Path, default=Path("work/eval-index"))
    parser.add_argument("--config", type=Path, default=None, help="TOML config (its [index] and [diagnose] apply)")
    parser.add_argument("--show-misses", action="store_true", help="print every case the rules get wrong")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    refuse_mixed_seeds(parser, args.simulate_seed)

    base = load_settings(config_path=args.config)
    rules = rule_version(base.challenge.rules)
    truth_rows: list[str] = []
    answers: list[str] = []
    for seed, problem_set, index_dir in seed_index_sets(args):
        truth_rows += seeded_truth_rows(problem_set, seed=seed)
        answers += rules_answers(aimed_settings(base, problem_set, index_dir=index_dir), seed=seed, rules=rules)

    name = seed_report_name("rules", args)
    truth_file = args.work_dir / f"{name}.truth.jsonl"
    result_file = args.work_dir / f"{name}.answers.jsonl"
    truth_file.write_text("\n".join(truth_rows) + "\n", encoding="utf-8")
    result_file.write_text("\n".join(answers) + "\n", encoding="utf-8")
    report = score_file(truth_file=truth_file, result_file=result_file, settings=base)
    console = Console(width=140)
    print_challenge(report, console)
    print_score_intervals(score_intervals(report.cases, rules=rules), console,
                          title="rules only, per fault type, 95% intervals (bootstrap over cases)")
    if args.show_misses:
        chosen = {json.loads(line)["uuid"]: json.loads(line) for line in answers}
        for outcome in report.cases:
            if not (outcome.component_right and outcome.reason_right):
                answer = chosen.get(outcome.uuid, {})
                console.print(f"{outcome.uuid} {outcome.fault_type}: {answer.get('component', '-')} / "
                              f"{answer.get('reason', 'unanswered')[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
