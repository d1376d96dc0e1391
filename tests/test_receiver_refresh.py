"""``rca diagnose --listen`` with ``[sources]``: each received case pulls its telemetry and indexes it first.

The receiver's worker (diagnose/receiver.py) is given the refresh the command builds
(``diagnose.cli._source_refresh``, diagnose/refresh.py) over a fake Prometheus on 127.0.0.1 answering
two pods' memory (tests/test_import_pull.py's), with a fake Loki and Tempo where the ranges each is asked
for are checked, and the nightly job is the real one, into a temporary index. The model is tests/test_receiver.py's double, the evidence static: what is checked is what the
refresh asked the server, what the index holds afterwards, and that nothing stops the case.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from diagnose.cli import _source_refresh
from diagnose.receiver import CaseWorker, create_app
from diagnose.refresh import Refreshed
from diagnose.service import Diagnoser
from index import store
from index.lock import writer_lock
from index.status import newest_telemetry
from rca.settings import Settings, load_settings
from tests.fake_http import Answer, FakeServer
from tests.fakes import StaticEvidence, StaticKnowledge
from tests.test_import_pull import PROM_METRIC, prometheus
from tests.test_import_tempo import tempo_trace, tempo_with
from tests.test_receiver import RECEIVED, GatedBackend, _alert, _candidates, _id, _payload, _settled, _until

FIRED = "2025-06-05T08:02:00Z"
CASE_START = datetime(2025, 6, 5, 7, 57, tzinfo=UTC)  # FIRED less the 5-minute lead
# Less [index] baseline_minutes (30) and, for the metrics, the metric detector's history_minutes (120) before it.
BASELINE_START = CASE_START - timedelta(minutes=30)
PULL_START = BASELINE_START - timedelta(minutes=120)


pytestmark = pytest.mark.usefixtures("fast_retries")


def _settings(tmp_path: Path, *, sources: dict[str, Any] | None) -> Settings:
    return load_settings(environ={}, overrides={
        "paths": {"runs_dir": tmp_path / "runs", "input_file": tmp_path / "no-input.json",
                  "data_dir": tmp_path / "data", "index_dir": tmp_path / "index"},
        "diagnose": {"alert_lead": "5m", "alert_span": "10m", "listen_wait": "0"},
        **({"sources": sources} if sources else {})})


class Receiver:
    """The receiver as ``--listen`` wires it, its refresh counted."""

    def __init__(self, settings: Settings, tmp_path: Path) -> None:
        self.settings = settings
        self.out = tmp_path / "answers.jsonl"
        refresh = _source_refresh(settings)
        assert refresh is not None
        self.calls: list[tuple[datetime, datetime]] = []
        self.done: list[Refreshed] = []

        def counted(*, start: datetime, end: datetime) -> Refreshed:
            self.calls.append((start, end))
            self.done.append(refresh(start=start, end=end))
            return self.done[-1]

        diagnoser = Diagnoser(settings=settings, evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge(),
                              llm=GatedBackend())
        self.worker = CaseWorker(diagnoser, settings=settings, out=self.out, refresh=counted,
                                 indexed_until=lambda: newest_telemetry(settings.paths.index_dir))
        self.app = create_app(self.worker, settings=settings, clock=lambda: RECEIVED)


def _seconds(instant: datetime) -> str:
    ms = int(instant.timestamp() * 1000)
    return f"{ms // 1000}.{ms % 1000:03d}"


def test_a_case_pulls_its_baseline_and_window_and_the_index_then_holds_them(
        serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    server = serve(prometheus)
    settings = _settings(tmp_path, sources={"prometheus": {"url": server.url, "queries": [PROM_METRIC]}})
    receiver = Receiver(settings, tmp_path)
    payload = _payload("HighErrorRate", _alert("checkoutservice-1", starts=FIRED))
    with TestClient(receiver.app) as client:
        assert client.post("/alerts", json=payload).json()["accepted"] == [_id("HighErrorRate")]
        _until("the answer", _settled(client, answered=1))
        assert client.post("/alerts", json=payload).json()["skipped"][0]["reason"] == "already diagnosed"
        time.sleep(0.1)

    assert receiver.calls == [(CASE_START, RECEIVED)]  # one refresh, the case's window: resent, not again
    (done,) = receiver.done
    assert (done.start, done.end) == (PULL_START, RECEIVED) and done.ok and done.pulled == ["prometheus"]
    (asked,) = [r.params for r in server.requests if r.path == "/api/v1/query_range"]
    assert (asked["start"], asked["end"], asked["step"]) == (_seconds(PULL_START), _seconds(RECEIVED), "60.000")

    # The nightly job ran for the day of the range (CST 2025-06-05), and the index reaches the case's end.
    assert done.days == ["2025-06-05"] and done.written >= 1
    index = settings.paths.index_dir
    assert store.load_manifest(index).partitions[store.partition_key("2025-06-05", "metric")].rows
    newest = newest_telemetry(index)
    assert newest is not None and newest + timedelta(minutes=1) >= RECEIVED
    assert (settings.paths.data_dir / ".pulled" / "prometheus").is_dir()


def test_a_failed_pull_is_a_warning_and_the_case_is_still_answered(
        serve: Callable[[Answer], FakeServer], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    refusing = serve(lambda path, params: (400, {"status": "error", "errorType": "bad_data", "error": "parse error"}))
    receiver = Receiver(_settings(tmp_path, sources={"prometheus": {"url": refusing.url, "queries": ["up"]}}),
                        tmp_path)
    caplog.set_level(logging.INFO)
    with TestClient(receiver.app) as client:
        client.post("/alerts", json=_payload("HighErrorRate", _alert("checkoutservice-1", starts=FIRED)))
        _until("the answer", _settled(client, answered=1))
    (done,) = receiver.done
    assert list(done.failures) == ["prometheus"] and "parse error" in done.failures["prometheus"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("prometheus not pulled" in w and "HTTP 400" in w for w in warnings), warnings
    assert done.days == []  # nothing pulled, no day directory: no build


def test_a_build_that_cannot_run_is_a_warning_and_the_case_goes_on(
        serve: Callable[[Answer], FakeServer], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = serve(prometheus)
    settings = _settings(tmp_path, sources={"prometheus": {"url": server.url, "queries": [PROM_METRIC]}})
    settings.paths.index_dir.write_text("not a directory", encoding="utf-8")
    receiver = Receiver(settings, tmp_path)
    with TestClient(receiver.app) as client:
        client.post("/alerts", json=_payload("HighErrorRate", _alert("checkoutservice-1", starts=FIRED)))
        _until("the answer", _settled(client, answered=1))
    (done,) = receiver.done
    assert done.pulled == ["prometheus"] and "index" in done.failures
    assert any("was not built" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_the_refresh_waits_for_another_writer_of_the_index(serve: Callable[[Answer], FakeServer],
                                                           tmp_path: Path) -> None:
    server = serve(prometheus)
    settings = _settings(tmp_path, sources={"prometheus": {"url": server.url, "queries": [PROM_METRIC]}})
    receiver = Receiver(settings, tmp_path)
    with TestClient(receiver.app) as client:
        with writer_lock(settings.paths.index_dir):  # a timer's `rca preprocess` in progress
            client.post("/alerts", json=_payload("HighErrorRate", _alert("checkoutservice-1", starts=FIRED)))
            _until("the pull", lambda: any(r.path == "/api/v1/query_range" for r in server.requests))
            time.sleep(1.5)  # past the lock's poll: the build must still be waiting
            assert client.get("/healthz").json() == {"queued": 1, "answered": 0, "failed": 0}
        _until("the answer", _settled(client, answered=1))
    assert receiver.done[0].ok and receiver.done[0].written >= 1


def test_without_sources_the_receiver_has_no_refresh(tmp_path: Path) -> None:
    assert _source_refresh(_settings(tmp_path, sources=None)) is None


def test_with_listen_index_a_case_indexes_what_was_pushed_into_the_data_dir(tmp_path: Path) -> None:
    """The push pipeline: traces sent to ``rca import otlp --listen`` land in the data directory; an alert then
    makes the webhook receiver (``diagnose.listen_index``, no [sources]) build the index for the case's days."""
    from preprocess.formats.receive_otlp import OtlpInbox, ReceiveLimits
    from preprocess.formats.receive_otlp import create_app as otlp_app

    settings = load_settings(environ={}, overrides={
        "paths": {"runs_dir": tmp_path / "runs", "input_file": tmp_path / "no-input.json",
                  "data_dir": tmp_path / "data", "index_dir": tmp_path / "index"},
        "diagnose": {"alert_lead": "5m", "alert_span": "10m", "listen_wait": "0", "listen_index": True}})
    inbox = OtlpInbox(settings.paths.data_dir, limits=ReceiveLimits())
    with TestClient(otlp_app(inbox)) as collector:
        for minute in range(0, 13):  # one trace a minute, from the case's first minute to when it is received
            trace = tempo_trace(minute, CASE_START + timedelta(minutes=minute))
            assert collector.post("/v1/traces", json={"resourceSpans": trace["batches"]}).status_code == 200
    assert inbox.import_pending() is not None  # the receiver's import round
    assert newest_telemetry(settings.paths.index_dir) is None  # pushed, not yet indexed

    receiver = Receiver(settings, tmp_path)
    with TestClient(receiver.app) as client:
        client.post("/alerts", json=_payload("HighErrorRate", _alert("checkoutservice-1", starts=FIRED)))
        _until("the answer", _settled(client, answered=1))
    (done,) = receiver.done
    assert done.ok and done.pulled == [] and done.days == ["2025-06-05"] and done.written >= 1
    assert store.load_manifest(settings.paths.index_dir).partitions[store.partition_key("2025-06-05", "trace")].rows
    newest = newest_telemetry(settings.paths.index_dir)
    assert newest is not None and newest >= CASE_START + timedelta(minutes=12)


def test_metrics_reach_back_their_detectors_history_and_logs_and_traces_only_the_baseline(
        serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    prometheus_server, loki_server, tempo_server = serve(prometheus), serve(_empty_loki), serve(tempo_with([]))
    settings = _settings(tmp_path, sources={"prometheus": {"url": prometheus_server.url, "queries": [PROM_METRIC]},
                                            "loki": {"url": loki_server.url, "queries": ['{namespace="shop"}']},
                                            "tempo": {"url": tempo_server.url}})
    receiver = Receiver(settings, tmp_path)
    with TestClient(receiver.app) as client:
        client.post("/alerts", json=_payload("HighErrorRate", _alert("checkoutservice-1", starts=FIRED)))
        _until("the answer", _settled(client, answered=1))
    (metrics,) = [r.params for r in prometheus_server.requests if r.path == "/api/v1/query_range"]
    assert metrics["start"] == _seconds(PULL_START)
    logs = [r.params for r in loki_server.requests if r.path == "/loki/api/v1/query_range"]
    assert logs and min(int(r["start"]) for r in logs) == int(BASELINE_START.timestamp()) * 10**9
    searches = [r.params for r in tempo_server.requests if r.path == "/api/search"]
    assert searches and min(int(r["start"]) for r in searches) == int(BASELINE_START.timestamp())
    (done,) = receiver.done
    assert (done.start, done.end) == (PULL_START, RECEIVED)  # the widest range: its days are indexed


def _empty_loki(path: str, params: dict[str, str]) -> tuple[int, Any]:
    """A Loki holding no line in the range (the pull is what is checked)."""
    if path != "/loki/api/v1/query_range":
        return 404, "404 page not found"
    return 200, {"status": "success", "data": {"resultType": "streams", "result": []}}
