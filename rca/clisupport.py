"""Helpers every sub-command uses to build Settings and report errors cleanly."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import typer

from rca.logsetup import configure_logging
from rca.settings import Settings, SettingsError, load_settings

log = logging.getLogger(__name__)


@dataclass
class CliState:
    config_path: Path | None = None
    verbosity: int = 0


def state(ctx: typer.Context) -> CliState:
    root = ctx.find_root()
    if not isinstance(root.obj, CliState):
        root.obj = CliState()
    return root.obj


def build_settings(ctx: typer.Context, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> Settings:
    """The one place where a command turns file, environment and flags into Settings."""
    st = state(ctx)
    try:
        return load_settings(config_path=st.config_path, overrides=overrides)
    except SettingsError as exc:
        fail(str(exc))


def fail(message: str, code: int = 2) -> NoReturn:
    """Print a user-facing error once (on stderr) and exit non-zero without a traceback."""
    log.debug("exiting with status %d: %s", code, message)  # the user sees the line below, not this too
    typer.secho(f"error: {message}", err=True, fg="red")
    raise typer.Exit(code)


def root_callback(
    ctx: typer.Context,
    config: Path | None = typer.Option(None, "--config", help="TOML config file (default: config/config.toml if present)."),
    verbose: int = typer.Option(0, "--verbose", "-v", count=True,
                                help="Log what each step does (-vv: debugging detail). Default: warnings only."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Errors only."),
) -> None:
    st = state(ctx)
    st.config_path = config
    st.verbosity = -1 if quiet else verbose
    configure_logging(st.verbosity)
