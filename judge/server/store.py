"""Database access of the judge server: engine, migrations, and every read and write it makes.

SQLite (the default, one file under ``data/``) and PostgreSQL go through the same code. Two
choices keep concurrent requests correct on both:

- SQLite transactions start with ``BEGIN IMMEDIATE``: a transaction that reads a team's counts
  and then inserts holds the write lock from its first statement, so two requests of one team
  cannot both pass the quota check (and none fails with "database is locked" on lock upgrade).
- PostgreSQL locks the team row (``SELECT ... FOR UPDATE``) for the same check, and the worker
  claims with ``FOR UPDATE SKIP LOCKED``; SQLite renders neither clause.
"""
from __future__ import annotations

import hashlib
import json
import logging
import secrets
import threading
import uuid as uuidlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from alembic import command
from alembic.config import Config
from sqlalchemy import CursorResult, Engine, create_engine, event, func, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError
from sqlalchemy.orm import Session, defer

from judge.server.models import NAME_CHARS, Contest, Submission, Team
from rca.errors import DataError, InputError

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
SQLITE_BUSY_TIMEOUT_S = 30.0

READ_ONLY = "judge_read_only"  # execution option: a transaction that only reads
QUEUED, SCORING, DONE, ERROR = "queued", "scoring", "done", "error"


class StoreError(InputError):
    """An admin request the database cannot satisfy (unknown contest, duplicate name ...)."""


class DatabaseError(DataError):
    """The database cannot be opened or migrated; the message names the URL."""


def naive_utc(moment: datetime) -> datetime:
    """Stored form of a time: naive UTC (one convention for SQLite and PostgreSQL)."""
    return moment.astimezone(UTC).replace(tzinfo=None)


def iso_utc(moment: datetime | None) -> str | None:
    return None if moment is None else moment.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")


def hash_ticket(ticket: str) -> str:
    return hashlib.sha256(ticket.encode("utf-8")).hexdigest()


def make_engine(url: str) -> Engine:
    """An engine for ``url``; a SQLite file's folder is created, and SQLite runs in WAL mode."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise DatabaseError(f"database URL {url!r}: {exc}") from exc
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    # isolation_level=None hands transaction control to the "begin" hook below (pysqlite
    # would otherwise start transactions lazily, on the first write).
    engine = create_engine(
        url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_S, "isolation_level": None},
    )

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        # Readers need no write lock (WAL lets them run beside the writer).
        read_only = connection.get_execution_options().get(READ_ONLY, False)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest migration (idempotent); run at every start of the server."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Alembic announces every plugin at INFO; the schema version is all that matters here.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    except OperationalError as exc:
        raise DatabaseError(f"database {engine.url.render_as_string(hide_password=True)}: {exc.orig}") from exc


def open_database(url: str) -> Engine:
    engine = make_engine(url)
    upgrade(engine)
    return engine


_WRITE_LOCKS: dict[str, threading.Lock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()


def _write_lock(engine: Engine) -> threading.Lock | None:
    """SQLite: one in-process lock per database for write transactions.

    SQLite's busy handler polls with sleeps of up to 100 ms, so twenty threads contending for the
    write lock spend most of their time asleep; queueing them on a Python lock hands it over at once.
    Other processes (an admin command beside the server) still wait through busy_timeout.
    """
    if engine.dialect.name != "sqlite":
        return None
    key = engine.url.render_as_string(hide_password=False)
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(key, threading.Lock())


@contextmanager
def transaction(engine: Engine) -> Iterator[Session]:
    lock = _write_lock(engine)
    if lock is None:
        with Session(engine, expire_on_commit=False) as session, session.begin():
            yield session
        return
    with lock, Session(engine, expire_on_commit=False) as session, session.begin():
        yield session


@contextmanager
def reading(engine: Engine) -> Iterator[Session]:
    """A transaction that only reads: on SQLite it does not queue behind writers for the write lock."""
    with Session(engine.execution_options(**{READ_ONLY: True}), expire_on_commit=False) as session, session.begin():
        yield session


# ---- admin ------------------------------------------------------------------------------------


def _check_name(name: str, what: str) -> str:
    name = name.strip()
    if not name or len(name) > NAME_CHARS:
        raise StoreError(f"{what} name must be 1 to {NAME_CHARS} characters, got {name!r}")
    return name


def create_contest(
    engine: Engine, *, name: str, kind: str, rules: str, truth: str, case_count: int, now: datetime,
    qa_keywords: dict[str, list[str]] | None = None, qa_model: str | None = None,
) -> Contest:
    contest = Contest(
        name=_check_name(name, "contest"), kind=kind, rules=rules, truth=truth, case_count=case_count,
        qa_keywords=None if qa_keywords is None else json.dumps(qa_keywords, ensure_ascii=False),
        qa_model=qa_model, frozen_at=None, created_at=naive_utc(now),
    )
    try:
        with transaction(engine) as session:
            session.add(contest)
    except IntegrityError as exc:
        raise StoreError(f"contest {name!r} already exists") from exc
    return contest


def contest_by_name(session: Session, name: str) -> Contest | None:
    return session.scalars(select(Contest).where(Contest.name == name)).one_or_none()


def require_contest(session: Session, name: str) -> Contest:
    contest = contest_by_name(session, name)
    if contest is None:
        raise StoreError(f"no contest named {name!r}")
    return contest


def list_contests(engine: Engine) -> list[Contest]:
    with reading(engine) as session:
        return list(session.scalars(select(Contest).order_by(Contest.id)))


def add_team(engine: Engine, *, contest: str, name: str, now: datetime) -> str:
    """Register a team; returns its ticket, which is stored only as a hash."""
    ticket = secrets.token_urlsafe(24)
    try:
        with transaction(engine) as session:
            found = require_contest(session, contest)
            session.add(Team(contest_id=found.id, name=_check_name(name, "team"), ticket_hash=hash_ticket(ticket),
                             created_at=naive_utc(now)))
    except IntegrityError as exc:
        raise StoreError(f"contest {contest!r} already has a team named {name!r}") from exc
    return ticket


def list_teams(engine: Engine, *, contest: str) -> list[Team]:
    with transaction(engine) as session:
        found = require_contest(session, contest)
        return list(session.scalars(select(Team).where(Team.contest_id == found.id).order_by(Team.id)))


def set_frozen(engine: Engine, *, contest: str, frozen: bool, now: datetime) -> None:
    """Freeze: the public leaderboard shows only submissions made before now. Unfreeze: all of them."""
    with transaction(engine) as session:
        found = require_contest(session, contest)
        found.frozen_at = naive_utc(now) if frozen else None


def requeue_contest(engine: Engine, *, contest: str) -> int:
    """Queue every judged submission of a contest again (after a change of the judge); returns how many."""
    with transaction(engine) as session:
        found = require_contest(session, contest)
        result = session.execute(
            update(Submission)
            .where(Submission.contest_id == found.id, Submission.status.in_([DONE, ERROR]))
            .values(status=QUEUED, claimed_at=None, judge_time=None, score=None, summary=None, error=None)
        )
        return int(cast(CursorResult, result).rowcount or 0)


# ---- requests -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    contest_id: int
    contest_name: str
    team_id: int
    team_name: str


def find_team(session: Session, *, contest_id: int, ticket: str) -> Team | None:
    return session.scalars(
        select(Team).where(Team.ticket_hash == hash_ticket(ticket), Team.contest_id == contest_id)
    ).one_or_none()


@dataclass(frozen=True)
class Accepted:
    submission_id: str
    remaining: int  # min of what is left today and in total
    remaining_today: int


class QuotaExceeded(InputError):
    """The team has used its daily or total quota."""


def accept_submission(
    engine: Engine, *, caller: Caller, payload: str, now: datetime, day: str, daily_quota: int, total_quota: int,
) -> Accepted:
    """Store a valid submission as queued, unless the team's quota is used up (checked under a lock)."""
    with transaction(engine) as session:
        # Serialises one team's submissions on PostgreSQL; SQLite's BEGIN IMMEDIATE already did.
        session.execute(select(Team.id).where(Team.id == caller.team_id).with_for_update())
        total = session.scalar(select(func.count()).select_from(Submission).where(Submission.team_id == caller.team_id))
        today = session.scalar(select(func.count()).select_from(Submission).where(
            Submission.team_id == caller.team_id, Submission.day == day))
        total, today = int(total or 0), int(today or 0)
        if total >= total_quota or today >= daily_quota:
            raise QuotaExceeded(f"team {caller.team_name}: {today} today, {total} in total")
        submission_id = str(uuidlib.uuid4())
        session.add(Submission(
            id=submission_id, contest_id=caller.contest_id, team_id=caller.team_id, payload=payload, status=QUEUED,
            day=day, create_time=naive_utc(now), attempts=0,
        ))
    left_today = daily_quota - today - 1
    return Accepted(submission_id=submission_id, remaining=min(left_today, total_quota - total - 1),
                    remaining_today=left_today)


def own_submission(session: Session, *, caller: Caller, submission_id: str) -> Submission | None:
    """A submission of the calling team; another team's is indistinguishable from a missing one."""
    return session.scalars(select(Submission).where(
        Submission.id == submission_id, Submission.team_id == caller.team_id)).one_or_none()


def queue_position(session: Session, submission: Submission) -> int | None:
    """1 for the next submission the worker takes; None when it is not queued."""
    if submission.status != QUEUED:
        return None
    ahead = session.scalar(select(func.count()).select_from(Submission).where(
        Submission.status == QUEUED, Submission.create_time < submission.create_time))
    return int(ahead or 0) + 1


def team_submissions(session: Session, *, team_id: int) -> list[Submission]:
    return list(session.scalars(
        select(Submission).options(defer(Submission.payload)).where(Submission.team_id == team_id).order_by(Submission.create_time, Submission.id)))


def contest_submissions(session: Session, *, contest_id: int, until: datetime | None) -> list[Submission]:
    query = select(Submission).options(defer(Submission.payload)).where(Submission.contest_id == contest_id)
    if until is not None:
        query = query.where(Submission.create_time <= until)
    return list(session.scalars(query.order_by(Submission.create_time, Submission.id)))


def contest_teams(session: Session, *, contest_id: int) -> list[Team]:
    return list(session.scalars(select(Team).where(Team.contest_id == contest_id).order_by(Team.id)))


# ---- worker -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claimed:
    submission_id: str
    contest_id: int
    payload: str
    claimed_at: datetime


def claim_next(engine: Engine, *, now: datetime) -> Claimed | None:
    """Mark the oldest queued submission as being scored and return it (None when the queue is empty)."""
    with transaction(engine) as session:
        row = session.scalars(
            select(Submission).where(Submission.status == QUEUED)
            .order_by(Submission.create_time, Submission.id).limit(1).with_for_update(skip_locked=True)
        ).one_or_none()
        if row is None:
            return None
        row.status = SCORING
        row.claimed_at = naive_utc(now)
        row.attempts = (row.attempts or 0) + 1
        return Claimed(submission_id=row.id, contest_id=row.contest_id, payload=row.payload,
                       claimed_at=row.claimed_at)


def finish(engine: Engine, *, claimed: Claimed, now: datetime, score: float | None,
           summary: dict[str, Any] | None, error: str | None) -> bool:
    """Record a result, only if this claim still holds (a requeue or rescore may have taken it back)."""
    with transaction(engine) as session:
        result = session.execute(
            update(Submission)
            .where(Submission.id == claimed.submission_id, Submission.status == SCORING,
                   Submission.claimed_at == claimed.claimed_at)
            .values(status=DONE if error is None else ERROR, judge_time=naive_utc(now), score=score,
                    summary=None if summary is None else json.dumps(summary), error=error)
        )
        return bool(cast(CursorResult, result).rowcount)


def requeue_claimed(engine: Engine, *, older_than: datetime | None) -> int:
    """Queue again submissions left in scoring (by a worker that died); all of them when ``older_than`` is None."""
    condition = [Submission.status == SCORING]
    if older_than is not None:
        condition.append(Submission.claimed_at < naive_utc(older_than))
    with transaction(engine) as session:
        result = session.execute(update(Submission).where(*condition).values(status=QUEUED, claimed_at=None))
        return int(cast(CursorResult, result).rowcount or 0)


def lease_cutoff(now: datetime, lease_s: float) -> datetime:
    return now - timedelta(seconds=lease_s)


def load_contest(engine: Engine, contest_id: int) -> Contest:
    with reading(engine) as session:
        contest = session.get(Contest, contest_id)
        if contest is None:
            raise StoreError(f"contest id {contest_id} not found")
        return contest
