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


def test_unreachable_endpoint_is_a_clear_error(tmp_path: Path) -> None:
    # An index directory with no partitions is enough: the backend is opened first
    # only when prompts are built, so point at a closed port and expect a clean exit.
    result = runner.invoke(app, [
        "diagnose", "--all", "--input", str(_input(tmp_path)), "--index-dir", str(tmp_path),
        "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
    ], env={"RCA_LLM__MAX_RETRIES": "1", "RCA_LLM__TIMEOUT_S": "2"})
    assert result.exit_code != 0
    assert "Traceback" not in result.output
