"""Help texts reach the terminal as written: a setting's section in brackets is text, not rich markup."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from app.cli import app

runner = CliRunner()


@pytest.mark.parametrize(("argv", "written"), [
    (["system", "show", "--help"], "(default: [system] file, else the"),
    (["import", "sources", "--help"], "Pull every server of the config's [sources]"),
    (["diagnose", "--help"], "[sources]: where"),
    (["judge", "rca", "--help"], "[challenge] rules"),
])
def test_a_bracketed_setting_in_a_help_text_is_shown(argv: list[str], written: str) -> None:
    result = runner.invoke(app, argv, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert written in " ".join(result.output.replace("│", " ").split())
