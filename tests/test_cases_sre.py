"""Cases as an SRE has them: a window, the last N minutes, an alert file (diagnose/cases.py, diagnose/cli.py)."""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from diagnose.cases import CaseError, case_from_window, case_since, parse_duration, parse_window, read_alerts

runner = CliRunner()


def test_a_window_is_a_case_like_the_challenges() -> None:
    case = case_from_window("2025-06-22T04:18Z/2025-06-22T04:21Z")
    assert (case.start, case.end) == (datetime(2025, 6, 22, 4, 18, tzinfo=UTC), datetime(2025, 6, 22, 4, 21, tzinfo=UTC))
    assert case.uuid == "window-20250622T041800Z-20250622T042100Z"
    assert parse_window(case.description, uuid=case.uuid) == (case.start, case.end)
    assert case_from_window("2025-06-22T12:18+08:00/2025-06-22T12:21:30+08:00").end == datetime(2025, 6, 22, 4, 21, 30, tzinfo=UTC)


@pytest.mark.parametrize("text", ["2025-06-22T04:18Z", "2025-06-22T04:21Z/2025-06-22T04:18Z", "yesterday/today"])
def test_bad_windows_are_named(text: str) -> None:
    with pytest.raises(CaseError, match="--window"):
        case_from_window(text)


def test_since_counts_back_from_the_given_end() -> None:
    assert parse_duration("1h30m") == timedelta(minutes=90)
    case = case_since("15m", until=datetime(2025, 6, 22, 4, 30, 12, 999, tzinfo=UTC))
    assert case.end - case.start == timedelta(minutes=15) and case.end.microsecond == 0
    for bad in ("", "15", "0m", "fifteen minutes"):
        with pytest.raises(CaseError, match="--since"):
            parse_duration(bad)


def test_alert_file_keeps_good_alerts_and_names_bad_ones(tmp_path: Path) -> None:
    path = tmp_path / "alerts.json"
    path.write_text(json.dumps([
        {"id": "PD-1", "start": "2025-06-22T04:18:00Z", "end": "2025-06-22T04:21:00Z", "summary": "checkout p99 latency high"},
        {"id": "PD-2", "start": "2025-06-22T05:00:00Z", "summary": "no end"},
        {"id": "PD-3", "start": "2025-06-22T06:00:00", "end": "2025-06-22T06:05:00", "summary": ""},
    ]))
    alerts = read_alerts(path)
    assert [c.uuid for c in alerts.cases] == ["PD-1", "PD-3"]
    assert alerts.cases[0].description.startswith("checkout p99 latency high")
    assert alerts.cases[1].start == datetime(2025, 6, 22, 6, tzinfo=UTC)  # naive = UTC
    assert "missing field 'end'" in alerts.bad["PD-2"] and str(path) in alerts.bad["PD-2"]
    path.write_text('{"id": 1}')
    with pytest.raises(CaseError, match="JSON list"):
        read_alerts(path)


def test_cli_takes_one_case_source(tmp_path: Path) -> None:
    result = runner.invoke(app, ["diagnose", "--window", "2025-06-22T04:18Z/2025-06-22T04:21Z", "--since", "15m"])
    assert result.exit_code == 2 and "give one of --window, --since" in result.output
    result = runner.invoke(app, ["diagnose", "--window", "2025-06-22T04:18Z", "--index-dir", str(tmp_path)])
    assert result.exit_code == 2 and "START/END" in result.output
    # A good window reaches the index (here: none), like a case of input.json would.
    result = runner.invoke(app, ["diagnose", "--window", "2025-06-22T04:18Z/2025-06-22T04:21Z",
                                 "--index-dir", str(tmp_path / "none"), "--input", str(tmp_path / "absent.json")])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_every_alert_of_the_file_is_left_out_of_a_chosen_alerts_baseline(tmp_path: Path, monkeypatch) -> None:
    """--alerts F --uuid PD-3: the other alerts of F are incidents too, left out of PD-3's baseline as
    an input file's other cases are (before, only the chosen alerts' windows were)."""
    import diagnose.cli

    path = tmp_path / "alerts.json"
    path.write_text(json.dumps([
        {"id": "PD-1", "start": "2025-06-22T04:18:00Z", "end": "2025-06-22T04:21:00Z", "summary": "checkout slow"},
        {"id": "PD-3", "start": "2025-06-22T04:40:00Z", "end": "2025-06-22T04:45:00Z", "summary": "cart errors"},
    ]))
    seen = {}

    def fake_run(settings, cases, *, case_windows=None, **_):
        seen["cases"], seen["windows"] = [c.uuid for c in cases], case_windows
        return [], {}

    monkeypatch.setattr(diagnose.cli, "run", fake_run)
    result = runner.invoke(app, ["diagnose", "--alerts", str(path), "--uuid", "PD-3", "--index-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert seen["cases"] == ["PD-3"]
    assert seen["windows"] == [(datetime(2025, 6, 22, 4, 18, tzinfo=UTC), datetime(2025, 6, 22, 4, 21, tzinfo=UTC)),
                               (datetime(2025, 6, 22, 4, 40, tzinfo=UTC), datetime(2025, 6, 22, 4, 45, tzinfo=UTC))]
