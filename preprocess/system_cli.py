"""``rca system``: draft a system description from data, or check one.

    rca system infer --data-dir D --out system.toml [--name NAME] [--day YYYY-MM-DD ...] [--runtime SERVICE=RUNTIME ...]
                     [--system FILE]     # read the spans with FILE's [pods] and [traces] (default: [system] file, if set)
    rca system show [--file system.toml]      # what the tool reads from it (default: [system] file)
"""
from __future__ import annotations

import logging
from pathlib import Path

import typer

from rca.atomic import write_text_atomic
from rca.clisupport import build_settings, fail
from rca.errors import RcaError
from rca.system import load_system

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
        None, "--runtime", help="SERVICE=RUNTIME you know, where the data shows none (repeatable; '*=java' for "
                                "every service). JVM faults are offered only for java services."),
    system: Path | None = typer.Option(
        None, "--system", help="A system description to read the spans with: its [traces] names client spans' "
                               "peers, its [pods] groups pods (default: [system] file if set, else none: peers "
                               "from peer.service only, Kubernetes' pod names)."),
) -> None:
    """Learn services, pods, placement, call graph, storage and runtimes from telemetry; write a commented TOML."""
    from preprocess.infer_system import infer_system, render_toml, with_runtimes

    settings = build_settings(ctx, overrides={"paths": {"data_dir": data_dir}, "system": {"file": system}})
    source = settings.paths.data_dir
    if out.exists() and not force:
        fail(f"{out} exists; pass --force to overwrite it")
    try:
        # Not the bundled description when none is named: HipsterShop's trace rules are not the user's.
        given = load_system(settings.system.file) if settings.system.file is not None else None
        inferred = with_runtimes(infer_system(source, days=day or None, spec=given), given=runtime or [])
        text = render_toml(inferred, data_dir=source, name=name)
        write_text_atomic(out, text)
        spec = load_system(out)  # what we write must load: a draft that does not is a bug here
    except RcaError as exc:
        fail(str(exc))
    typer.echo(f"{out}: {len(spec.services)} services, {len(spec.stateful)} stateful, {len(inferred.pods)} pods, "
               f"{len(inferred.nodes)} nodes, {len(inferred.edges)} call edges; review it, then set [system] file")
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
