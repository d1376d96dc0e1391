"""Initial schema: contests, teams, submissions.

Revision ID: 0001
Revises:
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "contests",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("rules", sa.String(8), nullable=False),
        sa.Column("truth", sa.Text(), nullable=False),
        sa.Column("qa_keywords", sa.Text(), nullable=True),
        sa.Column("qa_model", sa.String(200), nullable=True),
        sa.Column("case_count", sa.Integer(), nullable=False),
        sa.Column("frozen_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "teams",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("contest_id", sa.Integer(), sa.ForeignKey("contests.id"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("ticket_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("contest_id", "name", name="uq_team_contest_name"),
    )
    op.create_index("ix_teams_contest_id", "teams", ["contest_id"])
    op.create_table(
        "submissions",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("contest_id", sa.Integer(), sa.ForeignKey("contests.id"), nullable=False),
        sa.Column("team_id", sa.Integer(), sa.ForeignKey("teams.id"), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("create_time", sa.DateTime(), nullable=False),
        sa.Column("claimed_at", sa.DateTime(), nullable=True),
        sa.Column("judge_time", sa.DateTime(), nullable=True),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
    )
    op.create_index("ix_submissions_contest_id", "submissions", ["contest_id"])
    op.create_index("ix_submissions_team_id", "submissions", ["team_id"])
    op.create_index("ix_submissions_status_created", "submissions", ["status", "create_time"])
    op.create_index("ix_submissions_team_day", "submissions", ["team_id", "day"])


def downgrade() -> None:
    op.drop_table("submissions")
    op.drop_table("teams")
    op.drop_table("contests")
