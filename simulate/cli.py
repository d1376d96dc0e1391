"""``rca simulate``: write a seeded, fault-injecting HipsterShop + TiDB telemetry release."""
from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rca.clisupport import build_settings, fail
from simulate.schedule import ScheduleError

log = logging.getLogger(__name__)
app = typer.Typer(help="Simulate telemetry in the real release layout, with injected faults and ground truth.",
                  add_completion=False)


@app.callback(invoke_without_command=True)
def simulate_command(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", help="Output directory (day directories, input.json, groundtruth.jsonl)."),
    days: int | None = typer.Option(None, "--days", help="Write N full CST days (~24 cases a day)."),
    cases: int | None = typer.Option(None, "--cases", help="Write only the hours N cases need."),
    seed: int = typer.Option(0, "--seed", help="Random seed; same seed, same bytes."),
    scale: str = typer.Option("small", "--scale", help="small (~1.5k traces/h) or full (~real volume)."),
    difficulty: float = typer.Option(1.0, "--difficulty", help="Larger = smaller effects against more noise."),
    schedule: Path | None = typer.Option(None, "--schedule", help="Replay faults of a ground-truth JSONL file."),
    start_date: datetime = typer.Option("2025-06-06", "--start-date", formats=["%Y-%m-%d"],
                                        help="First CST day (YYYY-MM-DD)."),
    no_fault: int = typer.Option(0, "--no-fault-windows", min=0,
                                 help="Also write N fault-free windows as cases (truth in nofault.jsonl)."),
    randomize: bool = typer.Option(False, "--randomize", help="Draw each fault's and day's world from wide priors (see simulate/randomize.py)."),
    log_trace_context: bool = typer.Option(
        False, "--log-trace-context",
        help="Lines a traced service writes for a request state its trace_id / span_id, as instrumented services write them (Nezha's do; the 2025 release's do not)."),
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    build_settings(ctx)  # validates the config file even though the simulator needs no setting from it
    from simulate.simulator import NoFaultWindowError, SimulationOptions, simulate

    first_day = start_date.date()  # typer rejects anything but YYYY-MM-DD with a usage error
    if schedule is not None and not schedule.is_file():
        fail(f"--schedule {schedule}: file not found")
    try:
        # validated from the raw flags, so a bad --scale is reported like any other option
        options = SimulationOptions.model_validate(dict(
            out_dir=out, days=days, cases=cases, seed=seed, scale=scale, randomize=randomize, difficulty=difficulty,
            schedule=schedule, start_date=first_day, no_fault_windows=no_fault,
            log_trace_context=log_trace_context))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "options"
        fail(f"{where}: {first['msg']}")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=False) as progress:
        task = progress.add_task("simulate", total=None)

        def advance(label: str, total: int) -> None:
            progress.update(task, advance=1, total=total, description=f"simulated {label}")

        try:
            faults = simulate(options, on_hour=advance)
        except (ScheduleError, NoFaultWindowError) as exc:
            fail(str(exc))
    table = Table(title=f"{len(faults)} injected faults -> {out}")
    for column in ("uuid", "fault_type", "target", "start (UTC)", "end (UTC)"):
        table.add_column(column)
    for f in faults[:30]:
        target = f"{f.source}->{f.destination}" if f.source else (f.node or ",".join(f.pods) or f.service)
        table.add_row(f.uuid, f.fault_type, target, f.start.isoformat(), f.end.isoformat())
    Console().print(table)
    if len(faults) > 30:
        Console().print(f"... and {len(faults) - 30} more (see {out / 'groundtruth.jsonl'})")
