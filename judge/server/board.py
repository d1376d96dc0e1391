"""Leaderboard rows: the challenge ranks each team by its last accepted submission; best is shown beside it.

A frozen contest ranks only submissions made before the freeze. A team whose last submission is
still queued has no score yet and sits below the scored teams until it is judged.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from judge.server.models import Submission, Team
from judge.server.store import DONE, iso_utc


@dataclass(frozen=True)
class BoardRow:
    rank: int | None
    team: str
    submissions: int
    last_score: float | None
    last_status: str
    last_time: str | None
    best_score: float | None
    best_rank: int | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def leaderboard(teams: list[Team], submissions: list[Submission]) -> list[BoardRow]:
    by_team: dict[int, list[Submission]] = {}
    for submission in submissions:  # oldest first
        by_team.setdefault(submission.team_id, []).append(submission)
    drafts: list[dict[str, Any]] = []
    for team in teams:
        own = by_team.get(team.id, [])
        if not own:
            continue
        last = own[-1]
        scored = [s.score for s in own if s.status == DONE and s.score is not None]
        drafts.append({
            "team": team.name, "submissions": len(own),
            "last_score": last.score if last.status == DONE else None, "last_status": last.status,
            "last_time": iso_utc(last.create_time), "best_score": max(scored) if scored else None,
        })
    # Ties: the team that reached the score first ranks higher.
    drafts.sort(key=lambda d: (d["last_score"] is None, -(d["last_score"] or 0.0), d["last_time"]))
    best_order = sorted((d for d in drafts if d["best_score"] is not None), key=lambda d: -d["best_score"])
    best_rank = {d["team"]: i for i, d in enumerate(best_order, start=1)}
    rows: list[BoardRow] = []
    for index, draft in enumerate(drafts, start=1):
        rows.append(BoardRow(rank=index if draft["last_score"] is not None else None,
                             best_rank=best_rank.get(draft["team"]), **draft))
    return rows
