import json
from pathlib import Path

from typer.testing import CliRunner

from app.cli import _register, app

_register()
runner = CliRunner()


def _input(tmp_path: Path) -> Path:
    path = tmp_path / "input.json"
    path.write_text(json.dumps([{"uuid": "abc-1", "Anomaly Description": "A fault occurred from 2025-06-05T16:10:02Z to 2025-06-05T16:31:02Z. Please identify the root cause."}]))
    return path


def test_unknown_uuid_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["diagnose", "--uuid", "nope-9", "--input", str(_input(tmp_path)), "--index-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "unknown uuid nope-9" in result.output


def test_missing_index_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["diagnose", "--uuid", "abc-1", "--input", str(_input(tmp_path)), "--index-dir", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert "does not exist" in result.output and "rca preprocess" in result.output


def test_needs_uuid_or_all(tmp_path: Path) -> None:
    result = runner.invoke(app, ["diagnose", "--input", str(_input(tmp_path))])
    assert result.exit_code == 2 and "--uuid" in result.output


# An unreachable endpoint is tested where a case can reach the model: with an index that holds
# candidates (tests/test_e2e_embedded.py::test_unreachable_endpoint_exits_cleanly). Here, with an
# empty index, the command would stop at 'no candidates' before any model call.
