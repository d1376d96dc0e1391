"""``rca diagnose --listen HOST:PORT``: the webhook receiver Alertmanager (or Grafana) notifies.

Alertmanager POSTs an alert group to a ``webhook_configs`` URL when it fires, whenever it changes
(``group_interval``) and again every ``repeat_interval``. Each firing group is one case, named and
windowed as ``--alerts`` names and windows a payload of a file (``diagnose.cases.alert_cases``), except
that the receiver knows when the payload came: a still-firing alert ends there, not ``alert_span``
after its start. One worker thread diagnoses the cases in the order they came, with the one
``Diagnoser`` (its model loaded once), and appends each answer to ``--out`` as a batch does. An alert
fires before the telemetry of its last minutes is indexed: with ``[sources]`` configured, a case first
pulls them and builds the index for them (``diagnose/refresh.py``); then it waits, up to ``[diagnose]
listen_wait``, for the index to reach its end.

| route | what |
| --- | --- |
| ``POST /alerts`` | one webhook payload: 202 ``{accepted: [case ids], skipped: [{id, reason}]}``; 400 not one (the reason names the field), 413 too large, 503 queue full (``Retry-After``) |
| ``GET /healthz`` | ``{queued, answered, failed}`` (queued: waiting or in progress; answered, failed: since the start) |
| ``GET /answers?limit=N`` | the latest answers of this server, oldest first (N: 1 to 100, default 20) |

A group already queued or answered (in ``--out``, this run or an earlier one) is skipped, so the
same group sent again is diagnosed once; a group whose case failed is tried again when it is sent
again. A resolved group is accepted and not diagnosed.
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from diagnose.cases import Case, CaseError, alert_cases
from diagnose.runner import RunSummary, finished_uuids
from rca.challenge import rule_version
from rca.errors import RcaError
from rca.httpserve import RequestRefused, read_body
from rca.jsonlimits import json_depth
from rca.settings import Settings

if TYPE_CHECKING:  # the refresh pulls in the nightly job (polars ...): only its callers import it
    from diagnose.refresh import Refresh

log = logging.getLogger(__name__)

ALERTS_PATH = "/alerts"
SOURCE = f"POST {ALERTS_PATH}"  # names the request in every error about its payload
# A webhook payload nests four levels (payload, alerts, alert, labels); Grafana's `values` one more.
MAX_JSON_DEPTH = 10
MAX_ANSWERS_SHOWN = 100  # GET /answers?limit=N: the bound of N, and the answers kept in memory
DEFAULT_ANSWERS_SHOWN = 20
RETRY_AFTER_S = 60  # a full queue: Retry-After (Alertmanager retries a 5xx notification with its own backoff)
INDEX_POLL_S = 15.0  # how often a case waiting for the index asks how far it reaches
# The index's tables hold minute buckets: its newest minute covers telemetry up to a minute later.
INDEX_BUCKET = timedelta(minutes=1)


class CaseRunner(Protocol):
    """What the worker needs of a ``Diagnoser``: a batch of cases, answers appended to ``out``."""

    def run(self, cases: Sequence[Case], *, out: Path, show_progress: bool = True) -> RunSummary: ...


@dataclass(frozen=True)
class Offer:
    """What became of one payload: the case ids queued, and the others with the reason."""

    accepted: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "skipped": self.skipped}


def parse_payload(raw: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> dict[str, Any]:
    """One webhook payload from a request body: UTF-8 JSON, an object, at most ``max_depth`` deep, with
    ``alerts``; else ``RequestRefused`` 400 saying what is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestRefused(400, f"{SOURCE}: body is not UTF-8 (byte {exc.start})") from exc
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestRefused(400, f"{SOURCE}: body is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") \
            from exc
    except RecursionError as exc:  # the C parser bounds its own recursion
        raise RequestRefused(400, f"{SOURCE}: body is nested more than {max_depth} levels deep") from exc
    if json_depth(document) > max_depth:
        raise RequestRefused(400, f"{SOURCE}: body is nested more than {max_depth} levels deep")
    if not isinstance(document, dict):
        raise RequestRefused(400, f"{SOURCE}: expected one Alertmanager webhook payload (a JSON object "
                                f"{{groupKey, status, alerts: [...]}}), got a {type(document).__name__}")
    if "alerts" not in document:
        raise RequestRefused(400, f"{SOURCE}: not an Alertmanager webhook payload: missing field 'alerts'")
    return document


class CaseWorker:
    """The one thread that diagnoses the received cases, in the order they came, with one diagnoser.

    ``offer`` (called by the requests) turns a payload into its case and queues it unless it is
    queued or answered already; ``start``/``stop`` run the thread. ``stop`` lets the case in
    progress finish (its answer and run record are written whole) and drops the ones waiting,
    with a log line: Alertmanager sends their groups again.
    """

    def __init__(self, diagnoser: CaseRunner, *, settings: Settings, out: Path,
                 indexed_until: Callable[[], datetime | None] | None = None,
                 refresh: Refresh | None = None, poll_s: float = INDEX_POLL_S) -> None:
        """``indexed_until`` says how far the index reaches (``index.status.newest_telemetry``; it returns
        None for no telemetry): a case waits up to ``[diagnose] listen_wait`` for it to reach its end,
        asking every ``poll_s`` seconds. Without it a case is diagnosed at once. ``refresh`` (``[sources]``
        configured: ``diagnose.refresh.SourceRefresh``) brings the case's telemetry into the index first;
        its failures are logged there, and the case waits and is diagnosed on what the index holds."""
        self._diagnoser = diagnoser
        self._settings = settings
        self._out = out
        self._indexed_until = indexed_until
        self._refresh = refresh
        self._poll_s = poll_s
        self._rules = rule_version(settings.challenge.rules)
        self._max_queue = settings.diagnose.listen_max_queue
        self._answered_ids = finished_uuids(out)  # NotAnAnswerFile: --out is not ours, refused untouched
        self._waiting: deque[Case] = deque()
        self._current: str | None = None
        self._answers: deque[dict[str, Any]] = deque(maxlen=MAX_ANSWERS_SHOWN)
        self._answered = 0
        self._failed = 0
        self._stopping = False
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    @property
    def out(self) -> Path:
        return self._out

    def offer(self, payload: dict[str, Any], *, received: datetime) -> Offer:
        """Queue the firing group of ``payload`` (one webhook payload), received at ``received``.

        Raises ``RequestRefused``: 400 when the payload gives no case (the reason names the field), 503
        when the queue is full or the receiver is stopping."""
        try:
            found = alert_cases(payload, source=SOURCE, lead=self._settings.diagnose.alert_lead,
                                span=self._settings.diagnose.alert_span, now=received, sent=received)
        except CaseError as exc:
            raise RequestRefused(400, str(exc)) from exc
        if not found.cases:
            raise RequestRefused(400, "; ".join(found.bad.values()) or f"{SOURCE}: no alert in the payload")
        skipped = [{"id": place, "reason": error} for place, error in found.bad.items()]  # its unreadable alerts
        if payload.get("status") == "resolved":
            log.info("group %s resolved: not diagnosed", ", ".join(c.uuid for c in found.cases))
            return Offer([], [{"id": c.uuid, "reason": "resolved: not diagnosed"} for c in found.cases] + skipped)
        with self._wake:
            if self._stopping:
                raise RequestRefused(503, "the receiver is stopping", headers={"Retry-After": str(RETRY_AFTER_S)})
            queued = {c.uuid for c in self._waiting} | ({self._current} if self._current else set())
            fresh: list[Case] = []
            for case in found.cases:
                if case.uuid in self._answered_ids:
                    skipped.append({"id": case.uuid, "reason": "already diagnosed"})
                elif case.uuid in queued:
                    skipped.append({"id": case.uuid, "reason": "already queued"})
                else:
                    fresh.append(case)
            if fresh and len(self._waiting) + len(fresh) > self._max_queue:
                raise RequestRefused(503, f"queue full: {len(self._waiting)} cases wait (diagnose.listen_max_queue "
                                        f"{self._max_queue}); retry later",
                                   headers={"Retry-After": str(RETRY_AFTER_S)})
            self._waiting.extend(fresh)
            self._wake.notify_all()
        for case in fresh:
            log.debug("queued case %s: %s to %s", case.uuid, case.start.isoformat(), case.end.isoformat())
        return Offer([c.uuid for c in fresh], skipped)

    def counts(self) -> dict[str, int]:
        with self._wake:
            return {"queued": len(self._waiting) + (self._current is not None), "answered": self._answered,
                    "failed": self._failed}

    def latest(self, limit: int) -> list[dict[str, Any]]:
        """The latest ``limit`` answers of this server, oldest first."""
        with self._wake:
            return list(self._answers)[-limit:] if limit > 0 else []

    def start(self) -> None:
        with self._wake:
            if self._thread is not None:
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._work, name="rca-receiver", daemon=True)
        self._thread.start()

    def stop(self) -> list[str]:
        """Stop after the case in progress; returns the ids of the cases dropped, never started."""
        with self._wake:
            self._stopping = True
            dropped = [case.uuid for case in self._waiting]
            self._waiting.clear()
            current = self._current
            self._wake.notify_all()
        if dropped:
            log.warning("stopping: %d queued case(s) dropped, not diagnosed: %s (Alertmanager sends their groups "
                        "again)", len(dropped), ", ".join(dropped))
        if current is not None:
            log.warning("stopping once case %s, in progress, is answered", current)
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return dropped

    def _work(self) -> None:
        while True:
            with self._wake:
                while not self._waiting and not self._stopping:
                    self._wake.wait()
                if self._stopping:
                    return
                case = self._waiting.popleft()
                self._current = case.uuid
            try:
                self._refreshed(case)
                if self._indexed(case):
                    self._diagnose(case)
            finally:
                with self._wake:
                    self._current = None

    def _refreshed(self, case: Case) -> None:
        """Pull and index ``case``'s telemetry (``refresh``), in this thread: one case at a time, and the next
        waits for it. Whatever fails, the case goes on to the wait with what the index holds."""
        if self._refresh is None:
            return
        started = time.monotonic()
        try:
            done = self._refresh(start=case.start, end=case.end)
        except Exception:  # a bug: its traceback in the log, and the case still goes on
            log.exception("case %s: refreshing its telemetry stopped by an unexpected error", case.uuid)
            return
        log.info("case %s: telemetry %s..%s refreshed in %.1f s (pulled: %s%s)", case.uuid, done.start.isoformat(),
                 done.end.isoformat(), time.monotonic() - started, ", ".join(done.pulled) or "nothing",
                 f"; failed: {', '.join(done.failures)}" if done.failures else "")

    def _indexed(self, case: Case) -> bool:
        """Wait (up to ``listen_wait``) until the index reaches ``case``'s end; False when stopped meanwhile.

        Past the wait the case is diagnosed on what the index holds, said in the log: the answer's data
        status names the minutes it lacks."""
        if self._indexed_until is None:
            return True
        waited = time.monotonic()
        deadline = waited + self._settings.diagnose.listen_wait.total_seconds()
        while True:
            try:
                reached = self._indexed_until()
            except RcaError as exc:  # no index yet, or one being replaced: as if it reached nothing
                log.info("case %s: the index cannot say how far it reaches (%s)", case.uuid, exc)
                reached = None
            if reached is not None and reached + INDEX_BUCKET >= case.end:
                if time.monotonic() - waited >= self._poll_s:
                    log.info("case %s: the index reached its end after %.0f s", case.uuid, time.monotonic() - waited)
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("case %s: the index reaches %s only, its window ends %s; diagnosed on what it holds "
                            "(keep `rca preprocess` running every few minutes, or raise diagnose.listen_wait)",
                            case.uuid, reached.isoformat() if reached else "no telemetry", case.end.isoformat())
                return True
            with self._wake:
                if not self._stopping:
                    self._wake.wait(timeout=min(self._poll_s, left))
                if self._stopping:
                    log.warning("case %s: stopped while it waited for the index: not diagnosed (Alertmanager sends "
                                "its group again)", case.uuid)
                    return False

    def _diagnose(self, case: Case) -> None:
        """One case through the diagnoser; a failure is logged and counted, never raised."""
        started = time.monotonic()
        try:
            summary = self._diagnoser.run([case], out=self._out, show_progress=False)
        except RcaError as exc:  # a backend failure, an --out that is no answer file ...
            self._fail(case, str(exc))
            return
        except Exception:  # a bug: its traceback in the log, and the receiver goes on
            log.exception("case %s: diagnosis stopped by an unexpected error", case.uuid)
            self._fail(case, "unexpected error (traceback above)")
            return
        if case.uuid in summary.failed:
            self._fail(case, summary.failed[case.uuid])
            return
        if not summary.records:  # answered in --out meanwhile (another process): nothing new
            with self._wake:
                self._answered_ids.add(case.uuid)
            log.info("case %s: already answered in %s", case.uuid, self._out)
            return
        final = summary.records[0].final_answer()
        with self._wake:
            self._answered_ids.add(case.uuid)
            self._answered += 1
            self._answers.append(final.to_submission(rules=self._rules))
        log.info("case %s answered in %.1f s: %s", case.uuid, time.monotonic() - started, final.component or "-")

    def _fail(self, case: Case, reason: str) -> None:
        with self._wake:
            self._failed += 1
        log.warning("case %s failed, not answered: %s (sent again, its group is tried again)", case.uuid, reason)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def create_app(worker: CaseWorker, *, settings: Settings, clock: Callable[[], datetime] = _utc_now) -> FastAPI:
    """The receiver's application; ``worker`` starts and stops with it (its lifespan).

    ``clock``: the time a payload is received (its still-firing alerts end there)."""
    limit = settings.diagnose.listen_max_body_bytes

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        worker.start()
        try:
            yield
        finally:
            await asyncio.to_thread(worker.stop)  # the case in progress finishes; the loop stays free

    app = FastAPI(title="rca webhook receiver", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(RequestRefused)
    async def _refused(_request: Request, exc: RequestRefused) -> JSONResponse:
        if exc.status >= 500:
            log.warning("%s refused (%d): %s", SOURCE, exc.status, exc.reason)
        else:
            log.info("%s refused (%d): %s", SOURCE, exc.status, exc.reason)
        return JSONResponse({"error": exc.reason}, status_code=exc.status, headers=exc.headers)

    @app.post(ALERTS_PATH)
    async def alerts(request: Request) -> JSONResponse:
        received = clock()
        payload = parse_payload(await read_body(request, limit=limit, setting="diagnose.listen_max_body_bytes"))
        return JSONResponse(worker.offer(payload, received=received).to_json(), status_code=202)

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        return JSONResponse(worker.counts())

    @app.get("/answers")
    async def answers(request: Request) -> JSONResponse:
        text = request.query_params.get("limit", str(DEFAULT_ANSWERS_SHOWN))
        if not text.isdigit() or not 1 <= int(text) <= MAX_ANSWERS_SHOWN:
            raise RequestRefused(400, f"limit {text!r}: expected a whole number from 1 to {MAX_ANSWERS_SHOWN}")
        return JSONResponse({"answers": worker.latest(int(text))})

    return app
