"""Format validation per rule version, with per-line errors."""
from __future__ import annotations

import json

import pytest

from judge.validation import check_submission
from rca.challenge import EARLY, LATE

STEP = {"step": 1, "action": "LogSearch", "observation": "found errors"}


def _line(**fields) -> dict:
    base = {"uuid": "u1", "component": "cartservice", "reason": "pod failure", "time": "2025-06-05 16:10:02",
            "reasoning_trace": [STEP]}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def _check(rows, rules, uuids=("u1",)):
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    return check_submission(lines, truth_uuids=list(uuids), rules=rules)


def test_valid_early_line() -> None:
    result = _check([_line()], EARLY)
    assert result.valid and result.answers["u1"].component == "cartservice"


@pytest.mark.parametrize("rules, row, valid", [
    (EARLY, _line(time=None), False),  # early requires time
    (LATE, _line(), False),  # late rejects time (any extra field)
    (LATE, _line(time=None), True),
    (EARLY, _line(confidence=0.9), True),  # early: extra field is only a warning
    (LATE, _line(time=None, confidence=0.9), False),
    (EARLY, _line(time="2025/06/05 16:10"), False),
    (EARLY, _line(component=["cartservice", "frontend"]), True),  # early: first of a list
    (LATE, _line(time=None, component=["cartservice"]), False),
])
def test_field_sets_per_rules(rules, row, valid) -> None:
    assert _check([row], rules).valid is valid


def test_early_extra_field_is_a_warning() -> None:
    result = _check([_line(confidence=0.9)], EARLY)
    assert result.valid and len(result.warnings) == 1 and result.warnings[0].line == 1


@pytest.mark.parametrize("trace", [
    [{"step": 0, "action": "a", "observation": "o"}],
    [{"step": 1, "action": "a", "observation": "o"}, {"step": 3, "action": "a", "observation": "o"}],
    [{"step": "1", "action": "a", "observation": "o"}],
    [{"step": True, "action": "a", "observation": "o"}],
    [{"step": 1, "action": "a"}],
    [{"step": 1, "action": "a", "observation": 5}],
    "not a list",
])
def test_bad_steps_are_errors_on_their_line(trace) -> None:
    result = _check([_line(reasoning_trace=trace)], EARLY)
    assert not result.valid
    assert result.errors[0].line == 1 and "u1" not in result.answers


def test_malformed_json_names_the_line() -> None:
    result = _check([_line(uuid="u1"), "{not json"], EARLY, uuids=("u1", "u2"))
    lines = {issue.line for issue in result.errors}
    assert 2 in lines
    assert any("malformed JSON" in issue.message for issue in result.errors)


def test_uuid_set_and_count() -> None:
    result = _check([_line(uuid="u1"), _line(uuid="u1"), _line(uuid="zz")], EARLY, uuids=("u1", "u2"))
    messages = [str(issue) for issue in result.errors]
    assert any("duplicate uuid" in m and "line 2" in m for m in messages)
    assert any("not a case" in m and "line 3" in m for m in messages)
    assert any("3 answers for 2 cases" in m for m in messages)
    assert any("without an answer: u2" in m for m in messages)
