"""``rca``: the umbrella command. Each package owns its sub-command in its ``cli`` module."""
from __future__ import annotations

import typer

from rca.clisupport import root_callback

app = typer.Typer(
    name="rca",
    help="Root-cause analysis for microservice incidents (2025 CCF AIOps Challenge layout).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.callback()(root_callback)


def _register() -> None:
    # Imported here, not at module import, so `rca --help` stays cheap and a broken
    # optional piece names itself instead of breaking every command.
    from app.demo import demo
    from bench.cli import app as bench_app
    from diagnose.cli import rca_diagnose
    from diagnose.report.cli import app as report_app
    from index.cli import app as preprocess_app
    from judge.cli import app as judge_app
    from judge.server.cli import submit_command
    from knowledge.cli import app as kb_app
    from simulate.cli import app as simulate_app

    app.add_typer(simulate_app, name="simulate")
    app.add_typer(preprocess_app, name="preprocess")
    app.add_typer(kb_app, name="kb")
    app.add_typer(judge_app, name="judge")
    app.add_typer(bench_app, name="bench")
    app.command("diagnose")(rca_diagnose)
    app.add_typer(report_app, name="report")
    app.command("demo")(demo)
    app.command("submit")(submit_command)


def main() -> None:
    _register()
    app()


if __name__ == "__main__":
    main()
