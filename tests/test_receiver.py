"""``rca diagnose --listen HOST:PORT`` (diagnose/receiver.py): Alertmanager's webhook receiver.

Unit tests drive the FastAPI app with its TestClient; the diagnoser is the real ``Diagnoser`` over a
static index and knowledge base with a model double (``GatedBackend``: one answer for every case, held
while its gate is closed), so answers and run records are written by the batch path itself. One test
runs a REAL Alertmanager (Debian's ``prometheus-alertmanager``, as tests/test_alertmanager_server.py)
whose webhook receiver is this app, served by uvicorn on a free loopback port.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import app as cli_app
from diagnose.receiver import CaseWorker, Offer, create_app
from diagnose.record import RunRecord
from diagnose.service import Diagnoser
from index.models import Candidate, EvidenceItem
from rca.errors import DataError
from rca.httpserve import listening_socket
from rca.llm.base import LLMReply
from rca.settings import Settings, load_settings
from tests.fakes import StaticEvidence, StaticKnowledge
from tests.judge_server_support import free_port
from tests.server_process import ready, running, wait_until
from tests.test_alertmanager_server import CART_KEY, CHECKOUT_KEY, _binaries, _z
from tests.test_alertmanager_server import _alert as am_alert

runner = CliRunner()
LEAD, SPAN = timedelta(minutes=5), timedelta(minutes=10)
RECEIVED = datetime(2025, 6, 5, 8, 9, 30, 250000, tzinfo=UTC)  # when the test's payloads arrive
WAIT_S = 20.0
REPLY = json.dumps({"candidate": 1, "fault_type": "cpu stress", "reason": "pod_cpu_usage saturated"})


def _case_id(alertname: str, group_key: str) -> str:
    return f"{alertname}-{hashlib.sha256(group_key.encode('utf-8')).hexdigest()[:10]}"


def _alert(pod: str, *, starts: str, status: str = "firing", ends: str = "0001-01-01T00:00:00Z",
           alertname: str = "HighErrorRate", service: str = "checkoutservice") -> dict[str, Any]:
    return {"status": status, "labels": {"alertname": alertname, "service": service, "pod": pod},
            "annotations": {"summary": f"{pod} error ratio above 5%"}, "startsAt": starts, "endsAt": ends,
            "generatorURL": "http://prometheus:9090/graph", "fingerprint": hashlib.sha256(pod.encode()).hexdigest()[:16]}


def _payload(group: str, *alerts: dict[str, Any], status: str | None = None) -> dict[str, Any]:
    """Alertmanager's webhook payload (version 4) of the group ``group`` (its alertname)."""
    return {"version": "4", "groupKey": f'{{}}:{{alertname="{group}"}}', "truncatedAlerts": 0,
            "status": status or ("firing" if any(a["status"] == "firing" for a in alerts) else "resolved"),
            "receiver": "rca", "groupLabels": {"alertname": group}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093", "alerts": list(alerts)}


def _id(group: str) -> str:
    return _case_id(group, f'{{}}:{{alertname="{group}"}}')


class GatedBackend:
    """The model double: the same valid reply for every case; while ``gate`` is clear each call waits."""

    name = "gated"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()  # set by the first call
        self.calls = 0

    def chat(self, messages, **_: object) -> LLMReply:
        self.calls += 1
        self.entered.set()
        if not self.gate.wait(WAIT_S):
            raise AssertionError("the test never opened the gate")
        return LLMReply(text=REPLY, model="gated", prompt_tokens=10, completion_tokens=10, latency_s=0.0)

    def close(self) -> None:
        pass


def _candidates() -> list[Candidate]:
    cpu = EvidenceItem(modality="metric", signal="level", key="pod_cpu_usage", component="checkoutservice-1",
                       text="pod_cpu_usage up 4.1x (z=9.3) on checkoutservice-1", magnitude=9.3)
    return [Candidate(component="checkoutservice", level="service", score=0.9, evidence=[cpu])]


def _settings(tmp_path: Path, **diagnose: object) -> Settings:
    return load_settings(environ={}, overrides={
        "paths": {"runs_dir": tmp_path / "runs", "input_file": tmp_path / "no-input.json"},
        "diagnose": {"alert_lead": "5m", "alert_span": "10m", **diagnose}})


class Harness:
    """A receiver over the test's diagnoser, its answers in ``out``."""

    def __init__(self, tmp_path: Path, **diagnose: object) -> None:
        self.settings = _settings(tmp_path, **diagnose)
        self.backend = GatedBackend()
        self.evidence = StaticEvidence(_candidates())
        self.diagnoser = Diagnoser(settings=self.settings, evidence=self.evidence, knowledge=StaticKnowledge(),
                                   llm=self.backend)
        self.out = tmp_path / "answers.jsonl"
        self.worker = CaseWorker(self.diagnoser, settings=self.settings, out=self.out)
        self.app = create_app(self.worker, settings=self.settings, clock=lambda: RECEIVED)

    def answers(self) -> list[dict[str, Any]]:
        text = self.out.read_text(encoding="utf-8") if self.out.exists() else ""
        return [json.loads(line) for line in text.splitlines()]


def _until(what: str, done: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout_s:.0f} s")
        time.sleep(0.02)


def _settled(client: TestClient, answered: int, failed: int = 0) -> Callable[[], bool]:
    return lambda: client.get("/healthz").json() == {"queued": 0, "answered": answered, "failed": failed}


@pytest.fixture()
def harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


FIRING = _payload("HighErrorRate", _alert("checkoutservice-0", starts="2025-06-05T16:04:12.345678901+08:00"),
                  _alert("checkoutservice-1", starts="2025-06-05T08:06:00Z"))


def test_a_firing_group_is_one_case_whose_window_ends_when_it_was_received(harness: Harness) -> None:
    """202 {accepted: [id]}; the case is named as --alerts names it, opens the lead before the earliest
    startsAt and ends when the payload came (not span after the start: the receiver knows the time);
    its answer is appended to --out and its run record written, as a batch writes them."""
    with TestClient(harness.app) as client:
        response = client.post("/alerts", json=FIRING)
        assert response.status_code == 202, response.text
        assert response.json() == {"accepted": [_id("HighErrorRate")], "skipped": []}
        _until("answer", _settled(client, answered=1))
    first_fired = datetime(2025, 6, 5, 8, 4, 12, 345678, tzinfo=UTC)
    assert harness.evidence.queries == [(first_fired - LEAD, RECEIVED)]
    [answer] = harness.answers()
    assert answer["uuid"] == _id("HighErrorRate") and answer["component"] == "checkoutservice"
    record = RunRecord.load(harness.settings.paths.runs_dir / "answers" / f"{_id('HighErrorRate')}.json")
    assert record.status == "answered" and record.uuid == _id("HighErrorRate")


def test_a_resend_of_a_queued_or_answered_group_is_skipped(tmp_path: Path) -> None:
    """Alertmanager sends a group again as it changes and every repeat_interval: queued or answered
    (this run, or in --out before the start), it is skipped, never diagnosed twice."""
    harness = Harness(tmp_path)
    harness.backend.gate.clear()
    with TestClient(harness.app) as client:
        assert client.post("/alerts", json=FIRING).json()["accepted"] == [_id("HighErrorRate")]
        assert harness.backend.entered.wait(WAIT_S)  # in progress: still queued
        again = _payload("HighErrorRate", *FIRING["alerts"], _alert("checkoutservice-2", starts="2025-06-05T08:07:00Z"))
        assert client.post("/alerts", json=again).json() == {
            "accepted": [], "skipped": [{"id": _id("HighErrorRate"), "reason": "already queued"}]}
        harness.backend.gate.set()
        _until("answer", _settled(client, answered=1))
        assert client.post("/alerts", json=again).json() == {
            "accepted": [], "skipped": [{"id": _id("HighErrorRate"), "reason": "already diagnosed"}]}
    assert harness.backend.calls == 1 and len(harness.answers()) == 1

    restarted = Harness(tmp_path)  # the same --out: what it holds is answered
    with TestClient(restarted.app) as client:
        assert client.post("/alerts", json=FIRING).json()["skipped"] == [
            {"id": _id("HighErrorRate"), "reason": "already diagnosed"}]
    assert restarted.backend.calls == 0


def test_a_resolved_group_is_accepted_and_not_diagnosed(harness: Harness) -> None:
    resolved = _payload("HighLatency", _alert("cartservice-0", starts="2025-06-05T08:06:00Z", status="resolved",
                                              ends="2025-06-05T08:12:30Z", alertname="HighLatency",
                                              service="cartservice"))
    with TestClient(harness.app) as client:
        response = client.post("/alerts", json=resolved)
        assert response.status_code == 202
        assert response.json() == {"accepted": [], "skipped": [{"id": _id("HighLatency"),
                                                               "reason": "resolved: not diagnosed"}]}
        assert client.get("/healthz").json() == {"queued": 0, "answered": 0, "failed": 0}
    assert harness.backend.calls == 0 and not harness.out.exists()


def test_answers_are_appended_in_the_order_the_groups_came(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    harness.backend.gate.clear()
    groups = [f"Alert{i}" for i in range(4)]
    with TestClient(harness.app) as client:
        for group in groups:
            response = client.post("/alerts", json=_payload(group, _alert("p", starts="2025-06-05T08:00:00Z")))
            assert response.status_code == 202 and response.json()["accepted"] == [_id(group)]
        assert harness.backend.entered.wait(WAIT_S)
        assert client.get("/healthz").json() == {"queued": 4, "answered": 0, "failed": 0}
        harness.backend.gate.set()
        _until("answers", _settled(client, answered=4))
        latest = client.get("/answers", params={"limit": 2}).json()["answers"]
        assert [a["uuid"] for a in latest] == [_id(g) for g in groups[2:]]  # the latest, oldest first
        assert [a["uuid"] for a in client.get("/answers").json()["answers"]] == [_id(g) for g in groups]
        for bad in ("0", "101", "x", "-1"):
            response = client.get("/answers", params={"limit": bad})
            assert response.status_code == 400 and "from 1 to 100" in response.json()["error"], bad
    assert [a["uuid"] for a in harness.answers()] == [_id(g) for g in groups]
    assert latest == harness.answers()[2:]  # /answers serves what --out holds


def test_a_full_queue_is_503_with_retry_after(tmp_path: Path) -> None:
    harness = Harness(tmp_path, listen_max_queue=1)
    harness.backend.gate.clear()
    with TestClient(harness.app) as client:
        assert client.post("/alerts", json=_payload("A", _alert("p", starts="2025-06-05T08:00:00Z"))).status_code == 202
        assert harness.backend.entered.wait(WAIT_S)  # A in progress; B waits and fills the queue
        assert client.post("/alerts", json=_payload("B", _alert("p", starts="2025-06-05T08:00:00Z"))).status_code == 202
        response = client.post("/alerts", json=_payload("C", _alert("p", starts="2025-06-05T08:00:00Z")))
        assert response.status_code == 503 and response.headers["retry-after"] == "60"
        assert "queue full" in response.json()["error"] and "listen_max_queue 1" in response.json()["error"]
        # A resend of a queued group is no new case: skipped, not refused.
        assert client.post("/alerts", json=_payload("B", _alert("p", starts="2025-06-05T08:00:00Z"))).status_code == 202
        harness.backend.gate.set()
        _until("answers", _settled(client, answered=2))
        assert client.post("/alerts", json=_payload("C", _alert("p", starts="2025-06-05T08:00:00Z"))).json()[
            "accepted"] == [_id("C")]
        _until("answers", _settled(client, answered=3))
    assert [a["uuid"] for a in harness.answers()] == [_id("A"), _id("B"), _id("C")]


def test_bodies_are_bounded_and_must_be_one_webhook_payload(tmp_path: Path) -> None:
    """413 past listen_max_body_bytes; 400 for what is not JSON, too deep, or no webhook payload, the
    reason naming the field (alert_cases' own errors); nothing queued."""
    harness = Harness(tmp_path, listen_max_body_bytes=2048)
    with TestClient(harness.app) as client:
        big = _payload("Big", _alert("p", starts="2025-06-05T08:00:00Z")) | {"pad": "x" * 4096}
        response = client.post("/alerts", json=big)
        assert response.status_code == 413 and "at most 2048" in response.json()["error"], response.text
        streamed = client.post("/alerts", content=iter([b"{" + b" " * 1500, b" " * 1500 + b"}"]))  # no Content-Length
        assert streamed.status_code == 413, streamed.text

        def refused(body: bytes) -> str:
            response = client.post("/alerts", content=body, headers={"content-type": "application/json"})
            assert response.status_code == 400, response.text
            return str(response.json()["error"])

        assert "body is not JSON" in refused(b'{"groupKey": ')
        assert "not UTF-8" in refused(b'{"a": "\xff"}')
        assert "nested more than 10 levels" in refused(json.dumps({"alerts": [[[[[[[[[[[1]]]]]]]]]]]}).encode())
        assert "nested more than 10 levels" in refused(b"[" * 1000 + b"]" * 1000)
        assert "got a list" in refused(json.dumps([FIRING]).encode())
        assert "missing field 'alerts'" in refused(json.dumps({"groupKey": "{}:{}", "status": "firing"}).encode())
        no_key = {k: v for k, v in FIRING.items() if k != "groupKey"}
        assert "without field 'groupKey'" in refused(json.dumps(no_key).encode())
        assert "field 'alerts' must be a non-empty list" in refused(json.dumps(FIRING | {"alerts": []}).encode())
        no_start = _payload("NoStart", {k: v for k, v in _alert("p", starts="x").items() if k != "startsAt"})
        assert "missing field 'startsAt'" in refused(json.dumps(no_start).encode())
        assert client.get("/healthz").json() == {"queued": 0, "answered": 0, "failed": 0}
        # One unreadable alert of a group fails alone: the group is a case, the alert is named.
        partly = _payload("Partly", _alert("p", starts="2025-06-05T08:00:00Z"), _alert("q", starts="yesterday"))
        reply = client.post("/alerts", json=partly).json()
        assert reply["accepted"] == [_id("Partly")]
        assert [s["id"] for s in reply["skipped"]] == ["payload alert 1"] and "'startsAt'" in reply["skipped"][0]["reason"]
        _until("answer", _settled(client, answered=1))
        # Anything else is 404 / 405.
        assert client.get("/alerts").status_code == 405
        assert client.post("/healthz").status_code == 405
        for path in ("/", "/docs", "/openapi.json", "/api/v2/alerts"):
            assert client.get(path).status_code == 404, path


class FlakyDiagnoser:
    """Fails its first case with a data error and its second with a bug; answers the others (delegate)."""

    def __init__(self, delegate: Diagnoser) -> None:
        self.delegate = delegate
        self.runs = 0

    def run(self, cases, *, out: Path, show_progress: bool = True):
        self.runs += 1
        if self.runs == 1:
            raise DataError("no telemetry in the window")
        if self.runs == 2:
            raise KeyError("a bug")
        return self.delegate.run(cases, out=out, show_progress=show_progress)


class GrowingIndex:
    """``indexed_until`` of an index the nightly job extends: behind the case's end for ``behind`` asks."""

    def __init__(self, *, behind: int | None, reached: datetime = RECEIVED) -> None:
        self.behind, self.reached, self.asked = behind, reached, 0

    def __call__(self) -> datetime | None:
        self.asked += 1
        if self.behind is None or self.asked <= self.behind:
            return self.reached - timedelta(minutes=10)
        return self.reached


@pytest.mark.parametrize(("behind", "reached_by"), [
    (3, RECEIVED - timedelta(seconds=30)),  # its newest minute bucket starts before the end it covers
    (0, RECEIVED),
])
def test_a_case_waits_for_the_index_to_reach_its_end(tmp_path: Path, behind: int, reached_by: datetime) -> None:
    harness = Harness(tmp_path, listen_wait="1m")
    index = GrowingIndex(behind=behind, reached=reached_by)
    worker = CaseWorker(harness.diagnoser, settings=harness.settings, out=harness.out, indexed_until=index,
                        poll_s=0.01)
    with TestClient(create_app(worker, settings=harness.settings, clock=lambda: RECEIVED)) as client:
        assert client.post("/alerts", json=FIRING).json()["accepted"] == [_id("HighErrorRate")]
        _until("answer", _settled(client, answered=1))
    assert index.asked == behind + 1 and harness.backend.calls == 1


def test_past_listen_wait_a_case_is_diagnosed_on_what_the_index_holds(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    harness = Harness(tmp_path, listen_wait="1s")
    index = GrowingIndex(behind=None)
    worker = CaseWorker(harness.diagnoser, settings=harness.settings, out=harness.out, indexed_until=index,
                        poll_s=0.01)
    with caplog.at_level(logging.WARNING, logger="diagnose.receiver"), \
            TestClient(create_app(worker, settings=harness.settings, clock=lambda: RECEIVED)) as client:
        client.post("/alerts", json=FIRING)
        _until("answer", _settled(client, answered=1))
    assert index.asked > 1 and len(harness.answers()) == 1
    [said] = [r.message for r in caplog.records if "diagnosed on what it holds" in r.message]
    assert "the index reaches 2025-06-05T07:59:30.250000+00:00 only" in said


def test_stopping_while_a_case_waits_for_the_index_drops_it_at_once(tmp_path: Path) -> None:
    harness = Harness(tmp_path, listen_wait="10m")
    index = GrowingIndex(behind=None)
    worker = CaseWorker(harness.diagnoser, settings=harness.settings, out=harness.out, indexed_until=index,
                        poll_s=60.0)
    started = time.monotonic()
    with TestClient(create_app(worker, settings=harness.settings, clock=lambda: RECEIVED)) as client:
        client.post("/alerts", json=FIRING)
        _until("a wait", lambda: index.asked >= 1)
    assert time.monotonic() - started < WAIT_S  # not the ten minutes, nor the poll's minute
    assert harness.backend.calls == 0 and not harness.out.exists()


def test_a_failed_case_is_logged_and_counted_and_the_receiver_goes_on(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    harness = Harness(tmp_path)
    worker = CaseWorker(FlakyDiagnoser(harness.diagnoser), settings=harness.settings, out=harness.out)
    with caplog.at_level(logging.INFO, logger="diagnose.receiver"), \
            TestClient(create_app(worker, settings=harness.settings, clock=lambda: RECEIVED)) as client:
        for group in ("A", "B", "C"):
            assert client.post("/alerts", json=_payload(group, _alert("p", starts="2025-06-05T08:00:00Z"))).json()[
                "accepted"] == [_id(group)]
        _until("cases", _settled(client, answered=1, failed=2))
        # A failed case is not answered: sent again, its group is tried again.
        assert client.post("/alerts", json=_payload("A", _alert("p", starts="2025-06-05T08:00:00Z"))).json()[
            "accepted"] == [_id("A")]
        _until("cases", _settled(client, answered=2, failed=2))
    assert [a["uuid"] for a in harness.answers()] == [_id("C"), _id("A")]
    failures = [r for r in caplog.records if r.levelno == logging.WARNING and "failed, not answered" in r.message]
    assert [f"{_id('A')} failed" in r.message and "no telemetry in the window" in r.message for r in failures[:1]] == [True]
    assert len(failures) == 2 and _id("B") in failures[1].message
    bug = [r for r in caplog.records if r.levelno == logging.ERROR and _id("B") in r.message]
    assert len(bug) == 1 and bug[0].exc_info is not None  # the traceback, in the log
    answered = [r for r in caplog.records if r.levelno == logging.INFO and "answered in" in r.message]
    assert len(answered) == 2


def test_stopping_finishes_the_case_in_progress_and_drops_the_queued(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    harness = Harness(tmp_path)
    harness.backend.gate.clear()
    with caplog.at_level(logging.INFO, logger="diagnose.receiver"):
        with TestClient(harness.app) as client:
            for group in ("A", "B", "C"):
                client.post("/alerts", json=_payload(group, _alert("p", starts="2025-06-05T08:00:00Z")))
            assert harness.backend.entered.wait(WAIT_S)
            threading.Timer(0.3, harness.backend.gate.set).start()  # A answers while the app stops
        # The TestClient's exit ran the lifespan's shutdown: the worker stopped.
    assert [a["uuid"] for a in harness.answers()] == [_id("A")]
    assert harness.out.read_bytes().endswith(b"\n")  # nothing half-written
    assert f"2 queued case(s) dropped, not diagnosed: {_id('B')}, {_id('C')}" in caplog.text
    assert f"stopping once case {_id('A')}, in progress, is answered" in caplog.text
    assert harness.backend.calls == 1


# --------------------------------------------------------------------------- the command


@pytest.mark.parametrize(("flags", "expected"), [
    (["--listen", "9095"], "--listen '9095': expected HOST:PORT, e.g. 127.0.0.1:9095"),
    (["--listen", "127.0.0.1:99999"], "expected HOST:PORT"),
    (["--listen", "127.0.0.1:0"], "port 1-65535"),
    (["--listen", "http://127.0.0.1:9095"], "expected HOST:PORT"),
    (["--listen", "127.0.0.1:9095", "--alerts", "alerts.json"], "give one of --alerts, --listen"),
    (["--listen", "127.0.0.1:9095", "--alertmanager", "http://am:9093"], "give one of --alertmanager, --listen"),
    (["--listen", "127.0.0.1:9095", "--uuid", "x", "--print-prompt"],
     "--listen serves until stopped, answers to --out: leave out --uuid, --print-prompt"),
])
def test_cli_listen_is_one_more_case_source(flags: list[str], expected: str) -> None:
    result = runner.invoke(cli_app, ["diagnose", *flags])
    assert result.exit_code == 2 and expected in result.output, result.output


def _fake_wiring(monkeypatch: pytest.MonkeyPatch, backend: GatedBackend, evidence: StaticEvidence) -> dict:
    import diagnose.service

    seen: dict[str, object] = {}

    def wired(settings: Settings, *, case_windows=None) -> Diagnoser:
        seen["case_windows"] = case_windows
        return Diagnoser(settings=settings, evidence=evidence, knowledge=StaticKnowledge(), llm=backend)

    monkeypatch.setattr(diagnose.service.Diagnoser, "from_settings", staticmethod(wired))
    return seen


def test_cli_port_in_use_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _fake_wiring(monkeypatch, GatedBackend(), StaticEvidence(_candidates()))
    with closing(listening_socket("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = runner.invoke(cli_app, ["diagnose", "--listen", f"127.0.0.1:{port}", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 2 and f"--listen 127.0.0.1:{port}: cannot listen there" in result.output, result.output
    assert seen == {}  # refused before the model loads


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_cli_serves_until_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_signal: signal.Signals) -> None:
    """`rca diagnose --listen 127.0.0.1:PORT --out FILE`: serves POST /alerts, answers to FILE, and stops
    cleanly on SIGTERM or SIGINT (status 0, saying what it did)."""
    backend, evidence = GatedBackend(), StaticEvidence(_candidates())
    seen = _fake_wiring(monkeypatch, backend, evidence)
    with closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "webhook.jsonl"
    url = f"http://127.0.0.1:{port}"
    replies: list[httpx.Response] = []

    # An alert that fired two minutes ago: its window ends when the payload arrives (now).
    fired = (datetime.now(UTC) - timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    firing_now = _payload("HighErrorRate", _alert("checkoutservice-0", starts=fired))

    def client() -> None:
        _until("receiver", lambda: _get_ok(f"{url}/healthz"))  # a receiver that never came: no signal to send
        try:
            replies.append(httpx.post(f"{url}/alerts", json=firing_now, timeout=10))
            _until("answer", lambda: httpx.get(f"{url}/healthz", timeout=5).json()["answered"] == 1)
        finally:
            os.kill(os.getpid(), stop_signal)

    thread = threading.Thread(target=client)
    thread.start()
    # No index here to wait for (listen_wait 0): asked once how far it reaches, the case goes on at once.
    result = runner.invoke(cli_app, ["diagnose", "--listen", f"127.0.0.1:{port}", "--out", str(out),
                                     "--runs-dir", str(tmp_path / "runs"), "--input", str(tmp_path / "none.json")],
                           env={"RCA_DIAGNOSE__LISTEN_WAIT": "0"})
    thread.join()
    assert result.exit_code == 0, result.output
    assert [r.status_code for r in replies] == [202]
    assert [json.loads(line)["uuid"] for line in out.read_text(encoding="utf-8").splitlines()] == [_id("HighErrorRate")]
    assert (tmp_path / "runs" / "webhook" / f"{_id('HighErrorRate')}.json").exists()
    assert seen["case_windows"] == [] and evidence.queries[0][1] > datetime.now(UTC) - timedelta(minutes=1)
    assert f"listening on http://127.0.0.1:{port}/alerts" in result.output
    assert f"stopped ({stop_signal.name}): 1 answered, 0 failed, in {out}" in result.output


def _get_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


# --------------------------------------------------------------------------- a real Alertmanager


class RecordingWorker(CaseWorker):
    """The receiver's worker, keeping each payload it was offered, when, and what became of it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.offers: list[tuple[dict[str, Any], datetime, Offer]] = []

    def offer(self, payload: dict[str, Any], *, received: datetime) -> Offer:
        result = super().offer(payload, received=received)
        self.offers.append((payload, received, result))
        return result


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[str, RecordingWorker, StaticEvidence, Path]]:
    """The receiver served by uvicorn in a thread on a free loopback port."""
    import uvicorn

    settings = _settings(tmp_path)
    evidence = StaticEvidence(_candidates())
    diagnoser = Diagnoser(settings=settings, evidence=evidence, knowledge=StaticKnowledge(), llm=GatedBackend())
    out = tmp_path / "answers.jsonl"
    worker = RecordingWorker(diagnoser, settings=settings, out=out)
    sock = listening_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(worker, settings=settings), log_config=None,
                                          access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    _until("uvicorn", lambda: server.started)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", worker, evidence, out
    finally:
        server.should_exit = True
        thread.join(timeout=WAIT_S)
        sock.close()


def test_a_real_alertmanager_notifies_the_receiver(served, tmp_path: Path) -> None:
    """Alertmanager (group_wait 1s, group_interval 1s) with this receiver as its webhook: two groups
    fire, one changes (a third alert: sent again), the other resolves (sent again, resolved). Exactly
    one case per group is diagnosed, named <alertname>-<sha256(groupKey)>, from the lead before the
    earliest startsAt of its first payload to the time that payload was received."""
    receiver_url, worker, evidence, out = served
    binary, _ = _binaries()
    config = tmp_path / "alertmanager.yml"
    config.write_text(f"""\
route:
  receiver: rca
  group_by: [alertname, service]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: rca
    webhook_configs:
      - url: {receiver_url}/alerts
        send_resolved: true
""", encoding="utf-8")
    url = f"http://127.0.0.1:{free_port()}"
    log_path = tmp_path / "alertmanager.log"
    command = [binary, f"--config.file={config}", f"--storage.path={tmp_path / 'data'}", "--cluster.listen-address=",
               f"--web.listen-address={url.removeprefix('http://')}"]
    checkout_id, cart_id = _case_id("HighErrorRate", CHECKOUT_KEY), _case_id("HighLatency", CART_KEY)

    def offered(key: str, status: str, count: int = 1) -> Callable[[], bool]:
        return lambda: sum(p["groupKey"] == key and p["status"] == status for p, _, _ in worker.offers) >= count

    with running(command, log_path=log_path) as server:
        def wait(what: str, done: Callable[[], bool]) -> None:
            wait_until(what, done, server=server, log_path=log_path, timeout_s=WAIT_S, name="alertmanager")

        wait("readiness", ready(url))
        now = datetime.now(UTC)
        sent = [am_alert("checkoutservice-0", "checkoutservice", "HighErrorRate", "errors", _z(now - timedelta(minutes=3))),
                am_alert("checkoutservice-1", "checkoutservice", "HighErrorRate", "errors", _z(now - timedelta(minutes=2))),
                am_alert("cartservice-0", "cartservice", "HighLatency", "p99", _z(now - timedelta(minutes=4)))]
        assert httpx.post(f"{url}/api/v2/alerts", json=sent, timeout=10).status_code == 200
        wait("firing payloads of both groups", lambda: offered(CHECKOUT_KEY, "firing")() and offered(CART_KEY, "firing")())
        # The checkout group changes (sent again, firing); the cart alert resolves (sent again, resolved).
        more = am_alert("checkoutservice-2", "checkoutservice", "HighErrorRate", "errors", _z(now - timedelta(minutes=1)))
        resolved = am_alert("cartservice-0", "cartservice", "HighLatency", "p99", _z(now - timedelta(minutes=4)),
                            _z(datetime.now(UTC) - timedelta(seconds=1)))
        assert httpx.post(f"{url}/api/v2/alerts", json=[more, resolved], timeout=10).status_code == 200
        wait("the changed checkout group, sent again", offered(CHECKOUT_KEY, "firing", 2))
        wait("the resolved cart group", offered(CART_KEY, "resolved"))
        wait("both answers", lambda: worker.counts() == {"queued": 0, "answered": 2, "failed": 0})

    assert [json.loads(line)["uuid"] for line in out.read_text(encoding="utf-8").splitlines()] == [
        offer.accepted[0] for _, _, offer in worker.offers if offer.accepted]
    assert sorted(offer.accepted[0] for _, _, offer in worker.offers if offer.accepted) == sorted([checkout_id, cart_id])
    expected_windows = []
    for payload, received, offer in worker.offers:
        case_id = checkout_id if payload["groupKey"] == CHECKOUT_KEY else cart_id
        if offer.accepted:  # the first firing payload of its group
            assert offer.accepted == [case_id] and offer.skipped == []
            first = min(datetime.fromisoformat(a["startsAt"]) for a in payload["alerts"])
            expected_windows.append((first - LEAD, received))
            assert now - timedelta(seconds=5) < received < datetime.now(UTC)
        elif payload["status"] == "resolved":
            assert offer.skipped == [{"id": case_id, "reason": "resolved: not diagnosed"}]
        else:  # sent again: diagnosed once
            assert offer.skipped[0]["id"] == case_id
            assert offer.skipped[0]["reason"] in ("already queued", "already diagnosed"), offer
    assert evidence.queries == expected_windows


def test_the_bounds_are_settings() -> None:
    defaults = load_settings(environ={}).diagnose
    assert (defaults.listen_max_body_bytes, defaults.listen_max_queue) == (1024 * 1024, 100)
    env = load_settings(environ={"RCA_DIAGNOSE__LISTEN_MAX_QUEUE": "5", "RCA_DIAGNOSE__LISTEN_MAX_BODY_BYTES": "4096"})
    assert (env.diagnose.listen_max_body_bytes, env.diagnose.listen_max_queue) == (4096, 5)
    flagged = load_settings(environ={"RCA_DIAGNOSE__LISTEN_MAX_QUEUE": "5"}, overrides={"diagnose": {"listen_max_queue": 7}})
    assert flagged.diagnose.listen_max_queue == 7
    with pytest.raises(ValueError, match="listen_max_queue"):
        load_settings(environ={"RCA_DIAGNOSE__LISTEN_MAX_QUEUE": "0"})
