"""The results store: one SQLite file per benchmark directory, one row per session.

Rows are keyed by (problem, agent, repeat), so a rerun skips sessions already stored
(resume) and ``--repeat K`` adds rows that ``summary`` averages, with a percentile
bootstrap interval over problems (seeded, so the same rows give the same interval).
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.session import SessionResult

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    problem_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    repeat INTEGER NOT NULL,
    task TEXT NOT NULL,
    case_uuid TEXT NOT NULL,
    fault_type TEXT NOT NULL,
    level TEXT NOT NULL,
    outcome TEXT NOT NULL,
    correct REAL NOT NULL,
    steps INTEGER NOT NULL,
    tokens_in INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    seconds REAL NOT NULL,
    answer TEXT,
    details TEXT NOT NULL,
    trajectory TEXT NOT NULL,
    judge_score REAL,
    error TEXT,
    created TEXT NOT NULL,
    PRIMARY KEY (problem_id, agent, repeat)
)
"""


@dataclass(frozen=True)
class Row:
    problem_id: str
    agent: str
    repeat: int
    task: str
    case_uuid: str
    fault_type: str
    level: str
    outcome: str
    correct: float
    steps: int
    tokens_in: int
    tokens_out: int
    seconds: float
    answer: dict[str, Any] | None
    details: dict[str, Any]
    trajectory: list[dict[str, Any]]
    judge_score: float | None
    error: str | None


def _row(r: tuple[Any, ...]) -> Row:
    """A ``Row`` from the columns ``ResultStore.rows`` selects, in that order."""
    (problem_id, agent, repeat, task, case_uuid, fault_type, level, outcome, correct, steps, tokens_in, tokens_out,
     seconds, answer, details, trajectory, judge_score, error) = r
    return Row(problem_id=problem_id, agent=agent, repeat=repeat, task=task, case_uuid=case_uuid,
               fault_type=fault_type, level=level, outcome=outcome, correct=correct, steps=steps, tokens_in=tokens_in,
               tokens_out=tokens_out, seconds=seconds, answer=json.loads(answer) if answer else None,
               details=json.loads(details), trajectory=json.loads(trajectory), judge_score=judge_score, error=error)


@dataclass(frozen=True)
class Cell:
    """One (task, agent) figure: mean of ``correct`` with its 95% bootstrap interval."""

    task: str
    agent: str
    n: int
    mean: float
    low: float
    high: float
    steps: float
    tokens_in: float
    tokens_out: float
    seconds: float


def bootstrap(values: list[float], *, groups: list[str] | None = None, samples: int = 1000,
              seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean; with ``groups`` the resampling unit is a group
    (a problem, whose repeats are averaged first)."""
    if not values:
        return 0.0, 0.0
    if groups is not None:
        by: dict[str, list[float]] = {}
        for g, v in zip(groups, values):
            by.setdefault(g, []).append(v)
        values = [float(np.mean(v)) for v in by.values()]
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), (samples, len(data)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


class ResultsStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.db = sqlite3.connect(path)
        self.db.execute(SCHEMA)
        self.db.commit()

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def done(self, *, problem_id: str, agent: str, repeat: int) -> bool:
        cur = self.db.execute("SELECT 1 FROM results WHERE problem_id=? AND agent=? AND repeat=?",
                              (problem_id, agent, repeat))
        return cur.fetchone() is not None

    def add(self, result: SessionResult, *, repeat: int, case_uuid: str, fault_type: str, level: str,
            judge_score: float | None = None) -> None:
        """One session; committed at once, so a killed run keeps every finished session."""
        self.db.execute(
            "INSERT OR REPLACE INTO results VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (result.problem_id, result.agent, repeat, result.task, case_uuid, fault_type, level, result.outcome,
             result.evaluation.correct, len(result.steps), result.tokens_in, result.tokens_out, result.seconds,
             json.dumps(result.answer) if result.answer is not None else None,
             json.dumps(result.evaluation.details, default=str), json.dumps(result.trajectory()),
             judge_score, result.error, datetime.now(UTC).isoformat(timespec="seconds")))
        self.db.commit()

    def rows(self) -> list[Row]:
        cur = self.db.execute("SELECT problem_id, agent, repeat, task, case_uuid, fault_type, level, outcome, correct,"
                              " steps, tokens_in, tokens_out, seconds, answer, details, trajectory, judge_score, error"
                              " FROM results ORDER BY task, agent, problem_id, repeat")
        return [_row(r) for r in cur.fetchall()]

    def summary(self) -> list[Cell]:
        groups: dict[tuple[str, str], list[Row]] = {}
        for row in self.rows():
            groups.setdefault((row.task, row.agent), []).append(row)
        cells = []
        for (task, agent), rows in sorted(groups.items()):
            values = [r.correct for r in rows]
            low, high = bootstrap(values, groups=[r.problem_id for r in rows])
            cells.append(Cell(task=task, agent=agent, n=len(rows), mean=float(np.mean(values)), low=low, high=high,
                              steps=float(np.mean([r.steps for r in rows])),
                              tokens_in=float(np.mean([r.tokens_in for r in rows])),
                              tokens_out=float(np.mean([r.tokens_out for r in rows])),
                              seconds=float(np.mean([r.seconds for r in rows]))))
        return cells
