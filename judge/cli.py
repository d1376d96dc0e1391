"""Command line of the judge package (placeholder until implemented)."""
import typer

app = typer.Typer(no_args_is_help=True)


def qa_main() -> None:
    raise SystemExit("judge: not implemented yet")
