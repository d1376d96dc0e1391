"""``rca import FORMAT SRC... --out DIR``: foreign telemetry -> a dataset in the canonical layout.

Every importer is a reader of one foreign format that yields canonical frames
(``preprocess/schema.py``); ``preprocess.dataset_writer.write_frames`` writes them, merging
into what ``DIR`` already holds, so several exports of one incident land in one dataset and
the nightly job, the index and the diagnoser read it like the challenge's release.

Exit status: 0 everything read; 2 bad arguments or an unusable source; 3 finished with data
loss (files or records that could not be read are named on stderr and in the log).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import typer

from preprocess import nezha
from preprocess.dataset_writer import write_frames
from preprocess.formats.cli import register as register_formats
from preprocess.trace_sampling import sampled_traces
from rca.atomic import write_text_atomic
from rca.clisupport import fail
from rca.errors import RcaError

log = logging.getLogger(__name__)

app = typer.Typer(help="Import telemetry from other formats into the canonical dataset layout.",
                  add_completion=False, no_args_is_help=True)

DATA_LOSS = 3


@app.callback()
def formats() -> None:
    """One sub-command per source format."""


register_formats(app)  # otlp, jaeger, zipkin, prometheus, loki, ecs: preprocess/formats/cli.py


def write_cases(out: Path, *, cases: list[dict], truths: list[dict]) -> None:
    """``input.json`` and ``groundtruth.jsonl`` (2025 formats), merged by uuid with what ``out`` holds."""
    out.mkdir(parents=True, exist_ok=True)
    input_path, truth_path = out / "input.json", out / "groundtruth.jsonl"
    old_cases = json.loads(input_path.read_text(encoding="utf-8")) if input_path.exists() else []
    old_truths = ([json.loads(line) for line in truth_path.read_text(encoding="utf-8").splitlines() if line.strip()]
                  if truth_path.exists() else [])
    merged_cases = {c["uuid"]: c for c in [*old_cases, *cases]}
    merged_truths = {t["uuid"]: t for t in [*old_truths, *truths]}
    order = sorted(merged_truths, key=lambda u: (merged_truths[u]["start_time"], u))
    order += [u for u in merged_cases if u not in merged_truths]
    write_text_atomic(input_path, json.dumps([merged_cases[u] for u in order if u in merged_cases], indent=2) + "\n")
    write_text_atomic(truth_path, "".join(json.dumps(merged_truths[u]) + "\n" for u in order if u in merged_truths))


@app.command("nezha")
def import_nezha(
    source: Path = typer.Argument(..., help="A clone of github.com/IntelligentDDS/Nezha, or a bare git snapshot of it."),
    out: Path = typer.Option(..., "--out", help="Dataset directory to write (merged into when it exists)."),
    system: str = typer.Option("onlineboutique", "--system", help="onlineboutique or trainticket."),
    days: list[str] = typer.Option(None, "--day", help="Day to import (repeatable; default: every day of the system)."),
    without_mesh: bool = typer.Option(False, "--without-mesh",
                                      help="Leave out the service mesh's edge latency (source_50/destination_50): "
                                           "the telemetry of a system without a mesh, for ablations."),
    without_traces: bool = typer.Option(False, "--without-traces",
                                        help="Leave out the spans: the telemetry of a system without tracing "
                                             "(metrics and logs only), for ablations."),
    without_metrics: bool = typer.Option(False, "--without-metrics",
                                         help="Leave out every metric file, the mesh's included: the telemetry of "
                                              "a system with traces and logs only (an OpenTelemetry collector "
                                              "without a metrics pipeline), for ablations."),
    keep_traces: float = typer.Option(1.0, "--keep-traces", min=0.0, max=1.0,
                                      help="Keep this share of whole traces, chosen by trace id as a sampling "
                                           "tracer would (e.g. 0.2), for ablations."),
    more_traces: Path | None = typer.Option(None, "--more-traces",
                                            help="A clone or bare git snapshot of github.com/IntelligentDDS/TraStrainer: "
                                                 "its trace minutes of the same days join Nezha's (every minute of "
                                                 "its batches, not only those after an injection)."),
) -> None:
    """Nezha's fault datasets (ESEC/FSE 2023): telemetry, cases (input.json) and ground truth."""
    if system not in nezha.SYSTEMS:
        fail(f"--system {system!r}: expected one of {', '.join(nezha.SYSTEMS)}")
    try:
        src = nezha.Source(source)
        available = nezha.days_of(src, system=system)
        extra = nezha.Source(more_traces) if more_traces is not None else None
    except RcaError as exc:
        fail(str(exc))
    chosen = sorted(set(days)) if days else available
    unknown = [d for d in chosen if d not in available]
    if unknown:
        fail(f"{source}: no {nezha.SYSTEMS[system]} day {', '.join(unknown)} (it holds {', '.join(available) or 'none'})")
    lost = 0
    for number, day in enumerate(chosen, start=1):
        typer.echo(f"[{number}/{len(chosen)}] {nezha.SYSTEMS[system]} {day}: reading", err=True)
        try:
            more: list[tuple[nezha.Source, str]] = []
            if extra is not None:
                more = [(extra, folder) for folder in nezha.trastrainer_trace_folders(extra, system=system, day=day)]
                typer.echo(f"  {more_traces}: {', '.join(f for _, f in more) or 'no batch of that day'}", err=True)
            read = nezha.read_day(src, day=day, mesh=not without_mesh, traces=not without_traces,
                                  metrics=not without_metrics, more_traces=more)
            spans = sampled_traces(read.spans, share=keep_traces)
        except RcaError as exc:
            fail(str(exc))
        write_frames(out, spans=spans, logs=read.logs, apm=read.apm, infra=read.infra)
        cases, truths = nezha.cases_of(read, system=system, java_services=nezha.java_services(read, system=system))
        write_cases(out, cases=cases, truths=truths)
        absent = [i for i in read.issues if not i.lost]
        bad = [i for i in read.issues if i.lost]
        lost += len(bad)
        for issue in bad:
            typer.secho(f"  unreadable {issue.path}: {issue.reason}", err=True, fg="yellow")
        typer.echo(f"  {len(cases)} case(s); {spans.height} spans, {read.logs.height} log lines, "
                   f"{read.infra.height + read.apm.height} metric rows; {len(absent)} file(s) absent from the "
                   f"snapshot, {len(bad)} unreadable", err=True)
    typer.echo(f"wrote {out}", err=True)
    if lost:
        raise typer.Exit(DATA_LOSS)
