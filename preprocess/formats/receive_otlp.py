"""``rca import otlp --listen HOST:PORT --out DIR``: an OTLP/HTTP receiver, where an OpenTelemetry
Collector's ``otlphttp`` exporter (or an SDK's OTLP/HTTP exporter) sends its telemetry.

| route | what |
| --- | --- |
| ``POST /v1/traces``, ``/v1/metrics``, ``/v1/logs`` | one export request, ``application/x-protobuf`` or ``application/json``, gzip or not: 200 and an empty ``Export*ServiceResponse`` (in the request's encoding) once the request is saved; 400 not an export request of that signal, 413 larger than the body limit (unzipped too), 415 another media type or encoding, 503 when the saved requests not yet imported pass their limit (``Retry-After``); a refusal's body is a ``google.rpc.Status`` with the reason |
| ``GET /healthz`` | ``{received, pending, imported, failed_imports}`` (requests) |

An accepted request is saved before it is answered, atomically, as it was sent (unzipped: a protobuf
message, ``.binpb``, or an OTLP/JSON document, ``.json``) under ``DIR/.received/otlp/``: a 200 is never
lost to a crash or a kill. Every ``import_every`` the saved requests are imported into the dataset by the
OTLP reader and the dataset writer, exactly as ``rca import otlp FILES`` imports files, then deleted; and
once more when the receiver stops. A counter's rate reaches back to its last point of the round before,
kept in ``DIR/.received/otlp-counters.json`` across a restart too. A receiver started on the same ``DIR``
imports what a stopped one left. The writer's merge drops exact duplicates, so a request imported twice
(a stop between the write and the delete) lands once.

Spec: https://opentelemetry.io/docs/specs/otlp/#otlphttp (what the Collector sends and expects). FastAPI is
the ``server`` extra, as for ``rca diagnose --listen``: only the command's listen mode imports this module.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from google.protobuf.message import DecodeError, Message
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from preprocess.formats import FormatResult
from preprocess.formats.otlp import CounterRates, OtlpReader
from rca.atomic import write_bytes_atomic, write_json_atomic
from rca.errors import RcaError
from rca.httpserve import RequestRefused, read_body
from rca.jsonlimits import json_depth

log = logging.getLogger(__name__)

RECEIVED_DIR = ".received"  # hidden: not a day directory of the layout, as .pulled
COUNTERS_FILE = "otlp-counters.json"  # beside otlp/, whose *.json are requests
PROTOBUF, JSON = "application/x-protobuf", "application/json"
MAX_JSON_DEPTH = 64  # an OTLP request nests about 12 levels; attribute values (kvlists, arrays) a few more
RETRY_AFTER_S = 30
# google.rpc.Code of a refusal, by HTTP status (the OTLP/HTTP spec maps them so).
_STATUS_CODES = {400: 3, 413: 8, 415: 3, 503: 14}  # INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE


@dataclass(frozen=True)
class Signal:
    """One of OTLP's three signals: its request and response types, the request's top-level list, and how
    its gRPC service is added to a server."""

    name: str  # traces | metrics | logs: the HTTP route /v1/<name>
    request: type[Message]
    response: type[Message]
    key: str  # resourceSpans | resourceMetrics | resourceLogs
    add_service: Callable[[Any, grpc.Server], None]


SIGNALS: dict[str, Signal] = {signal.name: signal for signal in (
    Signal("traces", ExportTraceServiceRequest, ExportTraceServiceResponse, "resourceSpans",
           trace_service_pb2_grpc.add_TraceServiceServicer_to_server),
    Signal("metrics", ExportMetricsServiceRequest, ExportMetricsServiceResponse, "resourceMetrics",
           metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server),
    Signal("logs", ExportLogsServiceRequest, ExportLogsServiceResponse, "resourceLogs",
           logs_service_pb2_grpc.add_LogsServiceServicer_to_server),
)}


@dataclass(frozen=True)
class ReceiveLimits:
    """What one receiver takes: a request's bytes (sent, and unzipped) and the bytes saved but not yet imported;
    and how many of those one import round reads at once (its memory: the rest goes in the next rounds)."""

    max_body_bytes: int = 32 * 1024 * 1024
    max_pending_bytes: int = 1024 * 1024 * 1024
    max_round_bytes: int = 128 * 1024 * 1024


def _unzipped(body: bytes, *, limit: int) -> bytes:
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing
    try:
        data = inflate.decompress(body, limit + 1)
    except zlib.error as exc:
        raise RequestRefused(400, f"Content-Encoding gzip, but the body is not gzip: {exc}") from exc
    if len(data) > limit or inflate.unconsumed_tail:
        raise RequestRefused(413, f"body of more than {limit} bytes unzipped; this receiver takes at most {limit}")
    return data


def checked_request(signal: Signal, body: bytes, *, content_type: str, content_encoding: str,
                    limit: int) -> tuple[str, bytes]:
    """``(media type, request bytes unzipped)`` of one POST once it reads as an export request of ``signal``;
    ``RequestRefused`` saying what is wrong. The bytes are kept as sent: the OTLP reader decodes them at the
    import (protobuf's conversion to OTLP/JSON costs a hundred times its parse: not in the answer's path)."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media not in (PROTOBUF, JSON):
        raise RequestRefused(415, f"Content-Type {content_type or '(none)'!r}: send {PROTOBUF} or {JSON}")
    encoding = content_encoding.strip().lower()
    if encoding == "gzip":
        body = _unzipped(body, limit=limit)
    elif encoding not in ("", "identity"):
        raise RequestRefused(415, f"Content-Encoding {content_encoding!r}: send gzip or none")
    where = f"POST /v1/{signal.name}"
    if media == PROTOBUF:
        message = signal.request()
        try:
            message.ParseFromString(body)
        except DecodeError as exc:
            raise RequestRefused(400, f"{where}: not an {signal.request.__name__} (protobuf): {exc}") from exc
        return media, body
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RequestRefused(400, f"{where}: body is not JSON: {exc}") from exc
    if json_depth(document) > MAX_JSON_DEPTH:
        raise RequestRefused(400, f"{where}: body is nested more than {MAX_JSON_DEPTH} levels deep")
    if not isinstance(document, dict) or not isinstance(document.get(signal.key, []), list):
        raise RequestRefused(400, f"{where}: not an {signal.request.__name__} (a JSON object whose "
                                  f"'{signal.key}' is a list)")
    return media, body


@dataclass
class ImportRound:
    """What one import of the saved requests did."""

    requests: int
    result: FormatResult
    written: list[Path] = field(default_factory=list)


class OtlpInbox:
    """The requests a receiver accepted, saved under ``out/.received/otlp/`` until they are imported into ``out``."""

    def __init__(self, out: Path, *, limits: ReceiveLimits) -> None:
        self.out = Path(out)
        self.root = self.out / RECEIVED_DIR / "otlp"
        self.root.mkdir(parents=True, exist_ok=True)
        for torn in self.root.glob(".*.tmp"):  # a write a kill interrupted: never answered, so never owed
            torn.unlink(missing_ok=True)
        self.limits = limits
        self._lock = threading.Lock()  # the counters and the pending bytes
        self._importing = threading.Lock()  # one import at a time
        self._sequence = itertools.count()
        self.received = self.imported = self.failed_imports = 0
        self._pending_bytes = sum(path.stat().st_size for path in self.pending())
        # Each cumulative counter's last point, from one round to the next, and across a restart.
        self.counters_file = self.out / RECEIVED_DIR / COUNTERS_FILE
        self._counters = self._saved_counters()

    def _saved_counters(self) -> CounterRates:
        """The counter memory a stopped receiver left; a fresh one (said in a WARNING) when it cannot be read."""
        if not self.counters_file.is_file():
            return CounterRates()
        try:
            return CounterRates.from_json(json.loads(self.counters_file.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            log.warning("%s: not a counter memory (%s): counters start afresh, their first point has no rate",
                        self.counters_file, exc)
            return CounterRates()

    def pending(self) -> list[Path]:
        """The saved requests not yet imported, oldest first."""
        return sorted(path for path in self.root.iterdir() if path.suffix in (".json", ".binpb"))

    def save(self, signal: Signal, media: str, request: bytes) -> Path:
        """Write one request as it was sent (unzipped), atomically; ``RequestRefused`` 503 while the inbox is full
        or when the request cannot be written (a full disk: nothing saved, so nothing owed; the sender retries)."""
        with self._lock:
            if self._pending_bytes + len(request) > self.limits.max_pending_bytes:
                raise RequestRefused(503, f"{self._pending_bytes} bytes of requests wait to be imported (at most "
                                          f"{self.limits.max_pending_bytes}); send again later",
                                     headers={"Retry-After": str(RETRY_AFTER_S)})
            self._pending_bytes += len(request)
            name = (f"{time.time_ns():020d}-{next(self._sequence):08d}-{signal.name}"
                    f"{'.json' if media == JSON else '.binpb'}")
        path = self.root / name
        try:
            write_bytes_atomic(path, request)
        except OSError as exc:
            with self._lock:
                self._pending_bytes -= len(request)
            raise RequestRefused(503, f"the request could not be saved: {exc}",
                                 headers={"Retry-After": str(RETRY_AFTER_S)}) from exc
        with self._lock:
            self.received += 1
        return path

    def import_pending(self) -> ImportRound | None:
        """Import the oldest saved requests, up to ``max_round_bytes`` (at least one), into the dataset, then
        delete them; None when none waits.

        Raises ``RcaError`` when the dataset cannot be written: the requests stay saved, for the next round."""
        from preprocess.dataset_writer import write_frames

        with self._importing:
            files: list[Path] = []
            size = 0
            for path in self.pending():
                length = path.stat().st_size
                if files and size + length > self.limits.max_round_bytes:
                    break
                files.append(path)
                size += length
            if not files:
                return None
            counters = self._counters.copy()  # adopted once the round's rows are written
            result = OtlpReader(counters=counters).read(files)
            frames = result.frames()
            try:
                written = write_frames(self.out, **frames) if frames else []
            except RcaError:
                with self._lock:
                    self.failed_imports += 1
                raise
            self._counters.adopt(counters)
            write_json_atomic(self.counters_file, counters.to_json(), indent=None)
            for path in files:
                path.unlink(missing_ok=True)
            with self._lock:
                self._pending_bytes -= size
                self.imported += len(files)
            return ImportRound(requests=len(files), result=result, written=written)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {"received": self.received, "pending": len(self.pending()), "imported": self.imported,
                    "failed_imports": self.failed_imports}


class Importer:
    """A thread that imports the inbox every ``every_s`` seconds, and once more as it stops."""

    def __init__(self, inbox: OtlpInbox, *, every_s: float, on_round: Callable[[ImportRound], None]) -> None:
        self.inbox, self.every_s, self.on_round = inbox, every_s, on_round
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rca-otlp-import", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.run_once()  # what came in after the last round

    def run_once(self) -> None:
        """Import what is saved now, a round at a time (what comes meanwhile waits for the next call)."""
        for _ in range(len(self.inbox.pending())):  # every round takes one request at least
            try:
                done = self.inbox.import_pending()
            except RcaError as exc:
                log.error("import of the received requests failed (they stay saved, tried again next round): %s",
                          exc)
                return
            if done is None:
                return
            self.on_round(done)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.run_once()


def create_app(inbox: OtlpInbox) -> FastAPI:
    """The OTLP/HTTP application, saving what it accepts into ``inbox`` (the command runs the importer beside it)."""
    app = FastAPI(title="rca OTLP/HTTP receiver", docs_url=None, redoc_url=None, openapi_url=None)

    def refused(request: Request, exc: RequestRefused) -> Response:
        (log.warning if exc.status >= 500 else log.info)("%s %s refused (%d): %s", request.method,
                                                         request.url.path, exc.status, exc.reason)
        code = _STATUS_CODES.get(exc.status, 2)
        if request.headers.get("content-type", "").split(";", 1)[0].strip().lower() == JSON:
            return JSONResponse({"code": code, "message": exc.reason}, status_code=exc.status, headers=exc.headers)
        return Response(Status(code=code, message=exc.reason).SerializeToString(), status_code=exc.status,
                        media_type=PROTOBUF, headers=exc.headers)

    async def export(request: Request, signal: Signal) -> Response:
        try:
            body = await read_body(request, limit=inbox.limits.max_body_bytes, setting="--max-body-mb")
            media, sent = checked_request(
                signal, body, content_type=request.headers.get("content-type", ""),
                content_encoding=request.headers.get("content-encoding", ""), limit=inbox.limits.max_body_bytes)
            await asyncio.to_thread(inbox.save, signal, media, sent)
        except RequestRefused as exc:
            return refused(request, exc)
        # Success: an empty Export*ServiceResponse (no partial_success), which encodes to no bytes.
        return JSONResponse({}) if media == JSON else Response(b"", media_type=PROTOBUF)

    def route(signal: Signal) -> Callable[[Request], Any]:
        async def export_signal(request: Request) -> Response:
            return await export(request, signal)
        return export_signal

    for signal in SIGNALS.values():
        app.add_api_route(f"/v1/{signal.name}", route(signal), methods=["POST"])

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        return JSONResponse(inbox.counts())

    return app


class _Exports:
    """One signal's gRPC service (``Export``): the request saved as its protobuf bytes, as an HTTP one is."""

    def __init__(self, inbox: OtlpInbox, signal: Signal) -> None:
        self.inbox, self.signal = inbox, signal

    def Export(self, request: Message, context: grpc.ServicerContext) -> Message:  # noqa: N802 (the service's name)
        try:
            self.inbox.save(self.signal, PROTOBUF, request.SerializeToString())
        except RequestRefused as exc:
            log.warning("gRPC %s refused: %s", self.signal.name, exc.reason)
            # UNAVAILABLE is the code the OTLP/gRPC spec names retryable, as HTTP's 503 is.
            context.abort(grpc.StatusCode.UNAVAILABLE if exc.status == 503 else grpc.StatusCode.INVALID_ARGUMENT,
                          exc.reason)
        return self.signal.response()


def start_grpc(inbox: OtlpInbox, *, host: str, port: int) -> tuple[grpc.Server, int]:
    """OTLP/gRPC's three services on ``host:port`` (0: any free port), started; the server and its port.

    A message larger than the body limit is refused by gRPC itself (RESOURCE_EXHAUSTED); gzip is gRPC's.
    ``OSError`` when the address cannot be bound."""
    limit = inbox.limits.max_body_bytes
    server = grpc.server(ThreadPoolExecutor(max_workers=4, thread_name_prefix="rca-otlp-grpc"),
                         options=[("grpc.max_receive_message_length", limit), ("grpc.so_reuseport", 0)])
    for signal in SIGNALS.values():
        signal.add_service(_Exports(inbox, signal), server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as exc:  # grpcio >= 1.5x raises where older ones returned 0
        raise OSError(f"cannot bind {address}: {exc}") from exc
    if not bound:
        raise OSError(f"cannot bind {address}")
    server.start()
    return server, bound
