"""The submission protocol of the 2025 challenge's judge: messages, body limits and answer checks.

Every rejection is a ``ProtocolError`` carrying the HTTP status and the exact ``detail`` text the
official client prints; ``errors`` adds what was wrong (answer index and field) for people, in a
key the official client ignores. Checks run cheapest first and nothing is stored on rejection.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from judge.server.scoring import ContestSpec
from judge.validation import STEP_FIELDS, check_submission
from rca.errors import InputError
from rca.jsonlimits import json_depth
from rca.settings import JudgeServerSettings

INVALID_FORMAT = "Invalid submission format"
LENGTH_MISMATCH = "Submission length mismatch"
UUID_INVALID = "Submission UUID invalid"
TICKET_MISSING = "Ticket not provided"
TICKET_INVALID = "Invalid ticket"
CONTEST_MISSING = "Contest not provided"
CONTEST_INVALID = "Invalid contest"
SUBMISSION_ID_MISSING = "Submission ID not provided"
QUOTA_EXCEEDED = "Quota exceeded"
NOT_FOUND = "Submission not found"
TOO_MANY = "Too many requests"
TOO_LARGE = "Request body too large"

QA_REQUIRED = frozenset({"id", "answer"})
QA_ALLOWED = frozenset({"id", "query", "answer"})
MAX_REPORTED = 20


class ProtocolError(InputError):
    def __init__(self, status: int, detail: str, errors: list[str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors or []

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"detail": self.detail}
        if self.errors:
            body["errors"] = self.errors[:MAX_REPORTED]
        return body


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int
    max_answers: int
    max_field_chars: int
    max_trace_steps: int
    max_json_depth: int

    @classmethod
    def from_settings(cls, settings: JudgeServerSettings) -> Limits:
        return cls(max_body_bytes=settings.max_body_bytes, max_answers=settings.max_answers,
                   max_field_chars=settings.max_field_chars, max_trace_steps=settings.max_trace_steps,
                   max_json_depth=settings.max_json_depth)


def parse_body(raw: bytes, *, limits: Limits) -> list[Any]:
    """The answers of a ``{"data": [...]}`` body (UTF-8 JSON, bounded depth and count)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(400, INVALID_FORMAT, [f"body is not UTF-8 (byte {exc.start})"]) from exc
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProtocolError(400, INVALID_FORMAT, [f"body is not JSON: {exc.msg} (char {exc.pos})"]) from exc
    except RecursionError as exc:  # the C parser bounds its own recursion
        raise ProtocolError(400, INVALID_FORMAT, ["body is nested too deeply"]) from exc
    if json_depth(body) > limits.max_json_depth:
        raise ProtocolError(400, INVALID_FORMAT, [f"body is nested deeper than {limits.max_json_depth} levels"])
    if not isinstance(body, dict) or set(body) != {"data"} or not isinstance(body["data"], list):
        raise ProtocolError(400, INVALID_FORMAT, ['body must be {"data": [answer, ...]}'])
    data: list[Any] = body["data"]
    if len(data) > limits.max_answers:
        raise ProtocolError(400, LENGTH_MISMATCH, [f"{len(data)} answers; this server takes at most {limits.max_answers}"])
    return data


def _bounded_strings(value: Any, *, limit: int, where: str, problems: list[str]) -> None:
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str) and len(item) > limit:
            problems.append(f"{path}: {len(item)} characters (at most {limit})")
        elif isinstance(item, dict):
            stack.extend((child, f"{path}.{key}") for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(item))


def _shape_problems(data: list[Any], spec: ContestSpec, limits: Limits) -> list[str]:
    problems: list[str] = []
    for index, answer in enumerate(data):
        where = f"answer {index}"
        if not isinstance(answer, dict):
            problems.append(f"{where}: must be an object")
            continue
        keys = set(answer)
        if spec.kind == "qa":
            if not QA_REQUIRED <= keys <= QA_ALLOWED:
                problems.append(f"{where}: fields must be id, answer (and optionally query), got {sorted(keys)}")
            elif not isinstance(answer["answer"], str) or not isinstance(answer["id"], str | int):
                problems.append(f"{where}: id must be a string or integer and answer a string")
        else:
            assert spec.rules is not None
            if keys != spec.rules.required_fields:
                problems.append(f"{where}: fields must be exactly {sorted(spec.rules.required_fields)} "
                                f"(rules {spec.rules.name}), got {sorted(keys)}")
            elif not isinstance(answer["uuid"], str):
                problems.append(f"{where}: uuid must be a string")
            elif not isinstance(answer["reasoning_trace"], list):
                problems.append(f"{where}: reasoning_trace must be a list")
            elif len(answer["reasoning_trace"]) > limits.max_trace_steps:
                problems.append(f"{where}: {len(answer['reasoning_trace'])} reasoning steps "
                                f"(at most {limits.max_trace_steps})")
            elif not all(isinstance(s, dict) and set(s) == STEP_FIELDS for s in answer["reasoning_trace"]):
                problems.append(f"{where}: every reasoning_trace step must be {{step, action, observation}}")
        _bounded_strings(answer, limit=limits.max_field_chars, where=where, problems=problems)
    return problems


def _ids(data: list[dict[str, Any]], spec: ContestSpec) -> list[str]:
    key = "id" if spec.kind == "qa" else "uuid"
    return [str(answer[key]) for answer in data]


def check_answers(data: list[Any], *, spec: ContestSpec, limits: Limits) -> None:
    """Raise the protocol's 400 for answers the contest cannot take; return quietly when they are valid."""
    problems = _shape_problems(data, spec, limits)
    if problems:
        raise ProtocolError(400, INVALID_FORMAT, problems)
    expected = spec.case_ids
    if len(data) != len(expected):
        raise ProtocolError(400, LENGTH_MISMATCH, [f"{len(data)} answers for {len(expected)} questions"])
    given = _ids(data, spec)
    if len(set(given)) != len(given) or set(given) != set(expected):
        unknown = sorted(set(given) - set(expected))[:5]
        duplicated = sorted(u for u, n in Counter(given).items() if n > 1)[:5]
        raise ProtocolError(400, UUID_INVALID, [f"unknown ids {unknown}, duplicated ids {duplicated}"])
    if spec.kind == "rca":
        assert spec.rules is not None
        # The library's own checks (value types, step numbering, time format): any error rejects.
        check = check_submission([json.dumps(answer, ensure_ascii=False) for answer in data],
                                 truth_uuids=expected, rules=spec.rules)
        if check.errors:
            raise ProtocolError(400, INVALID_FORMAT, [str(issue).replace("line ", "answer line ", 1)
                                                       for issue in check.errors])
