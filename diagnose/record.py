"""The run record: everything about one diagnosed case, as a versioned, typed document.

Written to ``runs/<batch>/<uuid>.json`` by every diagnosis (batch or ad hoc) and read back
by ``bench/`` and the reports. Readers validate it with :meth:`RunRecord.load` instead of
indexing dicts by key, so a change of shape fails loudly at the reader, not deep in a table.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rca.errors import DataError

RUN_RECORD_VERSION = 1


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


class RunRecord(BaseModel):
    """One case's diagnosis, failed or not (``status``), with the inputs the model saw."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = RUN_RECORD_VERSION
    uuid: str
    status: Literal["answered", "failed"] = "answered"
    error: str | None = None
    window: dict[str, str]
    answer: dict[str, Any] | None = None
    agreed_with_index: bool | None = None
    index_top: str | None = None
    decision: dict[str, Any] | None = None
    repaired: bool = False
    votes: dict[str, int] = Field(default_factory=dict)
    first_fault_type: str | None = None
    confirm_turn: str | None = None
    candidates: list[dict[str, Any]] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    sops: list[SopRecord] = Field(default_factory=list)
    signature_matches: dict[str, list[str]] = Field(default_factory=dict)
    prompt: PromptRecord | None = None
    raw_responses: list[str] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    timings_s: dict[str, float] = Field(default_factory=dict)
    parameters: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> RunRecord:
        try:
            return cls.model_validate_json(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise RecordError(f"{path}: not a version-{RUN_RECORD_VERSION} run record ({exc})") from exc

    @classmethod
    def load_dir(cls, runs_dir: Path) -> list[RunRecord]:
        return [cls.load(p) for p in sorted(runs_dir.glob("*.json"))]
