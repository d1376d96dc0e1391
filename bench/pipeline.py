"""The full path over a simulated problem set: simulate -> preprocess -> diagnose -> judge.

Shared by ``rca demo`` and ``scripts/bench_diagnose.py`` so both measure the same thing.
Every stage is incremental: a rerun reuses the simulated data, the index partitions
and the answers already written, so a killed run resumes.
"""
from __future__ import annotations

import argparse
import json
import logging
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from bench.problems import REFERENCE_SCHEDULE, ProblemSet, compact_schedule, read_jsonl
from bench.recording import Recording, recorded_copy
from bench.report import ModelShare, ScoreInterval, interval_cell, run_costs, score_file
from judge.challenge import ChallengeReport
from rca.challenge import RuleVersion
from rca.settings import Settings, load_settings

log = logging.getLogger(__name__)


@dataclass
class PathResult:
    problem_set: ProblemSet
    result_file: Path
    report: ChallengeReport
    costs: dict[str, Any]
    stage_seconds: dict[str, float] = field(default_factory=dict)


def simulate_problem_set(
    out_dir: Path, *, cases: int | None = None, seed: int, scale: Literal["small", "full"] = "small", difficulty: float = 1.0,
    reference_schedule: Path | None = None, per_type: int = 1, randomize: bool = False, packed: bool = False,
    log_trace_context: bool = False,
) -> ProblemSet:
    """Simulate once: an existing ``groundtruth.jsonl`` means the set is already there.

    With ``reference_schedule`` the faults are real ones (``per_type`` of every fault
    type) laid out one an hour, or ``packed`` as Nezha injects them (``bench.problems.packed_schedule``);
    otherwise the simulator draws ``cases`` faults. ``log_trace_context``: lines state their
    request's trace context (``SimulationOptions.log_trace_context``).
    """
    from simulate.simulator import SimulationOptions, simulate

    problem_set = ProblemSet(out_dir)
    if problem_set.truth_file.exists() and problem_set.input_file.exists():
        log.info("reusing simulated problem set in %s", out_dir)
        return problem_set
    schedule_path = None
    if reference_schedule is not None:
        schedule = compact_schedule(read_jsonl(reference_schedule), per_type=per_type, day="2025-06-06", seed=seed,
                                    packed=packed)
        out_dir.mkdir(parents=True, exist_ok=True)
        schedule_path = out_dir.parent / f"{out_dir.name}.schedule.jsonl"
        schedule_path.write_text("".join(json.dumps(row) + "\n" for row in schedule), encoding="utf-8")
    simulate(SimulationOptions(out_dir=out_dir, cases=None if schedule_path else cases, seed=seed, scale=scale,
                               difficulty=difficulty, schedule=schedule_path, randomize=randomize,
                               log_trace_context=log_trace_context))
    return problem_set


PACKED_HELP = "lay the replayed faults out as Nezha injects them: 3 minutes each, 4-9 minutes apart"

# Seeds of simulated sets: tune on the first range, report on the second, never looked at while tuning.
TUNING_SEEDS = range(100, 200)
EVALUATION_SEEDS = range(200, 300)


def mixed_seed_ranges(seeds: Sequence[int]) -> bool:
    """True when ``seeds`` holds both tuning and evaluation seeds (one report must not mix them)."""
    return any(s in TUNING_SEEDS for s in seeds) and any(s in EVALUATION_SEEDS for s in seeds)


def refuse_mixed_seeds(parser: argparse.ArgumentParser, seeds: Sequence[int]) -> None:
    """A usage error (``parser.error`` exits) when ``seeds`` mixes tuning and evaluation seeds."""
    if mixed_seed_ranges(seeds):
        parser.error(f"do not mix tuning seeds ({TUNING_SEEDS.start}-{TUNING_SEEDS.stop - 1}) and evaluation seeds "
                     f"({EVALUATION_SEEDS.start}-{EVALUATION_SEEDS.stop - 1}) in one report")


def simulated_index_set(seed: int, *, work_dir: Path, reference_schedule: Path, randomize: bool, per_type: int,
                        difficulty: float, packed: bool = False,
                        recording: Recording | None = None) -> tuple[ProblemSet, Path]:
    """Simulate and index one seed's set under ``work_dir`` (both reused when already there);
    returns the problem set and its index dir. The directory name says how the set was made.

    ``recording`` (``bench.recording.Recording``) indexes a copy of the simulated set as that source
    records it, under the set's name with the recording's."""
    from index.build import run_nightly
    from rca.system import bundled_system

    context = recording is not None and recording.log_trace_context
    name = (f"seed{seed}-{'rand' if randomize else 'plain'}-x{per_type}-d{difficulty:g}{'-packed' if packed else ''}"
            f"{'-logctx' if context else ''}")
    problem_set = simulate_problem_set(work_dir / name / "data", seed=seed, reference_schedule=reference_schedule,
                                       per_type=per_type, randomize=randomize, difficulty=difficulty, packed=packed,
                                       log_trace_context=context)
    if recording is not None:
        name = f"{name}-{recording.name}"
        problem_set = ProblemSet(recorded_copy(problem_set.data_dir, work_dir / name / "data", recording=recording))
    index_dir = work_dir / name / "index"
    # The simulated world is HipsterShop, whatever system the settings describe.
    run_nightly(data_dir=problem_set.data_dir, index_dir=index_dir, naming=bundled_system().trace, workers=1)
    return problem_set, index_dir


@dataclass(frozen=True)
class TuningSet:
    """One tuning seed's simulated set, ready to diagnose: its ground truth by uuid and settings aimed at its index."""

    seed: int
    problem_set: ProblemSet
    truth: dict[str, dict[str, Any]]
    settings: Settings


def tuning_sets(seeds: Sequence[int], *, settings: Settings, work_dir: Path, reference_schedule: Path,
                randomize: bool, per_type: int, difficulty: float, packed: bool = False) -> Iterator[TuningSet]:
    """Simulate and index each seed (reused when already there) and yield it with its truth.

    For the probes that read the ground truth to pick or judge cases: tuning seeds only.
    """
    outside = [seed for seed in seeds if seed not in TUNING_SEEDS]
    if outside:
        raise ValueError(f"tuning seeds only ({TUNING_SEEDS.start}-{TUNING_SEEDS.stop - 1}); got {outside}")
    for seed in seeds:
        problem_set, index_dir = simulated_index_set(seed, work_dir=work_dir, reference_schedule=reference_schedule,
                                                     randomize=randomize, per_type=per_type, difficulty=difficulty,
                                                     packed=packed)
        truth = {row["uuid"]: row for row in read_jsonl(problem_set.truth_file)}
        yield TuningSet(seed=seed, problem_set=problem_set, truth=truth,
                        settings=aimed_settings(settings, problem_set, index_dir=index_dir))


def aimed_settings(settings: Settings, problem_set: ProblemSet, *, index_dir: Path) -> Settings:
    """``settings`` with their paths on one simulated set: its index, its case file and its data."""
    return settings.model_copy(update={"paths": settings.paths.model_copy(update={
        "index_dir": index_dir, "input_file": problem_set.input_file, "data_dir": problem_set.data_dir})})


def add_seed_set_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """The options that say which seed sets an evaluation script simulates and indexes (``simulated_index_set``)."""
    parser.add_argument("--simulate-seed", type=int, action="append", required=required, default=None if required else [],
                        help="simulate (and index) a set with this seed; repeatable")
    parser.add_argument("--randomize", action="store_true", help="domain-randomised simulation (simulate --randomize)")
    parser.add_argument("--per-type", type=int, default=1, help="faults of every type per simulated seed")
    parser.add_argument("--difficulty", type=float, default=1.0)


def seed_index_sets(args: argparse.Namespace, *, packed: bool = False,
                    recording: Recording | None = None) -> Iterator[tuple[int, ProblemSet, Path]]:
    """Each ``--simulate-seed``'s set simulated and indexed (``simulated_index_set``) as the options of
    ``add_seed_set_arguments`` say, under ``--work-dir``: (seed, problem set, index dir), one seed at a time."""
    for seed in args.simulate_seed:
        problem_set, index_dir = simulated_index_set(seed, work_dir=args.work_dir, reference_schedule=REFERENCE_SCHEDULE,
                                                     randomize=args.randomize, per_type=args.per_type,
                                                     difficulty=args.difficulty, packed=packed, recording=recording)
        yield seed, problem_set, index_dir


def seed_report_name(kind: str, args: argparse.Namespace) -> str:
    """The file stem of a ``kind`` report over the seed sets of ``add_seed_set_arguments``' options."""
    return f"{kind}-{'-'.join(map(str, args.simulate_seed))}-{'rand' if args.randomize else 'plain'}-x{args.per_type}"


def seeded_truth_rows(problem_set: ProblemSet, *, seed: int) -> list[str]:
    """The set's ground-truth lines, each uuid suffixed ``@seed``: one real fault replayed under several
    seeds keeps its uuid, and the seed makes it unique in a pooled report."""
    return [json.dumps({**row, "uuid": f"{row['uuid']}@{seed}"}) for row in read_jsonl(problem_set.truth_file)]


def rules_answers(settings: Settings, *, seed: int, rules: RuleVersion) -> list[str]:
    """``rules_answer_lines`` of one simulated seed's set, the uuids suffixed ``@seed``."""
    return rules_answer_lines(settings, rules=rules, uuid_suffix=f"@{seed}")


def rules_answer_lines(settings: Settings, *, rules: RuleVersion, uuid_suffix: str = "") -> list[str]:
    """The rules' answer (index top-1 + its best SOP fit, no model) to every case of the settings' input
    file, as submission lines: one a case, as a submission must have. A window where nothing moved is
    answered so (``no_anomaly_answer``); ``uuid_suffix`` is appended to each uuid."""
    from diagnose.answer import no_anomaly_answer
    from diagnose.cases import load_cases
    from diagnose.pipeline import rules_only_answer
    from diagnose.service import Diagnoser
    from rca.errors import NoCandidates

    lines: list[str] = []
    with Diagnoser.from_settings(settings) as diagnoser:
        for case in load_cases(settings.paths.input_file):
            try:
                prepared = diagnoser.prepare(case)
            except NoCandidates as exc:
                answer = no_anomaly_answer(uuid=case.uuid, start=case.start, why=str(exc), rules=rules)
            else:
                answer = rules_only_answer(prepared, knowledge=diagnoser.knowledge, rules=rules)
            line = answer.to_submission(rules=rules)
            lines.append(json.dumps({**line, "uuid": f"{line['uuid']}{uuid_suffix}"}, ensure_ascii=False))
    return lines


def add_tuning_set_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say which tuning seed sets a probe runs on (``tuning_sets_from_args``)."""
    parser.add_argument("--simulate-seed", type=int, action="append", default=[])
    parser.add_argument("--randomize", action="store_true", help="domain-randomised simulation (simulate --randomize)")
    parser.add_argument("--per-type", type=int, default=2)
    parser.add_argument("--difficulty", type=float, default=1.0)
    parser.add_argument("--packed", action="store_true", help=PACKED_HELP)
    parser.add_argument("--work-dir", type=Path, default=Path("work/eval-index"))
    parser.add_argument("--config", type=Path, default=None, help="TOML config (its [index], [diagnose], [llm] apply)")


def tuning_sets_from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[TuningSet]:
    """``tuning_sets`` for the options of ``add_tuning_set_arguments``; a non-tuning seed is a usage error."""
    if not args.simulate_seed:
        parser.error("give at least one --simulate-seed")
    try:
        return list(tuning_sets(args.simulate_seed, settings=load_settings(config_path=args.config),
                                work_dir=args.work_dir, reference_schedule=REFERENCE_SCHEDULE,
                                randomize=args.randomize, per_type=args.per_type, difficulty=args.difficulty,
                                packed=args.packed))
    except ValueError as exc:
        parser.error(str(exc))


def discard_earlier_answers(result_file: Path, *, runs_dir: Path) -> None:
    """Remove an earlier run's answer file and its run records before a measured run.

    The diagnose stage resumes an answer file, so answers and records of an earlier code or model
    would pass for this run's (scores and seconds alike). A benchmark's ``--resume`` skips this.
    """
    if result_file.exists():
        log.warning("starting the diagnosis afresh: removing %s and its run records (--resume keeps them)", result_file)
        result_file.unlink()
        shutil.rmtree(runs_dir / result_file.stem, ignore_errors=True)


def run_full_path(settings: Settings, problem_set: ProblemSet, *, index_dir: Path, result_file: Path, workers: int = 1) -> PathResult:
    """Preprocess, diagnose every case with the configured LLM, and score with the challenge rules."""
    from diagnose.cases import load_cases
    from diagnose.service import Diagnoser
    from index.build import run_nightly
    from rca.system import system_from_settings

    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    # The system the diagnoser reads the set with (Diagnoser.from_settings), for the index too.
    outcomes = run_nightly(data_dir=problem_set.data_dir, index_dir=index_dir,
                           naming=system_from_settings(settings).trace, workers=workers)
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        log.error("preprocess: %d partition(s) failed: %s", len(failed), ", ".join(f"{o.day}/{o.family}" for o in failed))
    seconds["preprocess"] = round(time.perf_counter() - t0, 1)

    t1 = time.perf_counter()
    diagnose_settings = settings.model_copy(update={"paths": settings.paths.model_copy(update={"index_dir": index_dir})})
    cases = load_cases(problem_set.input_file)
    with Diagnoser.from_settings(diagnose_settings) as diagnoser:
        diagnoser.run(cases, out=result_file)
    seconds["diagnose"] = round(time.perf_counter() - t1, 1)

    t2 = time.perf_counter()
    report = score_file(truth_file=problem_set.truth_file, result_file=result_file, settings=settings)
    seconds["judge"] = round(time.perf_counter() - t2, 1)
    costs = run_costs(settings.paths.runs_dir / result_file.stem)
    return PathResult(problem_set=problem_set, result_file=result_file, report=report, costs=costs, stage_seconds=seconds)


def print_path_result(result: PathResult, console: Console) -> None:
    from judge.render import print_challenge

    print_challenge(result.report, console)
    table = Table(title="cost per case")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in result.costs.items():
        table.add_row(key, str(value))
    for stage, secs in result.stage_seconds.items():
        table.add_row(f"{stage} wall seconds", str(secs))
    console.print(table)


def print_model_share(share: ModelShare, console: Console, *, per_case: bool = True) -> None:
    """The model against the rules alone on the same cases, and where they differ (``per_case``
    False, for an evaluation set: only how many, since its cases are not looked at one by one)."""
    table = Table(title="the model's share of the decision (same cases)")
    for column in ("answers", "final", "LA", "TA"):
        table.add_column(column, justify="left" if column == "answers" else "right")
    for name, report in (("model", share.model), ("rules only (index top-1 + best SOP fit)", share.rules_only)):
        score = report.overall
        table.add_row(name, f"{score.final:.1f}", f"{score.la:.2f}", f"{score.ta:.2f}")
    console.print(table)
    mean, low, high = share.difference
    console.print(f"model gain per case, (LA+TA)/2: {mean:+.3f} [95% CI {low:+.3f} .. {high:+.3f}], "
                  f"{len(share.differing)} case(s) differ")
    if share.by_confidence:
        console.print("the model's answers by their confidence: " + "; ".join(
            f"{level} {cases} case(s), LA {interval_cell(la)}" for level, (cases, la) in share.by_confidence.items()))
    if share.differing and per_case:
        diff = Table(title="cases where the model and the rules differ")
        for column in ("uuid", "truth type", "model", "rules", "model pts", "rules pts"):
            diff.add_column(column)
        for row in share.differing:
            diff.add_row(row["uuid"], row["fault_type"], row["model"], row["rules"],
                         f"{row['model_points']:.1f}", f"{row['rules_points']:.1f}")
        console.print(diff)


def print_score_intervals(rows: Sequence[ScoreInterval], console: Console, *, title: str) -> None:
    """The per-fault-type table with 95% intervals (bootstrap over cases) of final, LA and TA."""
    table = Table(title=title)
    for column in ("fault type", "cases", "final [95% CI]", "LA [95% CI]", "TA [95% CI]"):
        table.add_column(column, justify="left" if column == "fault type" else "right")
    for row in rows:
        table.add_row(row.group, str(row.cases), interval_cell(row.final, digits=1), interval_cell(row.la),
                      interval_cell(row.ta), style="bold" if row.group == "ALL" else None)
    console.print(table)
