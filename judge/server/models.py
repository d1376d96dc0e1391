"""The judge server's tables (SQLAlchemy 2.0 ORM); the schema itself is built by the Alembic migrations.

Times are naive UTC throughout: SQLite has no time zones, and one convention for both databases
keeps comparisons exact. Ground truth lives in the contest row, so a database file is a whole
contest and nothing outside it is needed to rescore.
"""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAME_CHARS = 200


class Base(DeclarativeBase):
    pass


class Contest(Base):
    __tablename__ = "contests"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_CHARS), unique=True)
    kind: Mapped[str] = mapped_column(String(8))  # rca | qa
    rules: Mapped[str] = mapped_column(String(8))  # early | late (rca); "qa" for the QA kind
    truth: Mapped[str] = mapped_column(Text)  # the ground-truth JSONL, as given
    # QA kind: {reference answer: keywords} extracted once at creation by the evaluation LLM.
    qa_keywords: Mapped[str | None] = mapped_column(Text, nullable=True)
    qa_model: Mapped[str | None] = mapped_column(String(NAME_CHARS), nullable=True)
    case_count: Mapped[int] = mapped_column(Integer)
    frozen_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)


class Team(Base):
    __tablename__ = "teams"
    __table_args__ = (UniqueConstraint("contest_id", "name", name="uq_team_contest_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    contest_id: Mapped[int] = mapped_column(ForeignKey("contests.id"), index=True)
    name: Mapped[str] = mapped_column(String(NAME_CHARS))
    # sha256 of the ticket: tickets are long random tokens, so a fast hash is enough to make a
    # stolen database useless for submitting.
    ticket_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)


class Submission(Base):
    __tablename__ = "submissions"
    __table_args__ = (
        Index("ix_submissions_status_created", "status", "create_time"),
        Index("ix_submissions_team_day", "team_id", "day"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)  # uuid4
    contest_id: Mapped[int] = mapped_column(ForeignKey("contests.id"), index=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    payload: Mapped[str] = mapped_column(Text)  # the accepted answers, JSON list
    status: Mapped[str] = mapped_column(String(10))  # queued | scoring | done | error
    day: Mapped[str] = mapped_column(String(10))  # quota day (local date in the configured zone)
    create_time: Mapped[datetime] = mapped_column(DateTime)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    judge_time: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    summary: Mapped[str | None] = mapped_column(Text, nullable=True)  # aggregates only, never per case
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
