"""scripts/evidence_snapshot.py shows what the diagnoser is shown: each case queried as the diagnoser queries it."""
from __future__ import annotations

import json
import sys
from datetime import datetime

from index.models import WindowQueryResult
from tests.script_modules import load_script

CASES = [("a-1", "2022-08-22T04:52:55Z", "2022-08-22T04:55:55Z"),
         ("b-2", "2022-08-22T05:01:13Z", "2022-08-22T05:04:13Z"),
         ("c-3", "2022-08-22T05:09:50Z", "2022-08-22T05:12:50Z")]


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_each_case_leaves_the_other_cases_windows_out_of_its_baseline(tmp_path, monkeypatch):
    # On a crowded day (Nezha injects every 4-9 minutes) the other windows are other faults: the
    # diagnoser leaves them out of a case's baseline, so the snapshot must too, or it shows another ranking.
    snapshot = load_script("evidence_snapshot")
    (tmp_path / "input.json").write_text(json.dumps([
        {"uuid": uuid, "Anomaly Description": f"The system experienced an anomaly from {start} to {end}. "
                                              "Please infer the possible cause."} for uuid, start, end in CASES]))
    asked: dict[datetime, list[tuple[datetime, datetime]]] = {}

    def query_window(index_dir, *, start, end, top_k, params, exclude_windows=()):
        asked[start] = sorted(exclude_windows)
        return WindowQueryResult(start=start, end=end, candidates=[])

    monkeypatch.setattr(snapshot, "query_window", query_window)
    monkeypatch.setattr(sys, "argv", ["evidence_snapshot.py", "--index-dir", str(tmp_path), "--input",
                                      str(tmp_path / "input.json"), "--out", str(tmp_path / "snap.jsonl")])
    assert snapshot.main() == 0
    windows = [(_at(start), _at(end)) for _, start, end in CASES]
    assert asked == {start: sorted(w for w in windows if w[0] != start) for start, _ in windows}
    lines = [json.loads(line) for line in (tmp_path / "snap.jsonl").read_text().splitlines()]
    assert [line["uuid"] for line in lines] == ["a-1", "b-2", "c-3"]
