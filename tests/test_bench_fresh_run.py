"""A measured run starts afresh: the runner resumes an answer file, so an earlier run's answers and
records would otherwise pass for the new run's (issue 27's seconds, issue 25's scores)."""
from __future__ import annotations

from pathlib import Path

from bench.pipeline import discard_earlier_answers


def test_an_earlier_runs_answers_and_records_are_removed_and_nothing_else(tmp_path: Path) -> None:
    result_file, runs_dir = tmp_path / "result.jsonl", tmp_path / "runs"
    result_file.write_text('{"uuid": "a"}\n')
    (runs_dir / "result").mkdir(parents=True)
    (runs_dir / "result" / "a.json").write_text("{}")
    (runs_dir / "other").mkdir()
    (runs_dir / "other" / "b.json").write_text("{}")
    discard_earlier_answers(result_file, runs_dir=runs_dir)
    assert not result_file.exists() and not (runs_dir / "result").exists()
    assert (runs_dir / "other" / "b.json").exists()
    discard_earlier_answers(result_file, runs_dir=runs_dir)  # nothing to remove: no error
