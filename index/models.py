"""Typed results of index queries: what the diagnoser receives about a window."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

# What an evidence item says happened; knowledge signals match on it (``knowledge.signatures``).
# metric: level (moved up or down) | silent; log: burst | new_template | silent;
# trace: latency | errors | calls_stopped (on a call edge) | fanout (a caller pod failing
# towards several callees at once).
EvidenceSignal = Literal["level", "silent", "latency", "errors", "calls_stopped", "fanout", "burst", "new_template"]


class EvidenceItem(BaseModel):
    """One anomaly as data, plus ``text``, its observation line (``index.evidence.render``).

    ``text`` is at most 100 characters and starts with its ``key``: the KPI name
    (``pod_cpu_usage``), the log line's words (``connection refused``; a long line is cut
    in the middle, shorter in the key than in the text) or the call edge
    (``frontend->cartservice``), e.g.
    ``pod_cpu_usage up 4.1x (z=9.3) on emailservice-1 from 16:11``. Code that checks
    evidence reads the structured fields (``signal``, ``caller``/``callee``, ``example``),
    never the wording of ``text``.
    """

    modality: Literal["metric", "log", "trace"]
    signal: EvidenceSignal
    key: str
    component: str
    text: str = Field(max_length=100)
    direction: Literal["up", "down", "silent", "new"] = "up"
    magnitude: float = 0.0  # robust z (or equivalent) against baseline, 2 decimals; larger = stronger
    z: float = 0.0  # the same z unrounded (the figure the text quotes)
    ratio: float | None = None  # window value / baseline value where meaningful
    onset: datetime | None = None
    caller: str | None = None  # trace: the calling service of the edge
    callee: str | None = None  # trace: the called service (fanout: the strongest of its callees)
    example: str = ""  # log: the line the evidence quotes (most frequent masked line, else the template)
    value: float | None = None  # metric: the window level
    count: int | None = None  # log: lines in the window
    baseline_count: int | None = None  # log: lines in the baseline
    fanout_signal: Literal["errors", "latency"] | None = None  # fanout: what the caller pod's calls showed
    more_callees: int = 0  # fanout: callees beyond ``callee`` that went wrong too


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
    parameters: dict[str, Any] = Field(default_factory=dict)  # the IndexParams the result was made with
