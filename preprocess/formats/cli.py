"""``rca import <format> SRC... --out DIR`` for every reader of ``preprocess.formats``.

format reader -> canonical frames -> ``preprocess.dataset_writer.write_frames`` (merging into
``DIR``) -> the 2025 layout, so ``rca preprocess`` and ``diagnose`` read the import unchanged.
Exit status (docs/reliability.md): 0 everything read, 2 bad arguments or nothing readable,
3 finished with data loss (every skipped record is named on stderr, file:line and field).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import typer

from preprocess.formats import FORMATS, FormatResult, make_reader
from rca.clisupport import fail
from rca.errors import RcaError
from rca.timeutil import parse_utc

log = logging.getLogger(__name__)

DATA_LOSS = 3
SHOWN_ISSUES = 20  # issues printed one by one; the rest are counted (all are in the debug log)


def expand(sources: list[Path]) -> list[Path]:
    """Files named, and every file under a directory named (sorted); a missing path is an error."""
    files: list[Path] = []
    for source in sources:
        if source.is_dir():
            files += sorted(p for p in source.rglob("*") if p.is_file() and not p.name.startswith("."))
        elif source.is_file():
            files.append(source)
        else:
            fail(f"{source}: no such file or directory")
    if not files:
        fail(f"no input files under {', '.join(map(str, sources))}")
    return files


def report(result: FormatResult, *, fmt: str, out: Path, written: int) -> None:
    """Counts, then every issue (lost ones first), on stderr."""
    for issue in sorted(result.issues, key=lambda i: not i.lost)[:SHOWN_ISSUES]:
        typer.secho(f"  {'LOST' if issue.lost else 'note'} {issue}", err=True, fg="yellow" if issue.lost else None)
    if len(result.issues) > SHOWN_ISSUES:
        typer.echo(f"  ... and {len(result.issues) - SHOWN_ISSUES} more issue(s)", err=True)
    counts = ", ".join(f"{frame.height} {name} rows" for name, frame in result.frames().items()) or "no rows"
    typer.echo(f"{fmt}: {len(result.files)} file(s) read: {counts}; {written} dataset file(s) written under {out}",
               err=True)
    if result.lost:
        typer.echo(f"finished with data loss: {len(result.lost)} record(s) or file(s) skipped", err=True)


def run_import(fmt: str, *, sources: list[Path], out: Path, at: datetime | None = None) -> None:
    # Imported here: the writer pulls pyarrow and polars, which `rca --help` does not need.
    from preprocess.dataset_writer import write_frames

    files = expand(sources)
    try:
        result = make_reader(fmt, at=at).read(files)
        written = write_frames(out, **result.frames())
    except RcaError as exc:
        fail(str(exc))
    report(result, fmt=fmt, out=out, written=len(written))
    if result.lost:
        raise typer.Exit(DATA_LOSS)


def _command(fmt: str) -> Callable[..., None]:
    def command(
        sources: list[Path] = typer.Argument(..., help="Export files, or directories of them (gzip read as is)."),
        out: Path = typer.Option(..., "--out", help="Dataset directory to write (merged into when it exists)."),
    ) -> None:
        run_import(fmt, sources=sources, out=out)

    command.__doc__ = make_reader(fmt).description
    return command


def _prometheus(
    sources: list[Path] = typer.Argument(..., help="query_range / query JSON, or text / OpenMetrics expositions."),
    out: Path = typer.Option(..., "--out", help="Dataset directory to write (merged into when it exists)."),
    at: str = typer.Option(None, "--at", help="UTC time of exposition samples that carry no timestamp."),
) -> None:
    """Prometheus /api/v1/query_range JSON, or a text / OpenMetrics exposition."""
    when = None
    if at is not None:
        try:
            when = parse_utc(at)
        except ValueError as exc:
            fail(f"--at {at!r}: {exc}")
    run_import("prometheus", sources=sources, out=out, at=when)


def register(app: typer.Typer) -> None:
    """Add one ``rca import <format>`` command per registered reader to ``app``."""
    for fmt in FORMATS:
        app.command(fmt)(_prometheus if fmt == "prometheus" else _command(fmt))
