"""``rca bench``: problems, run, report, calibrate-detect."""
from __future__ import annotations

import logging
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from rca.clisupport import build_settings, fail
from rca.errors import InputError

log = logging.getLogger(__name__)
app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Evaluate RCA agents on problems built from a dataset (AIOpsLab-style).")


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


@app.command("problems")
def problems_command(
    ctx: typer.Context,
    dataset: Path = typer.Option(..., "--dataset", help="Dataset directory (input.json, groundtruth.jsonl[, nofault.jsonl])."),
    tasks: str | None = typer.Option(None, "--tasks", help="Comma-separated tasks (default: all)."),
) -> None:
    """List the problems (stable ids <case>-<task>) a dataset gives."""
    build_settings(ctx)
    from bench.problems import load_dataset
    from bench.tasks import TASKS, build_problems

    try:
        truths = load_dataset(dataset)
        problems = build_problems(truths, tasks=_split(tasks) or list(TASKS))
    except (InputError, ValueError) as exc:
        fail(str(exc))
    table = Table(title=f"{len(problems)} problems from {dataset}")
    for column in ("id", "task", "window (UTC)", "solution"):
        table.add_column(column, no_wrap=column != "solution")
    for p in problems:
        truth = p.solution
        solution = f"{truth.fault_type} on {', '.join(truth.truth.instance)}" if truth.truth else "no fault"
        table.add_row(p.id, p.task, f"{p.case.start:%m-%d %H:%M}..{p.case.end:%H:%M}", solution)
    Console().print(table)


@app.command("run")
def run_command(
    ctx: typer.Context,
    dataset: Path | None = typer.Option(None, "--dataset", help="Dataset directory (with --quick: simulated under OUT)."),
    out: Path = typer.Option(..., "--out", help="Results directory (results.sqlite, index/, runs/, report/)."),
    tasks: str | None = typer.Option(None, "--tasks", help="Comma-separated: detection,localisation,analysis,mitigation."),
    agents: str | None = typer.Option(None, "--agents", help="Comma-separated, of: chance,index-top1,index-sop,diagnoser,react,diagnoser-react,diagnoser-team (default: the first five)."),
    agent: list[str] = typer.Option([], "--agent", help="An external agent class, package.module:Class, with "
                                    "AIOpsLab's contract (async get_action(state) -> str); repeatable; runs beside --agents."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Step limit per session (default 8; quick 6)."),
    repeat: int = typer.Option(1, "--repeat", help="Run every session K times (results average)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the chance agent and the simulated cloud."),
    quick: bool = typer.Option(False, "--quick", help="A small simulated problem set covering every task."),
    judge_trajectories: bool = typer.Option(False, "--judge-trajectories", help="LLM-as-judge score of each trajectory."),
    backend: str | None = typer.Option(None, "--backend", help="LLM backend: embedded | openai."),
    model: str | None = typer.Option(None, "--model", help="Embedded model name (qwen2.5-coder-1.5b/0.5b)."),
) -> None:
    """Run every (problem, agent, repeat) session not stored yet; resumable."""
    settings = build_settings(ctx, overrides={"llm": {"backend": backend, "embedded_model": model}})
    from bench.run import DEFAULT_AGENTS, QUICK, TASKS, RunOptions, quick_dataset, run_benchmark
    from bench.summary import write_report

    if dataset is None and not quick:
        fail("give --dataset D (or --quick)")
    try:
        data = quick_dataset(out) if quick and dataset is None else dataset
        assert data is not None
        options = RunOptions(dataset=data, out=out, tasks=_split(tasks) or list(TASKS),
                             agents=(_split(agents) or list(DEFAULT_AGENTS)) + agent,
                             max_steps=max_steps or (QUICK["max_steps"] if quick else 8), repeat=repeat, seed=seed,
                             judge_trajectories=judge_trajectories)
        store = run_benchmark(settings, options)
        md, _ = write_report(out)
    except (InputError, FileNotFoundError) as exc:
        fail(str(exc))
    typer.echo(md.read_text(encoding="utf-8").split("### Cost per session")[0])
    log.info("results in %s; report in %s", store, md.parent)


@app.command("report")
def report_command(ctx: typer.Context, results: Path = typer.Argument(..., help="Results directory of `rca bench run`.")) -> None:
    """Write <R>/report/report.md and report.html with the tables and figures."""
    build_settings(ctx)
    from bench.summary import write_report

    try:
        md, page = write_report(results)
    except FileNotFoundError as exc:
        fail(str(exc))
    typer.echo(md.read_text(encoding="utf-8"))
    log.info("wrote %s and %s", md, page)


@app.command("calibrate-detect")
def calibrate_command(
    ctx: typer.Context,
    dataset: list[Path] = typer.Option(..., "--dataset", help="Tuning dataset(s) with no-fault windows (repeatable)."),
    work: Path = typer.Option(..., "--work", help="Where the tuning indexes go."),
) -> None:
    """Calibrate [diagnose] detect_floor: the evidence score separating fault from no-fault windows."""
    settings = build_settings(ctx)
    from bench.calibrate import calibrate_floor, window_scores
    from bench.problems import load_dataset
    from bench.run import prepare_index
    from diagnose.sources import IndexEvidence
    from index.params import IndexParams
    from rca.system import system_from_settings

    system = system_from_settings(settings)
    params = IndexParams.from_settings(settings.index, system=system)
    scored = []
    try:
        for k, data in enumerate(dataset):
            tuned = prepare_index(settings, dataset=data, out=work / f"tune{k}")
            evidence = IndexEvidence(tuned.paths.index_dir, params=params)
            scored += window_scores(load_dataset(data), evidence=evidence, system=system)
        result = calibrate_floor(scored)
    except (InputError, ValueError) as exc:
        fail(str(exc))
    typer.echo(f"fault windows:    {', '.join(f'{s:.2f}' for s in result.fault_scores)}")
    typer.echo(f"no-fault windows: {', '.join(f'{s:.2f}' for s in result.quiet_scores)}")
    typer.echo(f"detect_floor = {result.floor}  (balanced accuracy {result.balanced_accuracy})")
