#!/usr/bin/env python3
"""Benchmark the full path (simulate -> preprocess -> diagnose -> judge) over all 18 fault types.

One real fault of every type (``--per-type``) from the reference schedule is replayed
into a simulated day, then diagnosed with the configured LLM (embedded 1.5B by default).
Prints the final score with LA / TA / Efficiency / Explainability (through judge/),
LLM-vs-index agreement, tokens, LLM calls and seconds per case.

    .venv/bin/python scripts/bench_diagnose.py --work-dir work/bench --per-type 1
    .venv/bin/python scripts/bench_diagnose.py --work-dir work/bench --mode team     # agent modes
    .venv/bin/python scripts/bench_diagnose.py --work-dir work/bench --compare       # the modes side by side

Every mode diagnoses the same simulated problems (one data set and index per work dir) and
writes ``result-<mode>.jsonl`` and ``bench_summary-<mode>.json`` (pipeline keeps the
unsuffixed names); ``--compare`` prints the summaries found as markdown tables.
    .venv/bin/python scripts/bench_diagnose.py --seed 201 --randomize     # an evaluation seed, randomised world
    .venv/bin/python scripts/bench_diagnose.py --pool work/a work/b        # several runs as one figure

Beside the model's score it prints the score of the same cases answered by the rules alone
(index top-1 + its best SOP fit, recorded in every pipeline run record), the paired per-case
difference with a 95% bootstrap interval, and the cases where the two differ.
Seeds: 100-199 are for tuning, 200-299 for reporting (see scripts/eval_index.py).
Targets with the embedded 1.5B model: final >= 80, <= 3k prompt tokens, <= 2 calls, <= 30 s per case.

Where the seconds go (issue 27) is printed from the run records in input order: the cold start
(model load: the diagnose stage's wall minus its cases), the first case (whose prompt prefix is
not yet cached) and the median of the others, split into case preparation (index query, Chroma
retrieval, SOP checks, prompt; done ahead while the model runs, so only its wait counts),
prefill and decode (the server's own timings), with the prompt tokens evaluated against those
taken from the cache; then the projection for 400 cases beside the accuracy (final, rules only):
the first case once, plus 399 times the batch's steady seconds a case (its wall less the first
case, over the other cases: the model load and every wait included).
Target on 2 cores with the embedded 1.5B: median <= 8 s a case, <= 60 min for 400 cases.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from rich.console import Console

from bench.pipeline import (
    discard_earlier_answers,
    print_model_share,
    print_path_result,
    print_score_intervals,
    run_full_path,
    simulate_problem_set,
)
from bench.problems import REFERENCE_SCHEDULE, ProblemSet, read_jsonl
from bench.report import interval_cell, model_share, score_intervals
from diagnose.record import RunRecord
from judge.challenge import CaseOutcome
from rca.challenge import rule_version
from rca.logsetup import configure_logging
from rca.settings import Settings, load_settings

log = logging.getLogger("bench")

MODES = ("pipeline", "react", "team")


def _suffix(mode: str) -> str:
    return "" if mode == "pipeline" else f"-{mode}"


def _first_cases(problem_set: ProblemSet, count: int, *, out_dir: Path) -> ProblemSet:
    """A view of the first ``count`` cases: their input and truth, the same telemetry (day dirs linked)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cases = json.loads(problem_set.input_file.read_text(encoding="utf-8"))[:count]
    wanted = {c["uuid"] for c in cases}
    truth = [row for row in read_jsonl(problem_set.truth_file) if row["uuid"] in wanted]
    subset = ProblemSet(out_dir)
    subset.input_file.write_text(json.dumps(cases, indent=1), encoding="utf-8")
    subset.truth_file.write_text("".join(json.dumps(row) + "\n" for row in truth), encoding="utf-8")
    for day in problem_set.data_dir.iterdir():
        link = out_dir / day.name
        if day.is_dir() and not link.exists():
            link.symlink_to(day.resolve(), target_is_directory=True)
    return subset


def _compare(work_dir: Path) -> None:
    """Markdown tables of the summaries in ``work_dir``: overall figures, then LA/TA per fault type."""
    summaries = {}
    for mode in MODES:
        path = work_dir / f"bench_summary{_suffix(mode)}.json"
        if path.exists():
            summaries[mode] = json.loads(path.read_text())
    if not summaries:
        raise SystemExit(f"no bench_summary*.json in {work_dir}")
    columns = ("cases", "final", "LA", "TA", "efficiency", "explainability", "llm_calls_per_case",
               "prompt_tokens_per_case", "completion_tokens_per_case", "seconds_per_case")
    print("| mode | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for mode, s in summaries.items():
        cells = [s.get(c, "") for c in columns]
        print(f"| {mode} | " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in cells) + " |")
    types = sorted({t for s in summaries.values() for t in s.get("by_fault_type", {})})
    print()
    print("| fault type | " + " | ".join(f"{m} LA/TA" for m in summaries) + " |")
    print("|---" * (len(summaries) + 1) + "|")
    for fault_type in types:
        cells = []
        for s in summaries.values():
            score = s.get("by_fault_type", {}).get(fault_type)
            cells.append(f"{score['LA']:.0%} / {score['TA']:.0%}" if score else "-")
        print(f"| {fault_type} | " + " | ".join(cells) + " |")


def _pool(work_dirs: list[Path], *, settings: Settings) -> None:
    """One figure over several pipeline runs (e.g. one per evaluation seed), rescored from their
    answers and run records (no model call): case-weighted final of the model and of the
    rules-only answers, and the per-case model gain pooled with its 95% interval."""
    from bench.intervals import bootstrap_interval

    print("| run | cases | final | rules only |")
    print("|---|---|---|---|")
    cases, final, rules, gains = 0, 0.0, 0.0, []
    model_outcomes: list[CaseOutcome] = []
    rules_outcomes: list[CaseOutcome] = []
    for work_dir in work_dirs:
        result_file, truth_file = work_dir / "result.jsonl", work_dir / "data" / "groundtruth.jsonl"
        if not result_file.exists() or not truth_file.exists():
            raise SystemExit(f"{work_dir}: no result.jsonl or data/groundtruth.jsonl (a pipeline run's work dir?)")
        share = model_share(truth_file=truth_file, result_file=result_file, runs_dir=work_dir / "runs" / "result",
                            settings=settings)
        n = len(share.model.cases)
        print(f"| {work_dir} | {n} | {share.model.overall.final:.2f} | {share.rules_only.overall.final:.2f} |")
        cases += n
        final += share.model.overall.final * n
        rules += share.rules_only.overall.final * n
        gains += list(share.gains.values())
        model_outcomes += share.model.cases
        rules_outcomes += share.rules_only.cases
    low, high = bootstrap_interval(gains)
    print(f"| all | {cases} | {final / cases:.2f} | {rules / cases:.2f} |")
    print(f"model gain per case, (LA+TA)/2, pooled over {len(gains)} cases: "
          f"{sum(gains) / len(gains):+.3f} [95% CI {low:+.3f}, {high:+.3f}]")
    # Pooled cases re-aggregated as one set (the runs' finals above are averaged per run instead).
    challenge = rule_version(settings.challenge.rules)
    model_rows = score_intervals(model_outcomes, rules=challenge)
    rules_rows = {row.group: row for row in score_intervals(rules_outcomes, rules=challenge)}
    print()
    print("| fault type | cases | final [95% CI] | LA [95% CI] | TA [95% CI] | rules only: final [95% CI] |")
    print("|---|---|---|---|---|---|")
    for row in model_rows:
        ablation = rules_rows.get(row.group)
        print(f"| {row.group} | {row.cases} | {interval_cell(row.final, digits=1)} | {interval_cell(row.la)} | "
              f"{interval_cell(row.ta)} | {interval_cell(ablation.final, digits=1) if ablation else '-'} |")


def _median(values: list[float]) -> float:
    import statistics

    return round(statistics.median(values), 2) if values else 0.0


def time_breakdown(records: list[RunRecord], *, diagnose_wall_s: float) -> dict[str, float]:
    """Where a batch's seconds went, from its run records (in input order): see the module docstring."""
    answered = [r for r in records if r.status == "answered"]
    if not answered:
        return {}

    def wall(record: RunRecord) -> float:  # a case's own seconds in the batch: its model call and answer,
        t = record.timings_s  # plus the wait for its preparation (0 when it was ready in time)
        return t.get("total_s", 0.0) + t.get("prepare_wait_s", 0.0)

    first, rest = answered[0], answered[1:] or answered[:1]
    figures = {
        "cold_start_s": round(max(0.0, diagnose_wall_s - sum(wall(r) for r in answered)), 2),
        "first_case_s": round(wall(first), 2),
        "first_case_prompt_evaluated": first.timings_s.get("prompt_evaluated", 0.0),
        "median_case_s": _median([wall(r) for r in rest]),
        "median_prepare_s": _median([r.timings_s.get("prepare_s", r.timings_s.get("index_s", 0.0)
                                     + r.timings_s.get("retrieve_s", 0.0)) for r in rest]),
        "median_prepare_wait_s": _median([r.timings_s.get("prepare_wait_s", 0.0) for r in rest]),
        "median_index_s": _median([r.timings_s.get("index_s", 0.0) for r in rest]),
        "median_retrieve_s": _median([r.timings_s.get("retrieve_s", 0.0) for r in rest]),
        "median_llm_s": _median([r.timings_s.get("llm_s", 0.0) for r in rest]),
        "median_prefill_s": _median([r.timings_s.get("prefill_s", 0.0) for r in rest]),
        "median_decode_s": _median([r.timings_s.get("decode_s", 0.0) for r in rest]),
        "median_prompt_evaluated": _median([r.timings_s.get("prompt_evaluated", 0.0) for r in rest]),
        "median_prompt_cached": _median([r.timings_s.get("prompt_cached", 0.0) for r in rest]),
        "median_completion_tokens": _median([float(r.usage.completion_tokens) for r in rest]),
        "batch_s_per_case": round(diagnose_wall_s / len(answered), 2),
    }
    # A phase pays the uncached first case once: the projection adds it to 399 of the batch's
    # other cases at their mean share of its wall (the model load and any wait between cases
    # spread over them, so the load is over-counted a little rather than a wait left out).
    # Spreading the first case over this batch's cases instead, as before, charged a 400-case
    # phase 400/len(answered) first cases (about 7 minutes too many on 36 cases). The first case
    # is the batch's first in input order, answered or not; with ``concurrency`` > 1 it overlaps
    # the next ones, so taking out its whole wall projects a little low.
    opening = records[0]
    if len(records) < 2 or "total_s" not in opening.timings_s:
        log.warning("no 400-case projection: it needs two cases or more and the first case's seconds")
        return figures
    steady_s = max(0.0, diagnose_wall_s - wall(opening)) / (len(records) - 1)
    figures["steady_s_per_case"] = round(steady_s, 2)
    figures["projected_400_cases_min"] = round((wall(opening) + 399 * steady_s) / 60, 1)
    return figures


def print_time_breakdown(figures: dict[str, float], *, final: float, rules_only: float | None, console: Console) -> None:
    from rich.table import Table

    table = Table(title="where the seconds go (diagnose stage), beside the accuracy")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in figures.items():
        table.add_row(key, str(value))
    table.add_row("final score", f"{final:.2f}")
    table.add_row("rules only final", "-" if rules_only is None else f"{rules_only:.2f}")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", type=Path, default=Path("work/bench"))
    parser.add_argument("--reference", type=Path, default=REFERENCE_SCHEDULE, help="ground truth whose faults are replayed")
    parser.add_argument("--per-type", type=int, default=1)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--difficulty", type=float, default=1.0)
    parser.add_argument("--randomize", action="store_true", help="domain-randomised simulation (simulate --randomize)")
    parser.add_argument("--model", default=None, help="embedded model name (qwen2.5-coder-1.5b / qwen2.5-coder-0.5b)")
    parser.add_argument("--mode", choices=MODES, default=None, help="diagnose mode (config diagnose.mode)")
    parser.add_argument("--cases", type=int, default=None,
                        help="diagnose and score only the first N cases of the set (a slow mode, a busy machine)")
    parser.add_argument("--compare", action="store_true", help="print the modes' summaries side by side and stop")
    parser.add_argument("--pool", type=Path, nargs="+", default=None, metavar="WORK_DIR",
                        help="pool the summaries of several work dirs (case-weighted final, pooled gain) and stop")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="cases in the model at once (config llm.concurrency; embedded: server slots)")
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--resume", action="store_true",
                        help="keep the answers an interrupted run already wrote (default: diagnose every case afresh)")
    args = parser.parse_args()
    configure_logging(0)
    if args.pool:
        _pool(args.pool, settings=load_settings(config_path=args.config))
        return
    if args.compare:
        _compare(args.work_dir)
        return

    data_dir = args.work_dir / "data"
    settings = load_settings(config_path=args.config, overrides={
        # The agent modes' tools read the raw telemetry of the simulated problems.
        "paths": {"runs_dir": args.work_dir / "runs", "data_dir": data_dir},
        "llm": {"embedded_model": args.model, "concurrency": args.concurrency}, "diagnose": {"mode": args.mode},
    })
    mode = settings.diagnose.mode
    problem_set = simulate_problem_set(data_dir, seed=args.seed, difficulty=args.difficulty,
                                       reference_schedule=args.reference, per_type=args.per_type,
                                       randomize=args.randomize)
    if args.cases is not None:
        problem_set = _first_cases(problem_set, args.cases, out_dir=args.work_dir / f"first-{args.cases}")
    result_file = args.work_dir / f"result{_suffix(mode)}.jsonl"
    if not args.resume:  # the data and index are reused, the answers are not
        discard_earlier_answers(result_file, runs_dir=settings.paths.runs_dir)
    result = run_full_path(settings, problem_set, index_dir=args.work_dir / "index", result_file=result_file)
    console = Console()
    print_path_result(result, console)
    report = result.report
    print_score_intervals(score_intervals(report.cases, rules=rule_version(settings.challenge.rules)), console,
                          title="the model's answers per fault type, 95% intervals (bootstrap over cases)")
    share = model_share(truth_file=problem_set.truth_file, result_file=result.result_file,
                        runs_dir=settings.paths.runs_dir / result.result_file.stem, settings=settings)
    if share.records:
        print_model_share(share, console, per_case=args.seed < 200)  # seeds 200-299 are for reporting
    records = RunRecord.load_dir(settings.paths.runs_dir / result.result_file.stem)
    order = {row["uuid"]: i for i, row in enumerate(json.loads(problem_set.input_file.read_text(encoding="utf-8")))}
    records.sort(key=lambda r: order.get(r.uuid, len(order)))
    breakdown = time_breakdown(records, diagnose_wall_s=result.stage_seconds.get("diagnose", 0.0))
    print_time_breakdown(breakdown, final=report.overall.final,
                         rules_only=share.rules_only.overall.final if share.records else None, console=console)
    summary = {
        "mode": mode,
        "final": round(report.overall.final, 2),
        "LA": report.overall.la, "TA": report.overall.ta,
        "efficiency": report.overall.efficiency, "explainability": report.overall.explainability,
        **result.costs, "stage_seconds": result.stage_seconds,
        "by_fault_type": {t: {"LA": s.la, "TA": s.ta, "final": round(s.final, 2)} for t, s in report.by_fault_type.items()},
        "rules_only_final": round(share.rules_only.overall.final, 2) if share.records else None,
        "model_gain": [round(x, 3) for x in share.difference] if share.records else None,  # mean, 95% CI
        "differing_cases": share.differing,
        "time_breakdown": breakdown, "concurrency": settings.llm.concurrency,
    }
    (args.work_dir / f"bench_summary{_suffix(mode)}.json").write_text(json.dumps(summary, indent=1, default=str))
    logging.getLogger("bench").info("summary: %s", json.dumps(summary, default=str))


if __name__ == "__main__":
    main()
