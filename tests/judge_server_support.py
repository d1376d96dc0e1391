"""Shared pieces of the judge server tests: a real uvicorn server on loopback, a settable clock,
synthetic answer files, the library's score of a file, and raw HTTP over a socket."""
from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from judge.challenge import score_challenge
from judge.groundtruth import TruthCase, load_truth
from judge.server.app import create_app
from judge.server.store import add_team, create_contest, open_database
from judge.server.worker import ScoringWorker
from judge.validation import check_submission_file
from rca.challenge import rule_version
from rca.settings import JudgeServerSettings, JudgeSettings

REPO = Path(__file__).resolve().parents[1]
# Shared: a bare httpx.get/post builds an SSL context each time (~0.1 s of CPU).
HTTP = httpx.Client(timeout=30)
REAL_GT = REPO / "data" / "reference" / "aiops2025" / "groundtruth.jsonl"


class ManualClock:
    """A UTC clock the test moves by hand (quota days, rate windows)."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, **delta: float) -> None:
        with self._lock:
            self._now += timedelta(**delta)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """Run ``app`` under uvicorn in a thread on a free loopback port; yields the base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


def truth_subset(path: Path, count: int, *, start: int = 0) -> Path:
    lines = [line for line in REAL_GT.read_text(encoding="utf-8").splitlines() if line.strip()]
    path.write_text("\n".join(lines[start:start + count]) + "\n", encoding="utf-8")
    return path


def make_answers(truth: list[TruthCase], *, variant: int, rules: str = "late", steps: int = 0,
                 observation: str = "") -> list[dict[str, Any]]:
    """Answers whose correctness depends on ``variant``: different variants score differently."""
    answers: list[dict[str, Any]] = []
    for index, case in enumerate(truth):
        right_component = (index + variant) % 3 != 0
        right_reason = (index * 7 + variant) % 4 != 0
        metric = case.key_metrics[0] if case.key_metrics else "latency"
        trace = [{"step": 1, "action": "LoadMetrics", "observation": f"{metric} rose sharply"}]
        for extra in range(2, 2 + (variant + index) % 5 + steps):
            trace.append({"step": extra, "action": "LogSearch" if extra % 2 else "TraceAnalysis",
                          "observation": observation or f"error logs and slow spans near {case.instance[0]}"})
        answer: dict[str, Any] = {
            "uuid": case.uuid,
            "component": case.instance[0] if right_component else "frontend-0",
            "reason": f"{metric} high" if right_reason else "something odd",
            "reasoning_trace": trace,
        }
        if rules == "early":
            answer["time"] = "2025-06-05 16:10:02"
        answers.append(answer)
    return answers


def write_jsonl(path: Path, answers: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(a) + "\n" for a in answers), encoding="utf-8")
    return path


def library_score(gt: Path, result: Path, *, rules: str) -> float:
    """What `rca judge rca --keyword-only` reports as Final for the same file."""
    version = rule_version(rules)
    truth = load_truth(gt)
    check = check_submission_file(result, truth_uuids=[c.uuid for c in truth], rules=version)
    return score_challenge(truth, check, rules=version, embedder=None, semantic_threshold=0.6).overall.final


def server_settings(**overrides: Any) -> JudgeServerSettings:
    values: dict[str, Any] = {"semantic": False, "worker_poll_s": 0.05, "rate_max_requests": 10_000}
    values.update(overrides)
    return JudgeServerSettings(**values)


@contextmanager
def judge_server(db_url: str, *, settings: JudgeServerSettings, clock: Callable[[], datetime],
                 worker: bool = True) -> Iterator[tuple[str, Any]]:
    engine = open_database(db_url)
    scorer = ScoringWorker(engine, server=settings, judge=JudgeSettings(), clock=clock,
                           embedder_factory=None) if worker else None
    with serve_app(create_app(engine, settings=settings, worker=scorer, clock=clock)) as url:
        yield url, engine
    engine.dispose()


def setup_contest(engine: Any, *, name: str, gt: Path, rules: str, teams: list[str]) -> dict[str, str]:
    create_contest(engine, name=name, kind="rca", rules=rules, truth=gt.read_text(encoding="utf-8"),
                   case_count=len(load_truth(gt)), now=datetime.now(UTC))
    return {team: add_team(engine, contest=name, name=team, now=datetime.now(UTC)) for team in teams}


def raw_http(url: str, request: bytes, *, timeout: float = 30) -> tuple[int, dict[str, Any] | str]:
    """Send exact bytes to the server (the request must say ``Connection: close``); (status, body)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode("utf-8", errors="replace")


def wait_until_scored(url: str, *, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queue = HTTP.get(f"{url}/api/queue").json()
        if queue["queued"] == 0 and queue["scoring"] == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"queue not empty after {timeout}s: {queue}")
