"""``rca``: the umbrella command. Each package owns its sub-command in its ``cli`` module.

Sub-commands are imported only when one is run: ``rca --help`` lists them from the table
below without importing polars, ruptures or chromadb (3.5 s of imports before), and a
broken optional piece names itself instead of breaking every command.

``rca`` is the one command; the ``diagnose`` and ``judge`` console scripts are aliases of
``rca diagnose`` and ``rca judge qa`` (``ALIASES``) that take the same options, the root
ones (``--config``, ``-v``, ``-q``) included, wherever they are written.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click
import typer
from typer.core import TyperGroup

from rca.clisupport import root_callback


@dataclass(frozen=True)
class LazyCommand:
    module: str
    attribute: str  # a Typer app (a group of sub-commands) or a single command function
    help: str


LAZY_COMMANDS: dict[str, LazyCommand] = {
    "simulate": LazyCommand("simulate.cli", "app", "Simulate telemetry in the release layout, with faults and truth."),
    "import": LazyCommand("preprocess.importers", "app", "Import telemetry from other formats (nezha, ...) into the canonical layout."),
    "system": LazyCommand("preprocess.system_cli", "app", "The system description: infer one from data, or show one."),
    "preprocess": LazyCommand("index.cli", "app", "Preprocess raw telemetry into the evidence index (the nightly job)."),
    "kb": LazyCommand("knowledge.cli", "app", "SOP knowledge base: documents, validation, Chroma index, search."),
    "judge": LazyCommand("judge.cli", "app", "Score result files (challenge rules or the QA judge)."),
    "bench": LazyCommand("bench.cli", "app", "Evaluate RCA agents on problems built from a dataset."),
    "diagnose": LazyCommand("diagnose.cli", "rca_diagnose", "Diagnose cases with the LLM over indexed evidence."),
    "report": LazyCommand("diagnose.report.cli", "app", "Render case reports (self-contained HTML) from run records."),
    "demo": LazyCommand("app.demo", "demo", "Simulate, index and diagnose a few cases end to end."),
    "submit": LazyCommand("judge.server.cli", "submit_command", "Submit a result file to a judge server."),
}


def load_command(name: str) -> Any:
    """Import one sub-command and turn it into its click command."""
    spec = LAZY_COMMANDS[name]
    target = getattr(importlib.import_module(spec.module), spec.attribute)
    if isinstance(target, typer.Typer):
        command = typer.main.get_command(target)
    else:
        single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    _literal_help(command)
    return command


def _literal_help(command: Any) -> None:
    """Help texts as written: typer renders them as rich markup, which takes a setting's section
    ("default: [system] file", "with [sources]") for a style tag and drops it. Escaped once here,
    for every command and option, so no help string has to remember it."""
    from rich.markup import escape  # typer's own renderer; imported only when a sub-command loads

    for attribute in ("help", "short_help", "epilog"):
        text = getattr(command, attribute, None)
        if isinstance(text, str):
            setattr(command, attribute, escape(text))
    for param in getattr(command, "params", []):
        if isinstance(getattr(param, "help", None), str):
            param.help = escape(param.help)
    for sub in getattr(command, "commands", {}).values():
        _literal_help(sub)


class _LazyGroup(TyperGroup):
    """Lists the lazy sub-commands by their table entry; imports one only to run it."""

    # typer vendors its own click, whose Context and Command classes are private (``typer._click``):
    # they are typed ``Any`` here; the stand-in listed for help is a plain click command.
    def list_commands(self, ctx: Any) -> list[str]:
        eager = super().list_commands(ctx)
        return eager + [name for name in LAZY_COMMANDS if name not in eager]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command: Any = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in LAZY_COMMANDS:
            # A stand-in carrying the help line, for listings; resolve_command swaps in the real one.
            help_text = LAZY_COMMANDS[cmd_name].help
            command = click.Command(cmd_name, help=help_text, short_help=help_text)
        return command

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name in LAZY_COMMANDS and name not in super().list_commands(ctx):
            command = load_command(name)
        return name, command, rest


app = typer.Typer(
    name="rca",
    cls=_LazyGroup,
    help="Root-cause analysis for microservice incidents (2025 CCF AIOps Challenge layout).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.callback()(root_callback)


def _register() -> None:
    """Kept for callers that registered the sub-commands explicitly; they now load on use."""


def main() -> None:
    _register()
    app()


# Console script -> the rca sub-command it stands for.
ALIASES: dict[str, tuple[str, ...]] = {"diagnose": ("diagnose",), "judge": ("judge", "qa")}
_ROOT_FLAGS = frozenset({"-v", "-vv", "-vvv", "--verbose", "-q", "--quiet"})


def alias_args(name: str, argv: Sequence[str]) -> list[str]:
    """``rca`` arguments for the alias ``name`` called with ``argv``: the root options move in
    front of the sub-command (where ``rca`` reads them), everything else follows it."""
    root: list[str] = []
    rest: list[str] = []
    items = iter(argv)
    for arg in items:
        if arg in _ROOT_FLAGS:
            root.append(arg)
        elif arg == "--config":
            root += [arg, next(items, "")]
        elif arg.startswith("--config="):
            root.append(arg)
        else:
            rest.append(arg)
    return [*root, *ALIASES[name], *rest]


def _alias(name: str) -> Callable[[], None]:
    def run() -> None:
        app(args=alias_args(name, sys.argv[1:]), prog_name="rca")  # usage lines name the real command

    run.__doc__ = f"Console script ``{name}``: ``rca {' '.join(ALIASES[name])}``."
    return run


diagnose_main = _alias("diagnose")
judge_main = _alias("judge")


if __name__ == "__main__":
    main()
