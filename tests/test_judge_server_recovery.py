"""Crash recovery: `rca judge serve` is killed (SIGKILL) while its worker scores a submission; the
accepted submission survives in the database and the restarted server scores it."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from judge.groundtruth import load_truth
from judge.server.store import open_database
from tests.judge_server_support import (
    HTTP,
    REAL_GT,
    REPO,
    free_port,
    library_score,
    make_answers,
    setup_contest,
    write_jsonl,
)


def _start(db_url: str, port: int, log: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), RCA_JUDGE_SERVER__SEMANTIC="false",
               RCA_JUDGE_SERVER__MAX_BODY_BYTES=str(64 * 1024 * 1024), RCA_JUDGE_SERVER__WORKER_POLL_S="0.05")
    # judge.cli's app is what `rca judge` mounts (loading every `rca` sub-command costs seconds here).
    command = [sys.executable, "-c", "from judge.cli import app; app()", "serve", "--db", db_url, "--port", str(port)]
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"server exited: {log.read_text()[-2000:]}")
        try:
            HTTP.get(f"http://127.0.0.1:{port}/api/queue", timeout=1)
            return process
        except Exception:  # noqa: BLE001 - not listening yet
            time.sleep(0.1)
    process.kill()
    raise AssertionError("server did not start")


def _row(db: Path, submission_id: str) -> tuple[str, str | None, float | None]:
    with sqlite3.connect(db, timeout=30) as con:
        return con.execute("select status, judge_time, score from submissions where id = ?", (submission_id,)).fetchone()


def test_killed_mid_scoring_is_scored_after_restart(tmp_path) -> None:
    db = tmp_path / "judge.sqlite"
    url = f"sqlite:///{db}"
    engine = open_database(url)
    ticket = setup_contest(engine, name="big", gt=REAL_GT, rules="early", teams=["t"])["t"]
    engine.dispose()
    # 400 cases x 40 steps: scoring takes seconds, a window wide enough to kill the worker in.
    answers = make_answers(load_truth(REAL_GT), variant=1, rules="early", steps=40,
                           observation="pod_cpu_usage and pod_memory_working_set_bytes rose; rrt_max doubled on checkout")
    result = write_jsonl(tmp_path / "result.jsonl", answers)
    port = free_port()
    log = tmp_path / "serve.log"
    server = _start(url, port, log)
    try:
        reply = HTTP.post(f"http://127.0.0.1:{port}/", content=json.dumps({"data": answers}).encode(),
                          headers={"ticket": ticket, "contest": "big", "Content-Type": "application/json"}, timeout=120)
        assert reply.status_code == 200, reply.text
        submission_id = reply.json()["submission_id"]
        deadline = time.monotonic() + 60
        while _row(db, submission_id)[0] == "queued" and time.monotonic() < deadline:
            time.sleep(0.005)
        status = _row(db, submission_id)[0]
        server.send_signal(signal.SIGKILL)
        server.wait(30)
    finally:
        if server.poll() is None:
            server.kill()
    if status != "scoring":
        pytest.fail(f"the worker finished before it could be killed (status {status}); make scoring heavier")
    assert _row(db, submission_id)[:2] == ("scoring", None)  # accepted, half scored, not lost

    restarted = _start(url, port, log)
    try:
        deadline = time.monotonic() + 120
        while _row(db, submission_id)[0] != "done" and time.monotonic() < deadline:
            time.sleep(0.1)
        status = HTTP.get(f"http://127.0.0.1:{port}/status", headers={
            "ticket": ticket, "contest": "big", "submission": submission_id}).json()
    finally:
        restarted.send_signal(signal.SIGTERM)
        restarted.wait(30)
    assert status["judge_time"] and status["status"] == "done"
    assert status["score"] == library_score(REAL_GT, result, rules="early")
    assert "queued again 1 submission(s) left in scoring" in log.read_text()
    with sqlite3.connect(db) as con:
        assert con.execute("select attempts from submissions").fetchone()[0] == 2
