"""``rca import otlp --listen``: the OTLP/HTTP receiver an OpenTelemetry Collector (or SDK) exports to.

What it receives must land in the dataset exactly as ``rca import otlp FILES`` lands the same requests;
what it refuses gets the status the OTLP/HTTP spec names and a ``google.rpc.Status`` saying why; what it
answered 200 is on disk before the answer. The OpenTelemetry Python SDK's own OTLP/HTTP exporters are the
client where a real one is wanted (``opentelemetry-exporter-otlp-proto-http``, a dev dependency).
"""
from __future__ import annotations

import gzip
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest
from fastapi.testclient import TestClient
from google.rpc.status_pb2 import Status
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from app.cli import app
from bench import export as ex
from preprocess.formats.receive_otlp import Importer, ImportRound, OtlpInbox, ReceiveLimits, create_app
from preprocess.readers import read_logs, read_traces
from rca.httpserve import listening_socket
from rca.system import bundled_system

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()
WAIT_S = 30.0
PROTOBUF, JSON = "application/x-protobuf", "application/json"


def _until(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {WAIT_S} s for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pl.DataFrame]:
    return ex.simulated_frames(tmp_path_factory.mktemp("sim"), cases=1, seed=11)


def _receiver(out: Path, *, limits: ReceiveLimits = ReceiveLimits(),
              ) -> tuple[TestClient, OtlpInbox, Importer, list[ImportRound]]:
    """The app under a test client, and an importer not started: its rounds run when a test stops it."""
    inbox = OtlpInbox(out, limits=limits)
    rounds: list[ImportRound] = []
    return TestClient(create_app(inbox)), inbox, Importer(inbox, every_s=3600, on_round=rounds.append), rounds


def _frames(out: Path) -> dict[str, pl.DataFrame]:
    return ex.release_frames(out)


def test_a_release_sent_over_otlp_http_lands_as_the_same_requests_imported_from_files(
        release: dict[str, pl.DataFrame], tmp_path: Path) -> None:
    traces = ex.otlp_trace_requests(release["spans"], per_request=500)
    logs = ex.otlp_log_requests(release["logs"], per_request=500)
    metrics = ex.otlp_metric_requests(apm=release["apm"], infra=release["infra"])
    received = tmp_path / "received"
    client, inbox, importer, rounds = _receiver(received)
    with client:
        for request in traces:  # protobuf, gzipped: what a Collector's otlphttp exporter sends
            reply = client.post("/v1/traces", content=gzip.compress(ex.otlp_proto_message(request)),
                                headers={"Content-Type": PROTOBUF, "Content-Encoding": "gzip"})
            assert reply.status_code == 200 and reply.content == b""
            assert reply.headers["content-type"] == PROTOBUF
        for request in logs:  # OTLP/JSON
            reply = client.post("/v1/logs", json=request)
            assert reply.status_code == 200 and reply.json() == {}
        for request in metrics:
            reply = client.post("/v1/metrics", content=ex.otlp_proto_message(request),
                                headers={"Content-Type": PROTOBUF})
            assert reply.status_code == 200
        sent = len(traces) + len(logs) + len(metrics)
        assert len(inbox.pending()) == sent  # saved before answered, not yet imported
        assert client.get("/healthz").json() == {"received": sent, "pending": sent, "imported": 0,
                                                 "failed_imports": 0}
    importer.stop()  # the command's last round
    assert not inbox.pending() and inbox.imported == sent and sum(r.requests for r in rounds) == sent

    files = tmp_path / "files"
    paths = [ex.write_otlp_json(tmp_path / "traces.json", traces), ex.write_otlp_json(tmp_path / "logs.json", logs),
             ex.write_otlp_json(tmp_path / "metrics.json", metrics)]
    imported = runner.invoke(app, ["import", "otlp", *map(str, paths), "--out", str(files)])
    assert imported.exit_code == 0, imported.output
    got, want = _frames(received), _frames(files)
    for name in ("spans", "logs", "apm", "infra"):
        order = list(want[name].columns)
        assert got[name].height == want[name].height > 0, name
        assert_frame_equal(got[name].select(order).sort(order, nulls_last=True),
                           want[name].sort(order, nulls_last=True))
    assert got["spans"].height == release["spans"].height


def _status(reply: httpx.Response) -> tuple[int, str]:
    if reply.headers["content-type"].startswith(JSON):
        body = reply.json()
        return body["code"], body["message"]
    status = Status()
    status.ParseFromString(reply.content)
    return status.code, status.message


@pytest.mark.parametrize(("route", "body", "headers", "code", "said"), [
    ("/v1/traces", b"{}", {"Content-Type": "text/plain"}, 415, "send application/x-protobuf or application/json"),
    ("/v1/traces", b"x", {"Content-Type": PROTOBUF, "Content-Encoding": "br"}, 415, "send gzip or none"),
    ("/v1/traces", b"\xff\xff\xff", {"Content-Type": PROTOBUF}, 400, "not an ExportTraceServiceRequest"),
    ("/v1/logs", b"[1, 2]", {"Content-Type": JSON}, 400, "'resourceLogs' is a list"),
    ("/v1/logs", b'{"resourceLogs": {}}', {"Content-Type": JSON}, 400, "'resourceLogs' is a list"),
    ("/v1/metrics", b"{nope", {"Content-Type": JSON}, 400, "body is not JSON"),
    ("/v1/logs", b"[" * 100 + b"]" * 100, {"Content-Type": JSON}, 400, "nested more than 64 levels"),
    ("/v1/traces", b"not gzip", {"Content-Type": PROTOBUF, "Content-Encoding": "gzip"}, 400, "not gzip"),
    ("/v1/traces", gzip.compress(b"\0" * 5000), {"Content-Type": PROTOBUF, "Content-Encoding": "gzip"}, 413,
     "more than 4096 bytes unzipped"),
    ("/v1/traces", b"\0" * 5000, {"Content-Type": PROTOBUF}, 413, "takes at most 4096"),
])
def test_a_request_refused_gets_its_status_and_a_status_message_saying_why(
        tmp_path: Path, route: str, body: bytes, headers: dict[str, str], code: int, said: str) -> None:
    client, inbox, _, _ = _receiver(tmp_path / "data", limits=ReceiveLimits(max_body_bytes=4096))
    with client:
        reply = client.post(route, content=body, headers=headers)
        assert reply.status_code == code
        grpc_code, message = _status(reply)
        assert grpc_code == {400: 3, 413: 8, 415: 3}[code] and said in message
        assert not inbox.pending() and inbox.received == 0


def test_a_full_inbox_asks_the_sender_to_retry_and_keeps_what_it_took(release: dict[str, pl.DataFrame],
                                                                      tmp_path: Path) -> None:
    bodies = [json.dumps(request).encode() for request in ex.otlp_log_requests(release["logs"].head(40),
                                                                               per_request=10)]
    room = len(bodies[0]) + len(bodies[1]) + min(len(bodies[2]), len(bodies[3])) - 1  # two, not three
    client, inbox, importer, _ = _receiver(tmp_path / "data", limits=ReceiveLimits(max_pending_bytes=room))
    with client:
        statuses = [client.post("/v1/logs", content=body, headers={"Content-Type": JSON}) for body in bodies]
        assert [r.status_code for r in statuses] == [200, 200, 503, 503]
        assert statuses[2].headers["retry-after"] == "30" and "send again later" in _status(statuses[2])[1]
        assert len(inbox.pending()) == 2
        importer.run_once()  # a round: room again
        assert client.post("/v1/logs", content=bodies[2], headers={"Content-Type": JSON}).status_code == 200
    importer.stop()
    assert not inbox.pending() and inbox.imported == 3
    taken = release["logs"].head(30)
    lines = read_logs(tmp_path / "data", start=taken["time"].min(), end=taken["time"].max() + timedelta(seconds=1))
    assert lines.frame.height == 30


def test_requests_a_stopped_receiver_left_are_imported_by_the_next(release: dict[str, pl.DataFrame],
                                                                   tmp_path: Path) -> None:
    out = tmp_path / "data"
    spans = release["spans"].head(300)
    first = OtlpInbox(out, limits=ReceiveLimits())
    client = TestClient(create_app(first))  # no importer: as if the process were killed after answering
    for request in ex.otlp_trace_requests(spans, per_request=100):
        assert client.post("/v1/traces", json=request).status_code == 200
    assert len(first.pending()) == 3

    again = OtlpInbox(out, limits=ReceiveLimits())
    done = again.import_pending()
    assert done is not None and done.requests == 3 and not again.pending()
    frame = read_traces(out, start=spans["start"].min(), end=spans["start"].max(), naming=bundled_system().trace).frame
    assert frame.height == 300
    assert again.import_pending() is None  # nothing left; a rerun of the import writes nothing


@pytest.fixture()
def command(tmp_path: Path) -> Iterator[tuple[str, Path, subprocess.Popen[str]]]:
    """``rca import otlp --listen`` as a user runs it, on a free loopback port, importing every second."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "data"
    process = subprocess.Popen([sys.executable, "-m", "app.cli", "import", "otlp", "--listen", f"127.0.0.1:{port}",
                                "--out", str(out), "--import-every", "1"], cwd=ROOT, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return process.poll() is not None
    _until("the receiver", up)
    try:
        yield url, out, process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_opentelemetry_sdk_exports_to_the_command_and_a_sigterm_imports_the_rest(
        command: tuple[str, Path, subprocess.Popen[str]]) -> None:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    url, out, process = command
    assert process.poll() is None, process.stderr.read() if process.stderr else ""
    resource = Resource.create({"service.name": "checkout", "k8s.pod.name": "checkout-0",
                                "k8s.namespace.name": "shop", "k8s.node.name": "node-1"})
    spans = TracerProvider(resource=resource)
    spans.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{url}/v1/traces",
                                                                  compression=Compression.Gzip)))
    tracer = spans.get_tracer("test")
    with tracer.start_as_current_span("PlaceOrder", kind=trace.SpanKind.SERVER) as root:
        with tracer.start_as_current_span("Charge", kind=trace.SpanKind.CLIENT, attributes={"peer.service": "payment"}):
            pass
    spans.shutdown()
    logs = LoggerProvider(resource=resource)
    logs.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{url}/v1/logs")))
    app_log = logging.getLogger("checkout.payments")  # the service's own logging, bridged by the SDK
    app_log.propagate = False
    with warnings.catch_warnings():  # the SDK's handler is deprecated for a contrib package's: it still sends
        warnings.simplefilter("ignore", DeprecationWarning)
        app_log.addHandler(LoggingHandler(logger_provider=logs))
    app_log.error("payment declined: card expired")
    logs.shutdown()

    healthz = httpx.get(f"{url}/healthz", timeout=5).json()
    assert healthz["received"] == 3 and healthz["failed_imports"] == 0  # two spans, one log record
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=WAIT_S)
    assert process.returncode == 0, stderr
    assert "stopped (SIGTERM): 3 request(s) received, 3 imported" in stderr
    trace_id = format(root.get_span_context().trace_id, "032x")
    start, end = datetime.now(UTC) - timedelta(hours=1), datetime.now(UTC) + timedelta(minutes=1)
    frame = read_traces(out, start=start, end=end, naming=bundled_system().trace).frame
    assert sorted(zip(frame["trace_id"].to_list(), frame["operation"].to_list(), frame["service"].to_list(),
                      frame["pod"].to_list())) == [(trace_id, "Charge", "checkout", "checkout-0"),
                                                   (trace_id, "PlaceOrder", "checkout", "checkout-0")]
    lines = read_logs(out, start=start, end=end).frame
    # The OTLP reader writes a record's severity before its body, as the layout's lines carry their level.
    assert lines["message"].to_list() == ["ERROR payment declined: card expired"]
    assert lines["pod"].to_list() == ["checkout-0"]


def test_the_command_takes_files_or_listen_and_its_flags_only_with_listen(tmp_path: Path) -> None:
    export = ex.write_otlp_json(tmp_path / "t.json", [])
    both = runner.invoke(app, ["import", "otlp", str(export), "--listen", "127.0.0.1:4318", "--out", str(tmp_path)])
    assert both.exit_code == 2 and "not both" in both.output
    neither = runner.invoke(app, ["import", "otlp", "--out", str(tmp_path)])
    assert neither.exit_code == 2 and "--listen HOST:PORT" in neither.output
    stray = runner.invoke(app, ["import", "otlp", str(export), "--import-every", "5", "--out", str(tmp_path)])
    assert stray.exit_code == 2 and "--import-every only apply with --listen" in stray.output
    bad = runner.invoke(app, ["import", "otlp", "--listen", "localhost", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "expected HOST:PORT, e.g. 127.0.0.1:4318" in bad.output
    with listening_socket("127.0.0.1", 0) as taken:
        port = taken.getsockname()[1]
        busy = runner.invoke(app, ["import", "otlp", "--listen", f"127.0.0.1:{port}", "--out", str(tmp_path)])
    assert busy.exit_code == 2 and "cannot listen there" in busy.output


def test_an_import_that_cannot_write_keeps_the_requests_for_the_next_round(
        release: dict[str, pl.DataFrame], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    import preprocess.dataset_writer as writer

    out = tmp_path / "data"
    inbox = OtlpInbox(out, limits=ReceiveLimits())
    rounds: list[ImportRound] = []
    importer = Importer(inbox, every_s=3600, on_round=rounds.append)
    client = TestClient(create_app(inbox))
    for request in ex.otlp_log_requests(release["logs"].head(20), per_request=10):
        assert client.post("/v1/logs", json=request).status_code == 200

    def refuse(*_args: Any, **_kwargs: Any) -> list[Path]:
        raise writer.DatasetWriteError(f"{out}: no space left on device")
    monkeypatch.setattr(writer, "write_frames", refuse)
    importer.run_once()
    assert len(inbox.pending()) == 2 and inbox.counts()["failed_imports"] == 1 and not rounds
    assert "they stay saved" in caplog.text and "no space left" in caplog.text
    monkeypatch.undo()
    importer.run_once()
    assert not inbox.pending() and [r.requests for r in rounds] == [2] and rounds[0].result.logs is not None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_sdk_exports_over_grpc_to_the_command_alone(tmp_path: Path) -> None:
    """``--listen-grpc`` without ``--listen``: the OpenTelemetry SDK's OTLP/gRPC exporter (gzip) as the client."""
    import grpc as grpc_module
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    port, out = _free_port(), tmp_path / "data"
    process = subprocess.Popen([sys.executable, "-m", "app.cli", "import", "otlp", "--listen-grpc",
                                f"127.0.0.1:{port}", "--out", str(out), "--import-every", "1"], cwd=ROOT, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})

    def up() -> bool:
        if process.poll() is not None:
            return True
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0
    try:
        _until("the gRPC receiver", up)
        assert process.poll() is None, process.communicate()[1]
        provider = TracerProvider(resource=Resource.create({"service.name": "cart", "k8s.pod.name": "cart-0"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
            endpoint=f"127.0.0.1:{port}", insecure=True, compression=grpc_module.Compression.Gzip)))
        with provider.get_tracer("test").start_as_current_span("GetCart", kind=trace.SpanKind.SERVER) as span:
            pass
        provider.shutdown()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    assert "(OTLP/gRPC)" in stderr and "stopped (SIGTERM): 1 request(s) received, 1 imported" in stderr
    start, end = datetime.now(UTC) - timedelta(hours=1), datetime.now(UTC) + timedelta(minutes=1)
    frame = read_traces(out, start=start, end=end, naming=bundled_system().trace).frame
    assert frame["trace_id"].to_list() == [format(span.get_span_context().trace_id, "032x")]
    assert (frame["service"].to_list(), frame["pod"].to_list()) == (["cart"], ["cart-0"])


def test_grpc_refuses_a_message_over_the_limit_and_asks_for_a_retry_when_full(
        release: dict[str, pl.DataFrame], tmp_path: Path) -> None:
    import grpc as grpc_module
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub

    from preprocess.formats.receive_otlp import start_grpc

    messages = [ex.otlp_proto_message(r) for r in ex.otlp_log_requests(release["logs"].head(400), per_request=100)]
    room = len(messages[0]) + len(messages[1]) + 1  # two, not three
    inbox = OtlpInbox(tmp_path / "data", limits=ReceiveLimits(max_body_bytes=4 * len(messages[0]),
                                                              max_pending_bytes=room))
    server, port = start_grpc(inbox, host="127.0.0.1", port=0)
    try:
        with grpc_module.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = LogsServiceStub(channel)

            def send(data: bytes) -> grpc_module.StatusCode:
                request = ExportLogsServiceRequest()
                request.ParseFromString(data)
                try:
                    stub.Export(request, timeout=10)
                except grpc_module.RpcError as exc:
                    return exc.code()
                return grpc_module.StatusCode.OK

            assert [send(m) for m in messages[:3]] == [grpc_module.StatusCode.OK, grpc_module.StatusCode.OK,
                                                        grpc_module.StatusCode.UNAVAILABLE]
            too_big = ex.otlp_proto_message(ex.otlp_log_requests(release["logs"].head(2000), per_request=2000)[0])
            assert len(too_big) > 4 * len(messages[0]) and send(too_big) == grpc_module.StatusCode.RESOURCE_EXHAUSTED
    finally:
        server.stop(grace=None)
    assert len(inbox.pending()) == 2


def test_a_backlog_is_imported_in_rounds_of_bounded_size(release: dict[str, pl.DataFrame], tmp_path: Path) -> None:
    bodies = [ex.otlp_proto_message(r) for r in ex.otlp_trace_requests(release["spans"].head(600), per_request=100)]
    sizes = [len(body) for body in bodies]
    inbox = OtlpInbox(tmp_path / "data", limits=ReceiveLimits(max_round_bytes=sizes[0] + sizes[1]))
    client = TestClient(create_app(inbox))
    for body in bodies:
        assert client.post("/v1/traces", content=body, headers={"Content-Type": PROTOBUF}).status_code == 200
    rounds: list[ImportRound] = []
    Importer(inbox, every_s=3600, on_round=rounds.append).run_once()
    assert sum(r.requests for r in rounds) == 6 and len(rounds) >= 3 and all(r.requests <= 2 for r in rounds)
    assert not inbox.pending()
    frame = read_traces(tmp_path / "data", start=release["spans"]["start"].min(),
                        end=release["spans"]["start"].max(), naming=bundled_system().trace).frame
    assert frame.height == 600


def test_a_request_that_cannot_be_saved_is_a_retryable_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import preprocess.formats.receive_otlp as receiving

    def full(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(receiving, "write_bytes_atomic", full)
    client, inbox, _, _ = _receiver(tmp_path / "data")
    reply = client.post("/v1/logs", json={"resourceLogs": []})
    assert reply.status_code == 503 and reply.headers["retry-after"] == "30"
    assert "could not be saved" in _status(reply)[1] and "No space left" in _status(reply)[1]
    assert inbox.counts() == {"received": 0, "pending": 0, "imported": 0, "failed_imports": 0}


def test_a_counters_rate_reaches_across_import_rounds_and_survives_a_failed_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import preprocess.dataset_writer as writer
    from tests.test_otlp_reader import T0, _point, _request

    out = tmp_path / "data"
    inbox = OtlpInbox(out, limits=ReceiveLimits())
    client = TestClient(create_app(inbox))

    def send(*points: dict[str, Any]) -> None:
        assert client.post("/v1/metrics", json=_request(list(points))).status_code == 200

    send(_point(0, 100.0), _point(1, 130.0))
    assert inbox.import_pending() is not None  # round 1: the rate at minute 1
    send(_point(2, 160.0))
    real = writer.write_frames

    def refuse(*_args: Any, **_kwargs: Any) -> list[Path]:
        raise writer.DatasetWriteError("disk full")
    monkeypatch.setattr(writer, "write_frames", refuse)
    with pytest.raises(writer.DatasetWriteError):
        inbox.import_pending()  # round 2 fails: its request stays, the counter memory is not advanced
    monkeypatch.setattr(writer, "write_frames", real)
    assert inbox.import_pending() is not None  # round 2 again: minute 2's rate from minute 1's point
    start = datetime.fromtimestamp(T0 / 1e9, UTC)
    from preprocess.readers import read_infra

    rows = read_infra(out, start=start, end=start + timedelta(minutes=5)).frame.sort("time")
    assert [((t - start) // timedelta(minutes=1), v) for t, v in rows.select("time", "value").iter_rows()] == \
        [(1, 0.5), (2, 0.5)]


def test_a_restarted_receiver_keeps_its_counters_rates(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from preprocess.readers import read_infra
    from tests.test_otlp_reader import T0, _point, _request

    out = tmp_path / "data"

    def round_of(inbox: OtlpInbox, *points: dict[str, Any]) -> None:
        assert TestClient(create_app(inbox)).post("/v1/metrics", json=_request(list(points))).status_code == 200
        assert inbox.import_pending() is not None

    round_of(OtlpInbox(out, limits=ReceiveLimits()), _point(0, 100.0), _point(1, 130.0))
    assert (out / ".received" / "otlp-counters.json").is_file()
    round_of(OtlpInbox(out, limits=ReceiveLimits()), _point(2, 160.0))  # a new process: minute 2 has its rate
    (out / ".received" / "otlp-counters.json").write_text("{not json", encoding="utf-8")
    round_of(OtlpInbox(out, limits=ReceiveLimits()), _point(3, 190.0))  # unreadable memory: said, then afresh
    assert "not a counter memory" in caplog.text and "start afresh" in caplog.text
    start = datetime.fromtimestamp(T0 / 1e9, UTC)
    rows = read_infra(out, start=start, end=start + timedelta(minutes=5)).frame.sort("time")
    assert [((t - start) // timedelta(minutes=1), v) for t, v in rows.select("time", "value").iter_rows()] == \
        [(1, 0.5), (2, 0.5)]
