"""Our submission client (``rca submit``): the same requests as the challenge's official submit script.

Body: ``json.dumps({"data": answers}).encode("utf-8")`` with headers ``ticket``, ``contest`` and
``Content-Type: application/json`` to the server URL; status: ``GET <server>/status`` with headers
``ticket``, ``contest``, ``submission``. Server refusals come back as ``SubmitError`` carrying the
server's ``detail`` (and ``errors`` where it says what was wrong).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from rca.errors import BackendError, InputError


class SubmitError(BackendError):
    """The server refused or could not be reached; the message is the server's ``detail``."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Endpoint:
    server: str
    ticket: str
    contest: str
    timeout_s: float = 60.0


def read_answers(path: Path) -> list[Any]:
    """Answers of a result JSONL file, one JSON value a line; errors name the file and line."""
    if not path.is_file():
        raise InputError(f"{path}: result file not found")
    answers: list[Any] = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            answers.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{line_no}: malformed JSON: {exc.msg}") from exc
    return answers


def _reply(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code != 200:
        detail = body.get("detail") if isinstance(body, dict) else None
        errors = body.get("errors") if isinstance(body, dict) else None
        message = f"[{response.status_code}] {detail or response.reason_phrase}"
        if errors:
            message += ": " + "; ".join(str(e) for e in errors[:5])
        raise SubmitError(message, status=response.status_code)
    if not isinstance(body, dict):
        raise SubmitError(f"server reply is not a JSON object: {response.text[:200]!r}")
    return body


def submit(answers: list[Any], *, endpoint: Endpoint, http: httpx.Client | None = None) -> dict[str, Any]:
    body = json.dumps({"data": answers}).encode("utf-8")
    headers = {"ticket": endpoint.ticket, "contest": endpoint.contest, "Content-Type": "application/json"}
    try:
        response = (http or httpx).post(endpoint.server, content=body, headers=headers, timeout=endpoint.timeout_s)
    except httpx.HTTPError as exc:
        raise SubmitError(f"{endpoint.server}: {exc}") from exc
    return _reply(response)


def status(submission_id: str, *, endpoint: Endpoint, http: httpx.Client | None = None) -> dict[str, Any]:
    headers = {"ticket": endpoint.ticket, "contest": endpoint.contest, "submission": submission_id,
               "Content-Type": "application/json"}
    try:
        response = (http or httpx).get(endpoint.server.rstrip("/") + "/status", headers=headers,
                                       timeout=endpoint.timeout_s)
    except httpx.HTTPError as exc:
        raise SubmitError(f"{endpoint.server}: {exc}") from exc
    return _reply(response)


def wait_for_score(submission_id: str, *, endpoint: Endpoint, poll_s: float, timeout_s: float) -> dict[str, Any]:
    """Poll ``/status`` until the submission is judged (``judge_time`` set) or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client() as http:  # one connection pool and SSL context for the whole wait
        while True:
            reply = status(submission_id, endpoint=endpoint, http=http)
            if reply.get("judge_time") or time.monotonic() >= deadline:
                return reply
            time.sleep(poll_s)
