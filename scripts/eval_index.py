#!/usr/bin/env python
"""Quality report of the evidence index: AC@1/3/5 of its ranking per fault type, with 95%
bootstrap intervals and the chance floor.

On an existing dataset:
    scripts/eval_index.py --data-dir D --index-dir I --gt groundtruth.jsonl [--input input.json]

On simulated sets (one real fault of every type per seed, replayed from the vendored
reference schedule), built and indexed under --work-dir and reused on reruns:
    scripts/eval_index.py --simulate-seed 101 --simulate-seed 102 [--randomize] [--per-type 2] [--packed]

--packed lays the faults out as Nezha injects them (3 minutes each, 4-9 minutes apart), so each
window's neighbours crowd its baseline, as on the real datasets. --nezha-recording indexes a copy
of each set as Nezha records (bench/recording.py): spans without status, no error counts, traces
and logs only from a minute before each case to 150 s after its start, and lines that state their
request's trace context (the set is simulated with it: a -logctx set). --traces-only indexes a
copy without any metric file, as an OpenTelemetry collector without metrics records it.

Tuning protocol: tune on the tuning seeds (100-199), report on the evaluation seeds
(200-299), never looked at while tuning. The script refuses to mix the two ranges.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from rich.console import Console

from bench.index_eval import IndexEvaluation, confidence_table, evaluate_index, index_table
from bench.pipeline import PACKED_HELP, add_seed_set_arguments, refuse_mixed_seeds, seed_index_sets
from bench.recording import NEZHA_RECORDING, TRACES_ONLY
from index.params import IndexParams
from rca.settings import load_settings
from rca.system import system_from_settings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--index-dir", type=Path)
    parser.add_argument("--gt", type=Path)
    parser.add_argument("--input", type=Path, default=None, help="case file (default: DATA_DIR/input.json)")
    add_seed_set_arguments(parser, required=False)
    parser.add_argument("--packed", action="store_true", help=PACKED_HELP)
    recorded = parser.add_mutually_exclusive_group()
    recorded.add_argument("--nezha-recording", action="store_true",
                          help="index each simulated set as Nezha records it (no span status or error counts; "
                               "traces and logs only around each case; lines that state their trace context)")
    recorded.add_argument("--traces-only", action="store_true",
                          help="index each simulated set without its metric files (traces and logs only, as an "
                               "OpenTelemetry collector without metrics records them)")
    parser.add_argument("--work-dir", type=Path, default=Path("work/eval-index"))
    parser.add_argument("--config", type=Path, default=None, help="TOML config whose [index] section to use")
    parser.add_argument("--baseline-minutes", type=int, default=None, help="overrides [index] baseline_minutes")
    parser.add_argument("--show-misses", action="store_true")
    parser.add_argument("--no-exclude-windows", action="store_true",
                        help="do not leave the other cases' windows out of each baseline (ablation)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    console = Console(width=140)

    sets: list[tuple[Path, Path, Path, Path]] = []
    if args.simulate_seed:
        refuse_mixed_seeds(parser, args.simulate_seed)
        recording = NEZHA_RECORDING if args.nezha_recording else TRACES_ONLY if args.traces_only else None
        for _, problem_set, index_dir in seed_index_sets(args, packed=args.packed, recording=recording):
            data_dir = problem_set.data_dir
            sets.append((data_dir, index_dir, data_dir / "input.json", data_dir / "groundtruth.jsonl"))
    elif args.data_dir and args.index_dir and args.gt:
        sets.append((args.data_dir, args.index_dir, args.input or args.data_dir / "input.json", args.gt))
    else:
        parser.error("give --data-dir, --index-dir and --gt, or --simulate-seed S")

    overrides = {"index": {"baseline_minutes": args.baseline_minutes}}
    settings = load_settings(config_path=args.config, overrides=overrides)
    params = IndexParams.from_settings(settings.index, system=system_from_settings(settings))
    evaluation = IndexEvaluation()
    for _, index_dir, input_file, gt_file in sets:
        evaluation.cases += evaluate_index(index_dir=index_dir, input_file=input_file, gt_file=gt_file,
                                           params=params, exclude_other_windows=not args.no_exclude_windows).cases
    seeds = ",".join(map(str, args.simulate_seed)) or str(args.data_dir)
    how = "".join((", randomised" if args.randomize else "", ", packed" if args.packed else "",
                   ", recorded as Nezha records" if args.nezha_recording else "",
                   ", traces and logs only" if args.traces_only else ""))
    console.print(index_table(evaluation, title=f"evidence index ranking ({seeds}{how})"))
    console.print(confidence_table(evaluation, title="the index's first candidate by its confidence"))
    if args.show_misses:
        for case in evaluation.misses(k=1):  # as scripts/eval_real.py: every case whose first candidate is wrong
            console.print(f"index top-1 miss {case.uuid} {case.fault_type} truth={case.truth} top3={case.ranking[:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
