"""The rules' answers an evaluation scores: one line a case, simulated or real, even where nothing moved.

Both the simulator's seed sets (``bench.pipeline.rules_answers``) and the real sets
(``bench.real_sets.rules_answers``) come from one function; before round 34 the simulator's left a
case without candidates out, so its submission was one line short.
"""
from __future__ import annotations

import json
from pathlib import Path

from bench.pipeline import rules_answers
from bench.real_sets import rules_answers as real_rules_answers
from rca.challenge import rule_version
from rca.settings import load_settings

QUIET = {"uuid": "quiet-1", "Anomaly Description": "A fault occurred from 2025-06-05T16:10:02Z to 2025-06-05T16:31:02Z."}


def test_a_case_where_nothing_moved_gets_its_line_in_both_evaluations(tmp_path: Path) -> None:
    cases = tmp_path / "input.json"
    cases.write_text(json.dumps([QUIET]), encoding="utf-8")
    index = tmp_path / "index"
    index.mkdir()  # an empty index: the case gets as far as the query, and nothing moved
    settings = load_settings(environ={}, overrides={"paths": {"index_dir": index, "input_file": cases,
                                                              "runs_dir": tmp_path / "runs"}})
    rules = rule_version(settings.challenge.rules)
    simulated = [json.loads(line) for line in rules_answers(settings, seed=7, rules=rules)]
    assert [line["uuid"] for line in simulated] == ["quiet-1@7"]
    assert simulated[0]["component"] == "" and simulated[0]["reason"].startswith("no fault found")
    real = real_rules_answers(settings, out=tmp_path / "rules.jsonl")
    lines = [json.loads(line) for line in real.read_text(encoding="utf-8").splitlines()]
    assert lines == [{**simulated[0], "uuid": "quiet-1"}]
