"""``rca system``: draft a system description from data, or check one.

    rca system infer --data-dir D --out system.toml [--name NAME] [--day YYYY-MM-DD ...] [--runtime SERVICE=RUNTIME ...]
                     [--system FILE]     # read the spans with FILE's [pods] and [traces] (default: [system] file, if set)
                     [--mesh-calls URL [--mesh-since 1d] [--header 'Name: value' ...]]   # add Istio's calls from a Prometheus
    rca system show [--file system.toml]      # what the tool reads from it (default: [system] file)
"""
from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import typer

from rca.atomic import write_text_atomic
from rca.clisupport import build_settings, fail
from rca.errors import RcaError
from rca.system import load_system
from rca.timeutil import format_utc, parse_duration

log = logging.getLogger(__name__)

app = typer.Typer(help="The system description: infer one from data, or show what one says.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


@app.command("infer")
def infer_command(
    ctx: typer.Context,
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Dataset in the canonical layout (config paths.data_dir)."),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the drafted TOML (for review)."),
    name: str = typer.Option("my-system", "--name", help="The system's name in prompts."),
    day: list[str] | None = typer.Option(None, "--day", help="Learn from this day only (repeatable; default every day)."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it exists."),
    runtime: list[str] | None = typer.Option(
        None, "--runtime", help="SERVICE=RUNTIME you know (repeatable): wins over what the data shows; '*=java' "
                                "for every service it shows none for. JVM faults are offered only for java services."),
    system: Path | None = typer.Option(
        None, "--system", help="A system description to read the spans with: its [traces] names client spans' "
                               "peers, its [pods] groups pods (default: [system] file if set, else none: peers "
                               "from peer.service only, Kubernetes' pod names)."),
    mesh_calls: str | None = typer.Option(
        None, "--mesh-calls", help="A Prometheus holding Istio's istio_requests_total (http://prometheus:9090): "
                                   "the calls between mesh workloads it counted join the drafted call graph.",
        show_default=False),
    mesh_since: str = typer.Option("1d", "--mesh-since", help="With --mesh-calls: count the calls of this "
                                                               "DURATION (15m, 2h, 1d) before the dataset's newest time."),
    header: list[str] | None = typer.Option(None, "--header", help="With --mesh-calls: 'Name: value' sent with the "
                                                                   "query (repeatable, e.g. authorisation; never logged).",
                                            show_default=False),
) -> None:
    """Learn services, pods, placement, call graph, storage and runtimes from telemetry; write a commented TOML."""
    from preprocess.formats.cli import header_options
    from preprocess.infer_system import infer_system, render_toml, with_mesh_calls, with_runtimes
    from preprocess.mesh_calls import fetch_mesh_calls

    settings = build_settings(ctx, overrides={"paths": {"data_dir": data_dir}, "system": {"file": system}})
    source = settings.paths.data_dir
    if out.exists() and not force:
        fail(f"{out} exists; pass --force to overwrite it")
    if mesh_calls is None and header:
        fail("--header is for --mesh-calls URL")
    try:
        since = parse_duration(mesh_since)
    except ValueError as exc:
        fail(f"--mesh-since {exc}")
    headers = header_options(header)
    try:
        # Not the bundled description when none is named: HipsterShop's trace rules are not the user's.
        given = load_system(settings.system.file) if settings.system.file is not None else None
        inferred = with_runtimes(infer_system(source, days=day or None, spec=given), given=runtime or [])
        if mesh_calls is not None:
            # At the data's own time: a dataset of past days holds the calls of then, not of now.
            at = inferred.newest or datetime.now(UTC)
            mesh = fetch_mesh_calls(mesh_calls, since=since, at=at, headers=headers)
            inferred = with_mesh_calls(inferred, calls=mesh.calls, query=mesh.query,
                                       source=f"{mesh.url}, {format_utc(mesh.at)}")
        text = render_toml(inferred, data_dir=source, name=name)
        write_text_atomic(out, text)
        spec = load_system(out)  # what we write must load: a draft that does not is a bug here
    except RcaError as exc:
        fail(str(exc))
    typer.echo(f"{out}: {len(spec.services)} services, {len(spec.stateful)} stateful, {len(inferred.pods)} pods, "
               f"{len(inferred.nodes)} nodes, {len(inferred.edges)} call edges; review it, then set [system] file")
    if inferred.mesh_query is not None:
        typer.echo(f"{out}: {len(inferred.mesh_edges)} call edge(s) from the mesh ({inferred.mesh_source}, the "
                   f"{mesh_since} before)")
        if inferred.mesh_unknown:
            typer.secho(f"{out}: the mesh names workloads that are no service of the data, their calls not added: "
                        f"{', '.join(inferred.mesh_unknown)} (listed in [calls])", err=True, fg="yellow")
    if inferred.unreached_stateful:
        typer.secho(f"{out}: no call seen reaches {', '.join(inferred.unreached_stateful)}: add their callers to "
                    "[calls] storage, or their faults are blamed on their callers", err=True, fg="yellow")
    if not inferred.edges:
        typer.secho(f"{out}: the data shows no calls (no spans): list them in [calls] edges, or the ranker has no "
                    "call graph (docs/system.md)", err=True, fg="yellow")
    if inferred.unnamed_peers:
        tags = " and ".join(f"{len(values)} {tag} value(s)" for tag, values in inferred.unnamed_peers.items())
        typer.secho(f"{out}: client spans carry {tags} that name no peer: [traces] lists them with the line that "
                    "would name them, where one can (their calls are missing from the call graph until it does)",
                    err=True, fg="yellow")


@app.command("show")
def show_command(
    ctx: typer.Context,
    file: Path | None = typer.Option(None, "--file", help="A system description (default: [system] file, else the bundled one)."),
) -> None:
    """Load a description (errors name the file and field) and print what the prompts will say."""
    settings = build_settings(ctx, overrides={"system": {"file": file}})
    try:
        spec = load_system(settings.system.file)
    except RcaError as exc:
        fail(str(exc))
    typer.echo(f"{spec.source}: {spec.name}, {len(spec.services)} services, {len(spec.stateful)} stateful, "
               f"{len(spec.calls)} calls and {len(spec.storage_calls)} storage calls declared, "
               f"fault types possible: {len(spec.possible_fault_types())}")
    typer.echo(spec.prompt_paragraph())
