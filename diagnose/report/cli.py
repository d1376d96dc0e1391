"""``rca report``: case pages from existing run records, without running the model again.

    rca report case --run-record runs/adhoc/<uuid>.json [--index-dir I] [--out page.html] [--screenshot page.png]
    rca report batch --runs-dir runs/result [--index-dir I] --out-dir reports/

The run record holds the decision, the prompt and the replies; the index holds the series,
edges and log counts drawn for the window. ``diagnose --report`` / ``--report-dir`` render
the same pages right after diagnosing.
"""
from __future__ import annotations

from pathlib import Path

import typer

from diagnose.record import RecordError, RunRecord
from index.store import IndexStoreError
from rca.clisupport import build_settings, fail
from rca.system import SystemSpecError, system_from_settings

app = typer.Typer(help="Render case reports (self-contained HTML) from run records.", add_completion=False,
                  no_args_is_help=True)


@app.command("case")
def case_command(
    ctx: typer.Context,
    run_record: Path = typer.Option(..., "--run-record", "-r", help="A run record (runs/<batch>/<uuid>.json)."),
    index_dir: Path | None = typer.Option(None, "--index-dir", help="Evidence index (config paths.index_dir)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="HTML page to write (default: next to the record)."),
    screenshot: Path | None = typer.Option(None, "--screenshot", help="Also write a PNG of the page (headless Chromium)."),
) -> None:
    """One case's page from its run record."""
    from diagnose.report.case import report_scorer, write_case_report

    settings = build_settings(ctx, {"paths": {"index_dir": index_dir}})
    try:
        record = RunRecord.load(run_record)
        page = write_case_report(record, scorer=report_scorer(settings), out=out or run_record.with_suffix(".html"),
                                 system=system_from_settings(settings))
    except (RecordError, IndexStoreError, SystemSpecError) as exc:
        fail(str(exc))
    typer.echo(str(page))
    if screenshot is not None:
        _screenshot(page, screenshot)


@app.command("batch")
def batch_command(
    ctx: typer.Context,
    runs_dir: Path = typer.Option(..., "--runs-dir", help="Directory of run records (runs/<batch>/)."),
    out_dir: Path = typer.Option(..., "--out-dir", "-o", help="Directory for the pages and index.html."),
    index_dir: Path | None = typer.Option(None, "--index-dir", help="Evidence index (config paths.index_dir)."),
) -> None:
    """A page per run record in a directory, plus an index page."""
    from diagnose.report.case import report_scorer, write_batch_report

    settings = build_settings(ctx, {"paths": {"index_dir": index_dir}})
    if not runs_dir.is_dir():
        fail(f"{runs_dir}: no such directory of run records")
    try:
        records = RunRecord.load_dir(runs_dir)
        if not records:
            fail(f"{runs_dir}: no run records (*.json)")
        index = write_batch_report(records, scorer=report_scorer(settings), out_dir=out_dir,
                                   system=system_from_settings(settings))
    except (RecordError, IndexStoreError, SystemSpecError) as exc:
        fail(str(exc))
    typer.echo(str(index))


def _screenshot(page: Path, out: Path) -> None:
    from diagnose.report.browser import BrowserError, screenshot

    try:
        typer.echo(str(screenshot(page, out=out, height=2400)))
    except BrowserError as exc:
        fail(str(exc))
