"""The diagnoser on real public fault data (Nezha, ESEC/FSE 2023): index, rules and model side by side.

    scripts/eval_real.py --nezha SRC --system onlineboutique --day 2022-08-22                # tuning set, rules only
    scripts/eval_real.py --nezha SRC --system onlineboutique --day 2022-08-22 --model        # + the configured LLM
    scripts/eval_real.py --nezha SRC --system onlineboutique --day 2022-08-22 --without-mesh # as a mesh-less system
    scripts/eval_real.py --nezha SRC --day 2022-08-22 --without-traces                       # metrics and logs only
    scripts/eval_real.py --nezha SRC --day 2022-08-22 --without-metrics                      # traces and logs only
    scripts/eval_real.py --nezha SRC --system onlineboutique --day 2022-08-23 --evaluation --model
    scripts/eval_real.py --nezha SRC --system trainticket --evaluation --model

SRC is a clone or a bare git snapshot of github.com/IntelligentDDS/Nezha. Each (system, day)
set is imported (``rca import nezha``) and indexed under --work-dir once and reused. Printed:
the index's AC@1/AC@3 per fault type; the rules alone (index top-1 + its best SOP fit) scored
like a submission; with --model the full path (the configured LLM) and the cases where the
model and the rules differ (on an evaluation set only how many). Every figure has a 95% bootstrap interval over cases.

Protocol: OnlineBoutique 2022-08-22 is the tuning set. OnlineBoutique 2022-08-23 and every
TrainTicket day are evaluation sets: run once at the end of a round, never tuned on; the
script refuses them without --evaluation.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from rich.console import Console

from bench.index_eval import confidence_table, evaluate_index, index_table
from bench.pipeline import discard_earlier_answers, print_model_share, print_score_intervals
from bench.real_sets import TUNING_SETS, View, is_tuning, prepared_set, rules_answers, set_settings
from bench.report import model_share, score_file, score_intervals
from diagnose.cases import load_cases
from diagnose.service import Diagnoser
from index.params import IndexParams
from judge.render import print_challenge
from rca.challenge import rule_version
from rca.system import system_from_settings

log = logging.getLogger("eval_real")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nezha", type=Path, required=True, help="clone or bare git snapshot of the Nezha repository")
    parser.add_argument("--system", choices=("onlineboutique", "trainticket"), default="onlineboutique")
    parser.add_argument("--day", action="append", default=[], help="day to evaluate (repeatable; default every day)")
    parser.add_argument("--evaluation", action="store_true", help="allow an evaluation set (run once, at the end)")
    parser.add_argument("--model", action="store_true", help="also run the full path with the configured LLM")
    parser.add_argument("--work-dir", type=Path, default=Path("work/real"))
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--system-file", type=Path, default=None,
                        help="system description (default: HipsterShop's for onlineboutique, else drafted by "
                             "`rca system infer` from the imported data)")
    parser.add_argument("--resume", action="store_true",
                        help="with --model: keep the answers an interrupted run already wrote (default: start afresh)")
    parser.add_argument("--show-misses", action="store_true", help="per-case misses (tuning sets only)")
    parser.add_argument("--without-mesh", action="store_true",
                        help="import without the service mesh's edge latency: the set as a system without a mesh "
                             "shows it (TrainTicket has none), a harder view of the same cases")
    parser.add_argument("--without-traces", action="store_true",
                        help="import without the spans: the set as a system without tracing shows it (metrics and "
                             "logs only, as from Prometheus and Loki), a harder view of the same cases")
    parser.add_argument("--without-metrics", action="store_true",
                        help="import without any metric file, the mesh's included: the set as a system with traces "
                             "and logs only shows it (an OpenTelemetry collector without metrics), a harder view")
    parser.add_argument("--keep-traces", type=float, default=1.0, metavar="SHARE",
                        help="import only this share of whole traces, chosen by trace id as a sampling tracer "
                             "would (e.g. 0.2): the set as a deployment that samples its traces shows it")
    args = parser.parse_args()
    without = tuple(name for name, left_out in (("mesh", args.without_mesh), ("traces", args.without_traces),
                                                ("metrics", args.without_metrics)) if left_out)
    try:
        view = View(without=without, keep_traces=args.keep_traces)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    tuning = is_tuning(system=args.system, days=args.day)
    if not tuning and not args.evaluation:
        parser.error("this is an evaluation set: run it once at the end of a round with --evaluation "
                     f"(tuning set: {sorted(TUNING_SETS)})")
    if args.show_misses and not tuning:
        parser.error("--show-misses is for tuning sets: evaluation cases are not looked at one by one")

    data_dir, index_dir = prepared_set(source=args.nezha, system=args.system, days=sorted(args.day),
                                       work_dir=args.work_dir, view=view)
    settings = set_settings(data_dir=data_dir, index_dir=index_dir, system=args.system, work_dir=args.work_dir,
                            config=args.config, system_file=args.system_file)
    truth_file = data_dir / "groundtruth.jsonl"
    console = Console(width=150)
    label = (f"{args.system} {', '.join(args.day) or 'all days'}"
             f"{'' if view.label == 'full' else ' ' + view.label} ({'tuning' if tuning else 'evaluation'})")

    evaluation = evaluate_index(index_dir=index_dir, input_file=data_dir / "input.json", gt_file=truth_file,
                                params=IndexParams.from_settings(settings.index, system=system_from_settings(settings)), exclude_other_windows=True)
    console.print(index_table(evaluation, title=f"evidence index ranking, {label}"))
    console.print(confidence_table(evaluation, title=f"the index's first candidate by its confidence, {label}"))
    if args.show_misses:
        for case in evaluation.misses(k=1):
            console.print(f"  index top-1 miss {case.uuid} {case.fault_type} truth={case.truth} top3={case.ranking[:3]}")

    rules = rule_version(settings.challenge.rules)
    rules_file = rules_answers(settings, out=data_dir.parent / "rules.jsonl")
    report = score_file(truth_file=truth_file, result_file=rules_file, settings=settings)
    console.print(f"[bold]rules only (no model), {label}[/bold]")
    print_challenge(report, console)
    print_score_intervals(score_intervals(report.cases, rules=rules), console,
                          title="rules only, per fault type, 95% intervals (bootstrap over cases)")

    if args.model:
        result_file = data_dir.parent / "result.jsonl"
        runs = settings.paths.runs_dir / result_file.stem
        if not args.resume:
            discard_earlier_answers(result_file, runs_dir=settings.paths.runs_dir)
        with Diagnoser.from_settings(settings) as diagnoser:
            diagnoser.run(load_cases(settings.paths.input_file), out=result_file)
        share = model_share(truth_file=truth_file, result_file=result_file, runs_dir=runs, settings=settings)
        console.print(f"[bold]full path ({settings.llm.backend} model), {label}[/bold]")
        print_challenge(share.model, console)
        print_score_intervals(score_intervals(share.model.cases, rules=rules), console,
                              title="model, per fault type, 95% intervals (bootstrap over cases)")
        print_model_share(share, console, per_case=tuning)
    return 0


if __name__ == "__main__":
    sys.exit(main())
