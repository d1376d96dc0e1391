"""``rca preprocess``: build or refresh the evidence index from raw telemetry (the nightly job).

    rca preprocess --data-dir D --index-dir I (--date YYYY-MM-DD ... | --all) [--workers N] [--threads N] [--force] [--wait]
                   [--engine local|ray] [--ray-address ADDRESS]

``--engine ray`` builds each partition as a Ray task (``index/engine_ray.py``): on the
cluster at ``--ray-address``, or on a local cluster of ``--workers`` CPUs started for the run.
The local engine with one worker builds ``--threads`` partitions at once (``[preprocess] threads``).

Shows a progress bar and a summary table naming every unreadable file. Exit status:

- 0: every partition is complete;
- 1: at least one partition failed (the others are still written);
- 2: bad arguments;
- 3: finished with data loss: every partition is written, but some raw files could not be
  read and their rows are absent (named in the log, the summary and the manifest; a rerun
  reports them again until the files are replaced);
- 4: another run holds the index's writer lock (``--wait`` waits for it instead).
"""
from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from index.build import PartitionOutcome, run_nightly
from index.engines import make_engine
from index.lock import IndexBusyError
from index.params import IndexParams
from index.store import PARTITION_FAMILIES
from preprocess import layout
from preprocess.sniff import layout_hint
from rca.clisupport import build_settings, fail
from rca.errors import InputError, RcaError
from rca.system import system_from_settings

app = typer.Typer(help="Preprocess raw telemetry into the evidence index (incremental, resumable).",
                  add_completion=False)


@app.callback(invoke_without_command=True)
def preprocess(
    ctx: typer.Context,
    data_dir: Path = typer.Option(None, "--data-dir", help="Raw data root holding YYYY-MM-DD day directories."),
    index_dir: Path = typer.Option(None, "--index-dir", help="Evidence index directory (created if absent)."),
    dates: list[str] = typer.Option(None, "--date", help="CST day to build (repeatable)."),
    all_days: bool = typer.Option(False, "--all", help="Every day directory under --data-dir."),
    workers: int = typer.Option(None, "--workers", min=1, help="Processes for metric/trace partitions."),
    threads: int = typer.Option(None, "--threads", min=1,
                                help="Partitions built at once in this process, with one worker ([preprocess] threads)."),
    force: bool = typer.Option(False, "--force", help="Rebuild partitions even when inputs are unchanged."),
    wait: bool = typer.Option(False, "--wait", help="Wait for another run's index lock instead of refusing."),
    engine: str = typer.Option(None, "--engine", help="Where partitions are built: local or ray."),
    ray_address: str = typer.Option(None, "--ray-address",
                                    help="Ray cluster to join (with --engine ray); none: a local cluster."),
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    settings = build_settings(ctx, {"paths": {"data_dir": data_dir, "index_dir": index_dir},
                                    "preprocess": {"workers": workers, "threads": threads, "engine": engine,
                                                   "ray_address": ray_address}})
    if bool(dates) == all_days:
        fail("give either --date YYYY-MM-DD (repeatable) or --all")
    data_root, index_root = settings.paths.data_dir, settings.paths.index_dir
    if not data_root.is_dir():
        fail(f"{data_root}: data directory not found")
    available = layout.list_days(data_root)
    days = available if all_days else sorted(set(dates))
    try:
        params = IndexParams.from_settings(settings.index, system=system_from_settings(settings))
    except RcaError as exc:
        fail(str(exc))
    if not days:
        fail(f"{data_root}: no YYYY-MM-DD day directories: {layout_hint(data_root)}")
    unknown = [day for day in days if day not in available]
    if unknown:
        fail(f"{data_root}: no day directory for {', '.join(unknown)}")
    try:
        partition_engine = make_engine(settings.preprocess.engine, workers=settings.preprocess.workers,
                                       threads=settings.preprocess.threads,
                                       ray_address=settings.preprocess.ray_address)
    except InputError as exc:
        fail(str(exc))

    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task("preprocess", total=len(days) * len(PARTITION_FAMILIES))

        def advance(description: str) -> None:
            progress.update(task, advance=1, description=description)

        try:
            started = time.monotonic()
            # The engine carries the workers and threads: run_nightly's own are for an engine it makes.
            outcomes = run_nightly(data_dir=data_root, index_dir=index_root, naming=params.system.trace, days=days,
                                   force=force, detector_params=params.detector_params(),
                                   wait_for_lock=wait, on_partition_done=advance, engine=partition_engine)
        except IndexBusyError as exc:
            fail(str(exc), code=EXIT_BUSY)
        except RcaError as exc:
            fail(str(exc))
    Console().print(_summary(outcomes, wall_seconds=time.monotonic() - started))
    raise typer.Exit(exit_status(outcomes))


EXIT_FAILED = 1
EXIT_DATA_LOSS = 3
EXIT_BUSY = 4


def exit_status(outcomes: list[PartitionOutcome]) -> int:
    """0 complete, 1 a partition failed, 3 finished with data loss (see the module docstring)."""
    if any(o.status == "failed" for o in outcomes):
        return EXIT_FAILED
    lost = [(o, f) for o in outcomes for f in o.lost_files]
    if lost:
        # One line for the whole run, after the table: what was lost and where it is recorded.
        typer.secho(f"finished with data loss: {len(lost)} unreadable file(s) left out of the index: "
                    + "; ".join(f"{o.day} {o.family} {f.name()}" for o, f in lost[:5])
                    + (f"; ... and {len(lost) - 5} more" if len(lost) > 5 else ""), err=True, fg="yellow")
        return EXIT_DATA_LOSS
    return 0


def _summary(outcomes: list[PartitionOutcome], *, wall_seconds: float) -> Table:
    # A partition's seconds are its own build's; partitions built at once overlap, so the
    # run's wall time is told apart.
    table = Table(title="preprocess summary", caption=f"{wall_seconds:.1f} s in all (partitions built at once overlap)")
    for column in ("day", "family", "status", "rows", "seconds", "lost files / errors"):
        table.add_column(column, overflow="fold")
    for o in sorted(outcomes, key=lambda o: (o.day, PARTITION_FAMILIES.index(o.family))):
        rows = ", ".join(f"{k}={v}" for k, v in o.rows.items())
        if o.status == "failed":
            problems = "; ".join(o.errors)
        else:
            problems = "; ".join(f"LOST {f.name()} ({f.reason[:80]})" for f in o.lost_files)
        table.add_row(o.day, o.family, o.status + (" (data loss)" if o.data_loss else ""), rows,
                      f"{o.seconds:.1f}", problems[:400])
    return table
