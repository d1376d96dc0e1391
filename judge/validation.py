"""Format validation of a challenge submission, with one issue per offending line.

Checks: JSON per line, field set of the rule version, value types, step shape
``{step: int from 1, action: str, observation: str}``, uuids one-to-one with the
ground truth and the answer count. Lines with errors are not scored.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from judge.groundtruth import InputFileError
from rca.challenge import RuleVersion

STEP_FIELDS = frozenset({"step", "action", "observation"})
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


@dataclass(frozen=True)
class Step:
    step: int
    action: str
    observation: str


@dataclass(frozen=True)
class Answer:
    """One valid submission line, reduced to what is scored (first component, first reason)."""

    uuid: str
    component: str
    reason: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class FormatIssue:
    line: int | None  # None: about the file as a whole
    message: str
    uuid: str | None = None

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else "file"
        who = f" (uuid {self.uuid})" if self.uuid else ""
        return f"{where}{who}: {self.message}"


@dataclass
class SubmissionCheck:
    answers: dict[str, Answer] = field(default_factory=dict)
    errors: list[FormatIssue] = field(default_factory=list)
    warnings: list[FormatIssue] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors


def _first_text(value: Any, name: str, rules: RuleVersion, problems: list[str]) -> str | None:
    if isinstance(value, str):
        return value
    if rules.lists_allowed and isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value[0]
    wanted = "a string or a non-empty list of strings" if rules.lists_allowed else "a string"
    problems.append(f"field '{name}' must be {wanted}, got {json.dumps(value)[:60]}")
    return None


def _steps(value: Any, problems: list[str]) -> tuple[Step, ...]:
    if not isinstance(value, list):
        problems.append("field 'reasoning_trace' must be a list of steps")
        return ()
    steps: list[Step] = []
    for index, item in enumerate(value):
        where = f"reasoning_trace[{index}]"
        if not isinstance(item, dict):
            problems.append(f"{where} must be an object {{step, action, observation}}")
            continue
        keys = set(item)
        if keys != STEP_FIELDS:
            missing, extra = sorted(STEP_FIELDS - keys), sorted(keys - STEP_FIELDS)
            problems.append(f"{where} fields must be step, action, observation (missing {missing}, extra {extra})")
            continue
        number = item["step"]
        # bool is an int subclass in Python; a step number of true is still wrong.
        if not isinstance(number, int) or isinstance(number, bool) or number != index + 1:
            problems.append(f"{where}.step must be the integer {index + 1} (steps count from 1), got {number!r}")
        if not isinstance(item["action"], str) or not isinstance(item["observation"], str):
            problems.append(f"{where}: action and observation must be strings")
            continue
        steps.append(Step(step=index + 1, action=item["action"], observation=item["observation"]))
    return tuple(steps)


def _check_line(raw: dict[str, Any], rules: RuleVersion, problems: list[str], notes: list[str]) -> Answer | None:
    keys = set(raw)
    missing = sorted(rules.required_fields - keys)
    extra = sorted(keys - rules.required_fields)
    if missing:
        problems.append(f"missing field(s) {missing} (rules {rules.name})")
    if extra:
        text = f"field(s) {extra} not allowed by rules {rules.name}"
        (problems if rules.extra_fields_are_errors else notes).append(text)
    if missing:
        return None
    uuid = raw["uuid"]
    if not isinstance(uuid, str) or not uuid:
        problems.append("field 'uuid' must be a non-empty string")
    component = _first_text(raw["component"], "component", rules, problems)
    reason = _first_text(raw["reason"], "reason", rules, problems)
    if "time" in rules.required_fields:
        try:
            datetime.strptime(str(raw["time"]), TIME_FORMAT)
        except ValueError:
            problems.append(f"field 'time' must look like 'YYYY-MM-DD HH:mm:ss', got {raw['time']!r}")
    steps = _steps(raw["reasoning_trace"], problems)
    if problems or component is None or reason is None:
        return None
    return Answer(uuid=uuid, component=component, reason=reason, steps=steps)


def check_submission(lines: Iterable[str], *, truth_uuids: list[str], rules: RuleVersion) -> SubmissionCheck:
    """Validate submission lines against the truth's uuids; valid lines become ``Answer``s."""
    result = SubmissionCheck()
    expected = set(truth_uuids)
    seen_at: dict[str, int] = {}
    answer_count = 0
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        answer_count += 1
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            result.errors.append(FormatIssue(line_no, f"malformed JSON: {exc.msg} (column {exc.colno})"))
            continue
        if not isinstance(raw, dict):
            result.errors.append(FormatIssue(line_no, "a line must hold one JSON object"))
            continue
        uuid = raw.get("uuid") if isinstance(raw.get("uuid"), str) else None
        if uuid is not None:
            if uuid in seen_at:
                result.errors.append(FormatIssue(line_no, f"duplicate uuid, first on line {seen_at[uuid]}", uuid))
                continue
            seen_at[uuid] = line_no
            if uuid not in expected:
                result.errors.append(FormatIssue(line_no, "uuid is not a case of the ground truth", uuid))
                continue
        problems: list[str] = []
        notes: list[str] = []
        answer = _check_line(raw, rules, problems, notes)
        result.errors.extend(FormatIssue(line_no, text, uuid) for text in problems)
        result.warnings.extend(FormatIssue(line_no, text, uuid) for text in notes)
        if answer is not None:
            result.answers[answer.uuid] = answer
    if answer_count != len(expected):
        result.errors.append(FormatIssue(None, f"{answer_count} answers for {len(expected)} cases"))
    missing = [u for u in truth_uuids if u not in seen_at]
    if missing:
        shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
        result.errors.append(FormatIssue(None, f"{len(missing)} case(s) without an answer: {shown}"))
    return result


def check_submission_file(path: Path, *, truth_uuids: list[str], rules: RuleVersion) -> SubmissionCheck:
    if not path.is_file():
        raise InputFileError(f"{path}: submission file not found")
    return check_submission(path.read_text(encoding="utf-8").splitlines(), truth_uuids=truth_uuids, rules=rules)
