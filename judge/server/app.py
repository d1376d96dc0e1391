"""The judge server's ASGI application (FastAPI): the official submission protocol, pages and a JSON API.

| route | what |
| --- | --- |
| ``POST /`` | submit ``{"data": [...]}`` with headers ``ticket``, ``contest`` |
| ``GET /status``, ``GET /status/`` | one submission of the caller (header ``submission`` or ``submission_id``) |
| ``GET /api/submissions`` | the caller's submissions with their aggregate figures |
| ``GET /api/contests/{c}/leaderboard`` | the public ranking (JSON) |
| ``GET /api/queue`` | how many submissions wait / are being scored |
| ``GET /``, ``/leaderboard/{c}``, ``/team`` | HTML pages |

Database work runs in the thread pool; the request path never scores (the worker does).
"""
from __future__ import annotations

import json
import logging
import threading
import uuid as uuidlib
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from sqlalchemy import Engine, func, select
from starlette.concurrency import run_in_threadpool

from judge.server import pages, store
from judge.server.board import leaderboard
from judge.server.models import NAME_CHARS, Submission
from judge.server.protocol import (
    CONTEST_INVALID,
    CONTEST_MISSING,
    INVALID_FORMAT,
    NOT_FOUND,
    QUOTA_EXCEEDED,
    SUBMISSION_ID_MISSING,
    TICKET_INVALID,
    TICKET_MISSING,
    TOO_LARGE,
    TOO_MANY,
    Limits,
    ProtocolError,
    check_answers,
    parse_body,
)
from judge.server.quota import Clock, RateLimiter, quota_day, time_zone, utc_now
from judge.server.scoring import ContestSpec, contest_spec
from judge.server.worker import ScoringWorker
from rca.settings import JudgeServerSettings

log = logging.getLogger(__name__)

MAX_HEADER_CHARS = 256
MAX_FORM_BYTES = 4096


def _json(body: dict[str, Any], status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status)


async def read_body(request: Request, *, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes ``limit`` bytes (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ProtocolError(400, INVALID_FORMAT, ["Content-Length is not a number"])
        if int(declared) > limit:
            raise ProtocolError(413, TOO_LARGE, [f"{declared} bytes; this server takes at most {limit}"])
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ProtocolError(413, TOO_LARGE, [f"more than {limit} bytes"])
        chunks.append(chunk)
    return b"".join(chunks)


class JudgeService:
    """Everything a request does, synchronously (called from the thread pool)."""

    def __init__(self, engine: Engine, *, settings: JudgeServerSettings, clock: Clock) -> None:
        self.engine = engine
        self.settings = settings
        self.clock = clock
        self.limits = Limits.from_settings(settings)
        self.zone = time_zone(settings.timezone)
        self.limiter = RateLimiter(max_requests=settings.rate_max_requests, window_s=settings.rate_window_s,
                                   clock=clock)
        self._specs: dict[int, ContestSpec] = {}
        self._specs_lock = threading.Lock()

    def authenticate(self, headers: Mapping[str, str]) -> store.Caller:
        ticket = headers.get("ticket", "").strip()
        if not ticket:
            raise ProtocolError(401, TICKET_MISSING)
        contest_name = headers.get("contest", "").strip()
        if not contest_name:
            raise ProtocolError(401, CONTEST_MISSING)
        if len(contest_name) > NAME_CHARS:
            raise ProtocolError(401, CONTEST_INVALID)
        if len(ticket) > MAX_HEADER_CHARS:
            raise ProtocolError(401, TICKET_INVALID)
        with store.reading(self.engine) as session:
            contest = store.contest_by_name(session, contest_name)
            if contest is None:
                raise ProtocolError(401, CONTEST_INVALID)
            team = store.find_team(session, contest_id=contest.id, ticket=ticket)
            if team is None:
                raise ProtocolError(401, TICKET_INVALID)
            caller = store.Caller(contest_id=contest.id, contest_name=contest.name, team_id=team.id,
                                  team_name=team.name)
        if not self.limiter.allow(caller.team_id):
            raise ProtocolError(429, TOO_MANY)
        return caller

    def spec(self, contest_id: int) -> ContestSpec:
        with self._specs_lock:
            if contest_id not in self._specs:
                self._specs[contest_id] = contest_spec(store.load_contest(self.engine, contest_id))
            return self._specs[contest_id]

    def submit(self, caller: store.Caller, raw: bytes) -> dict[str, Any]:
        data = parse_body(raw, limits=self.limits)
        check_answers(data, spec=self.spec(caller.contest_id), limits=self.limits)
        now = self.clock()
        try:
            accepted = store.accept_submission(
                self.engine, caller=caller, payload=json.dumps(data, ensure_ascii=False), now=now,
                day=quota_day(now, self.zone), daily_quota=self.settings.daily_quota,
                total_quota=self.settings.total_quota,
            )
        except store.QuotaExceeded as exc:
            log.info("quota exceeded: %s", exc)
            raise ProtocolError(403, QUOTA_EXCEEDED) from exc
        log.info("accepted submission %s of team %s (%s)", accepted.submission_id, caller.team_name,
                 caller.contest_name)
        return {"submission_id": accepted.submission_id, "remaining_attempts": accepted.remaining,
                "remaining_attempts_today": accepted.remaining_today}

    def status(self, caller: store.Caller, submission_id: str) -> dict[str, Any]:
        try:
            uuidlib.UUID(submission_id)
        except ValueError as exc:
            raise ProtocolError(404, NOT_FOUND) from exc
        with store.reading(self.engine) as session:
            found = store.own_submission(session, caller=caller, submission_id=submission_id)
            if found is None:
                raise ProtocolError(404, NOT_FOUND)
            return {
                "submission_id": found.id, "score": found.score, "create_time": store.iso_utc(found.create_time),
                "judge_time": store.iso_utc(found.judge_time), "status": found.status, "error": found.error,
                "queue_position": store.queue_position(session, found),
            }

    def history(self, caller: store.Caller) -> list[dict[str, Any]]:
        with store.reading(self.engine) as session:
            rows = store.team_submissions(session, team_id=caller.team_id)
        return [{"submission_id": s.id, "create_time": store.iso_utc(s.create_time),
                 "judge_time": store.iso_utc(s.judge_time), "status": s.status, "score": s.score,
                 "error": s.error, "summary": json.loads(s.summary) if s.summary else None} for s in rows]

    def board(self, contest_name: str) -> tuple[str | None, list[Any]]:
        with store.reading(self.engine) as session:
            contest = store.contest_by_name(session, contest_name[:NAME_CHARS + 1])
            if contest is None:
                raise ProtocolError(404, "Contest not found")
            rows = leaderboard(store.contest_teams(session, contest_id=contest.id),
                               store.contest_submissions(session, contest_id=contest.id, until=contest.frozen_at))
            return store.iso_utc(contest.frozen_at), rows

    def queue(self) -> dict[str, int]:
        with store.reading(self.engine) as session:
            counts = dict(session.execute(
                select(Submission.status, func.count()).group_by(Submission.status)).all())
        return {state: int(counts.get(state, 0)) for state in (store.QUEUED, store.SCORING, store.DONE, store.ERROR)}

    def contests(self) -> list[tuple[str, str, str]]:
        return [(c.name, c.kind, c.rules) for c in store.list_contests(self.engine)]


def create_app(engine: Engine, *, settings: JudgeServerSettings, worker: ScoringWorker | None,
               clock: Clock = utc_now) -> FastAPI:
    """The application over an upgraded database; ``worker`` (started with the app) scores submissions."""
    service = JudgeService(engine, settings=settings, clock=clock)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if worker is not None:
            worker.start()
        yield
        if worker is not None:
            worker.stop()

    app = FastAPI(title="judge server", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service

    @app.exception_handler(ProtocolError)
    async def _protocol_error(_request: Request, exc: ProtocolError) -> JSONResponse:
        return _json(exc.body(), exc.status)

    @app.post("/")
    async def submit(request: Request) -> JSONResponse:
        caller = await run_in_threadpool(service.authenticate, request.headers)
        raw = await read_body(request, limit=settings.max_body_bytes)
        reply = await run_in_threadpool(service.submit, caller, raw)
        if worker is not None:
            worker.notify()
        return _json(reply)

    async def status(request: Request) -> JSONResponse:
        caller = await run_in_threadpool(service.authenticate, request.headers)
        submission_id = (request.headers.get("submission") or request.headers.get("submission_id") or "").strip()
        if not submission_id:
            raise ProtocolError(401, SUBMISSION_ID_MISSING)
        return _json(await run_in_threadpool(service.status, caller, submission_id))

    app.get("/status")(status)
    app.get("/status/")(status)

    @app.get("/api/submissions")
    async def own_submissions(request: Request) -> JSONResponse:
        caller = await run_in_threadpool(service.authenticate, request.headers)
        history = await run_in_threadpool(service.history, caller)
        return _json({"contest": caller.contest_name, "team": caller.team_name, "submissions": history})

    @app.get("/api/contests/{contest}/leaderboard")
    async def board_json(contest: str) -> JSONResponse:
        frozen_at, rows = await run_in_threadpool(service.board, contest)
        return _json({"contest": contest, "frozen_at": frozen_at, "ranking": [r.to_json() for r in rows]})

    @app.get("/api/queue")
    async def queue() -> JSONResponse:
        return _json(await run_in_threadpool(service.queue))

    @app.get("/", response_class=HTMLResponse)
    async def index() -> HTMLResponse:
        return HTMLResponse(pages.index_page(await run_in_threadpool(service.contests)))

    @app.get("/leaderboard/{contest}", response_class=HTMLResponse)
    async def board_page(contest: str) -> HTMLResponse:
        try:
            frozen_at, rows = await run_in_threadpool(service.board, contest)
        except ProtocolError as exc:
            return HTMLResponse(pages.page("Not found", f"<p>{exc.detail}</p>"), status_code=exc.status)
        return HTMLResponse(pages.leaderboard_page(contest, rows, frozen_at))

    @app.get("/team", response_class=HTMLResponse)
    async def team_form() -> HTMLResponse:
        return HTMLResponse(pages.team_form())

    @app.post("/team", response_class=HTMLResponse)
    async def team_page(request: Request) -> HTMLResponse:
        # The ticket comes in a form body, never in the URL (URLs end up in logs).
        try:
            raw = await read_body(request, limit=MAX_FORM_BYTES)
            form = {k: v[0] for k, v in parse_qs(raw.decode("utf-8", errors="replace")).items()}
            caller = await run_in_threadpool(service.authenticate, form)
        except ProtocolError as exc:
            return HTMLResponse(pages.team_form(exc.detail), status_code=exc.status)
        history = await run_in_threadpool(service.history, caller)
        latest = next((h["summary"] for h in reversed(history) if h["status"] == store.DONE), None)
        return HTMLResponse(pages.team_page(caller.contest_name, caller.team_name, history, latest))

    return app
