"""The run record: everything about one diagnosed case, as a versioned, typed document.

Written to ``runs/<batch>/<uuid>.json`` by every diagnosis (batch or ad hoc) and read back
by ``bench/`` and the reports. Readers validate it with :meth:`RunRecord.load` instead of
indexing dicts by key, so a change of shape fails loudly at the reader, not deep in a table.

Versions: 1 = the single-call pipeline; 2 adds ``mode`` and ``agent_calls`` (every message and
tool call of the react / team modes). A version-1 file reads as a version-2 record of mode
``pipeline`` with no agent calls, so older run directories stay readable.

It is also the one in-memory result of a diagnosis (``diagnose.pipeline.run_record`` builds it):
the answer, the decision and the candidates are the typed models they are written from, so a
file reads back into the same objects the diagnosis returned.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from diagnose.answer import Answer
from diagnose.decide import Decision
from index.models import Candidate, Confidence, ModalityStatus
from rca.errors import DataError

RUN_RECORD_VERSION: Literal[2] = 2
READABLE_VERSIONS = (1, 2)


class RecordError(DataError):
    """A run record file cannot be read as this version's record."""


class Usage(BaseModel):
    """What the model calls cost for this case."""

    model_config = ConfigDict(extra="forbid")

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_seconds: float = 0.0
    model: str | None = None


class PromptRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, str]]
    approx_tokens: int
    dropped_evidence: int = 0
    dropped_sops: int = 0


class SopRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    title: str
    score: float


class AgentCallRecord(BaseModel):
    """One step of an agent mode: a model call (``messages`` -> ``reply``) and/or a tool call."""

    model_config = ConfigDict(extra="forbid")

    agent: str  # react | controller | metric | log | trace | judge
    round: int = 1
    messages: list[dict[str, str]] = Field(default_factory=list)  # empty when code ran the tool
    reply: str | None = None
    tool: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    observation: str | None = None


class RunRecord(BaseModel):
    """One case's diagnosis, failed or not (``status``), with the inputs the model saw."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1, 2] = RUN_RECORD_VERSION
    uuid: str
    mode: Literal["pipeline", "react", "team"] = "pipeline"
    status: Literal["answered", "failed"] = "answered"
    error: str | None = None
    window: dict[str, str]
    answer: Answer | None = None  # None when the case failed
    rules_answer: Answer | None = None  # index top-1 + its best SOP fit, no model (an ablation)
    rules_fault_type: str | None = None  # the fault type behind ``rules_answer``
    rules_reading: dict[str, Any] | None = None  # margins of that reading, which parts were close calls
    choices: dict[str, list[str]] | None = None  # decide_among = "contenders": component -> its open fault types
    agreed_with_index: bool | None = None
    index_top: str | None = None
    # How far the answer can be trusted (index.confidence): "low" when its candidate's evidence is weak
    # or the answer is not the index's first; None without an answer or a candidate.
    confidence: Confidence | None = None
    decision: Decision | None = None
    repaired: bool = False
    votes: dict[str, int] = Field(default_factory=dict)
    first_fault_type: str | None = None
    confirm_turn: str | None = None
    candidates: list[Candidate] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)  # the data status in words, as the prompt says it
    data_status: list[ModalityStatus] = Field(default_factory=list)
    sops: list[SopRecord] = Field(default_factory=list)
    signature_matches: dict[str, list[str]] = Field(default_factory=dict)
    prompt: PromptRecord | None = None
    raw_responses: list[str] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    timings_s: dict[str, float] = Field(default_factory=dict)
    parameters: dict[str, Any] = Field(default_factory=dict)
    agent_calls: list[AgentCallRecord] = Field(default_factory=list)

    def final_answer(self) -> Answer:
        """The answer of an answered case; a failed case's record has none (``RecordError``)."""
        if self.answer is None:
            raise RecordError(f"{self.uuid}: the case failed ({self.error}); its record holds no answer")
        return self.answer

    @classmethod
    def load(cls, path: Path) -> RunRecord:
        try:
            return cls.model_validate_json(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise RecordError(f"{path}: not a run record of version {' or '.join(map(str, READABLE_VERSIONS))} ({exc})") from exc

    @classmethod
    def load_dir(cls, runs_dir: Path) -> list[RunRecord]:
        return [cls.load(p) for p in sorted(runs_dir.glob("*.json"))]
