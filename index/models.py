"""Typed results of index queries: what the diagnoser receives about a window."""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class EvidenceItem(BaseModel):
    """One anomaly, rendered as a short observation line.

    ``text`` is at most 100 characters and starts with its ``key``: the KPI name
    (``pod_cpu_usage``), the log line's words (``connection refused``; a long line is cut
    in the middle, shorter in the key than in the text) or the call edge
    (``frontend->cartservice``), e.g.
    ``pod_cpu_usage up 4.1x (z=9.3) on emailservice-1 from 16:11``.
    """

    modality: Literal["metric", "log", "trace"]
    key: str
    component: str
    text: str = Field(max_length=100)
    direction: Literal["up", "down", "silent", "new"] = "up"
    magnitude: float = 0.0  # robust z (or equivalent) against baseline; larger = stronger
    ratio: float | None = None  # window value / baseline value where meaningful
    onset: datetime | None = None


class Candidate(BaseModel):
    component: str  # exact answer string: service, pod or node name
    level: Literal["service", "pod", "node"]
    score: float
    score_breakdown: dict[str, float] = Field(default_factory=dict)  # e.g. metric/log/trace/propagation
    evidence: list[EvidenceItem] = Field(default_factory=list)


class WindowQueryResult(BaseModel):
    start: datetime
    end: datetime
    candidates: list[Candidate]
    missing: list[str] = Field(default_factory=list)  # partitions/modalities absent for this window
