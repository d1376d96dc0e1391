"""``rca simulate`` command line: happy path and clean failures."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import _register, app

_register()
runner = CliRunner()


def test_simulate_one_case(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "--out", str(tmp_path / "o"), "--cases", "1", "--seed", "4",
                                 "--difficulty", "1.5", "--start-date", "2025-06-10"])
    assert result.exit_code == 0, result.output
    truth = [json.loads(x) for x in (tmp_path / "o" / "groundtruth.jsonl").read_text().splitlines()]
    assert len(truth) == 1
    # The first fault follows a clean baseline hour of CST 2025-06-10 (starts 2025-06-09T16:00Z).
    assert truth[0]["start_time"].startswith("2025-06-09T17:1")
    assert (tmp_path / "o" / "2025-06-10" / "trace-parquet").is_dir()


@pytest.mark.parametrize("args, message", [
    (["--days", "1", "--cases", "1"], "not both"),
    (["--difficulty", "0"], "difficulty"),
    (["--scale", "huge"], "scale"),
    (["--start-date", "06/10/2025"], "start-date"),
    (["--schedule", "/nonexistent/gt.jsonl"], "not found"),
])
def test_bad_options_fail_cleanly(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["simulate", "--out", str(tmp_path / "o"), *args])
    assert result.exit_code != 0
    assert message in result.output


def test_bad_schedule_line_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "gt.jsonl"
    bad.write_text('{"fault_type": "cpu stress"}\n', encoding="utf-8")
    result = runner.invoke(app, ["simulate", "--out", str(tmp_path / "o"), "--schedule", str(bad)])
    assert result.exit_code != 0
    assert f"{bad}:1" in result.output


def test_every_hour_is_told_once_and_a_resumed_run_tells_the_skipped_ones(tmp_path: Path) -> None:
    from simulate.simulator import SimulationOptions, simulate

    told: list[tuple[str, int]] = []
    options = SimulationOptions(out_dir=tmp_path / "o", cases=2, seed=4)
    simulate(options, on_hour=lambda label, total: told.append((label, total)))
    hours = [label for label, _ in told]
    assert len(hours) == len(set(hours)) >= 2
    assert {total for _, total in told} == {len(hours)}
    assert all(label.startswith("2025-06-06 CST ") and label.endswith(":00") for label in hours)
    again: list[str] = []
    simulate(options, on_hour=lambda label, total: again.append(label))  # every day already written
    assert again == hours


@pytest.mark.parametrize("verbosity, level", [(-1, "ERROR"), (0, "WARNING"), (1, "INFO"), (2, "DEBUG")])
def test_logging_is_quiet_unless_asked(verbosity: int, level: str) -> None:
    import logging

    from rca.logsetup import configure_logging

    configure_logging(verbosity)
    assert logging.getLevelName(logging.getLogger().level) == level
    configure_logging(0)
