"""``rca demo``: the whole product on embedded defaults, offline, in one command.

Simulates a few fault-injected hours in the real layout, builds the evidence index,
diagnoses every case with the embedded LLM, scores the answers with the challenge
rules and prints the tables. Reruns reuse what is already done under ``--work-dir``.
"""
from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from rca.clisupport import build_settings, fail
from rca.errors import RcaError
from rca.llm.base import LLMError


def demo(
    ctx: typer.Context,
    cases: int = typer.Option(4, "--cases", min=1, help="Simulated cases to diagnose."),
    seed: int = typer.Option(7, "--seed", help="Simulation seed."),
    work_dir: Path = typer.Option(Path("data/demo"), "--work-dir", help="Where data, index, answers and run records go."),
    model: str | None = typer.Option(None, "--model", help="Embedded model: qwen2.5-coder-1.5b (default) or qwen2.5-coder-0.5b."),
) -> None:
    """Simulate -> preprocess -> diagnose (embedded LLM) -> judge, on a handful of cases."""
    from bench.pipeline import print_path_result, run_full_path, simulate_problem_set

    settings = build_settings(ctx, overrides={
        "paths": {"runs_dir": work_dir / "runs", "index_dir": work_dir / "index"},
        "llm": {"embedded_model": model},
    })
    console = Console()
    console.print(f"[bold]1/4 simulate[/] {cases} cases -> {work_dir / 'data'} (only the hours they need: the "
                  "nightly job will warn that the day's other hours are absent)")
    problem_set = simulate_problem_set(work_dir / "data", cases=cases, seed=seed)
    console.print("[bold]2-4/4 preprocess -> diagnose -> judge[/] "
                  f"(LLM: {settings.llm.backend} {settings.llm.embedded_model if settings.llm.backend == 'embedded' else settings.llm.llm_model})")
    try:
        result = run_full_path(settings, problem_set, index_dir=work_dir / "index", result_file=work_dir / "result.jsonl")
    except LLMError as exc:
        fail(f"LLM backend failed: {exc}")
    except RcaError as exc:
        fail(str(exc))
    print_path_result(result, console)
    console.print(f"answers: {result.result_file}   run records: {settings.paths.runs_dir / result.result_file.stem}")
