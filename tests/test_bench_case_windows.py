"""The benchmark's diagnoser leaves the dataset's other incidents out of each baseline, as `rca diagnose` does."""
from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

import index.build
from bench.run import prepare_index
from diagnose.cases import input_case_windows
from rca.settings import load_settings


def test_prepare_index_points_at_the_datasets_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dataset = tmp_path / "data"
    dataset.mkdir()
    (dataset / "input.json").write_text(json.dumps([
        {"Anomaly Description": "The system experienced an anomaly from 2025-06-05T16:10:02Z to 2025-06-05T16:31:02Z.",
         "uuid": "a-1"},
        {"Anomaly Description": "The system experienced an anomaly from 2025-06-05T17:10:04Z to 2025-06-05T17:33:04Z.",
         "uuid": "b-2"},
    ]), encoding="utf-8")
    monkeypatch.setattr(index.build, "run_nightly", lambda **_: [])  # nothing to index here
    settings = prepare_index(load_settings(), dataset=dataset, out=tmp_path / "bench")
    assert settings.paths.input_file == dataset / "input.json"
    assert input_case_windows(settings.paths.input_file) == [
        (datetime(2025, 6, 5, 16, 10, 2, tzinfo=UTC), datetime(2025, 6, 5, 16, 31, 2, tzinfo=UTC)),
        (datetime(2025, 6, 5, 17, 10, 4, tzinfo=UTC), datetime(2025, 6, 5, 17, 33, 4, tzinfo=UTC)),
    ]
