"""Reading the challenge ground truth (``groundtruth.jsonl``), current and older variant.

The older variant lacks ``key_metrics`` and ``fault_description`` and spells two node
faults ``node cpu`` / ``node memory``; both load into the same ``TruthCase``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rca.errors import InputError
from rca.taxonomy import canonical_fault_type

RecordT = TypeVar("RecordT", bound=BaseModel)


class KeyObservation(BaseModel):
    """One evidence point of a case (``key_observations`` item)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: Literal["metric", "log", "trace"]
    keyword: list[str] = Field(default_factory=list)


class TruthCase(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    uuid: str
    fault_type: str
    fault_category: str = ""
    instance_type: str = ""
    instance: list[str]
    key_observations: list[KeyObservation] = Field(default_factory=list)
    key_metrics: list[str] = Field(default_factory=list)
    fault_description: list[str] = Field(default_factory=list)

    @field_validator("fault_type")
    @classmethod
    def _canonical_fault_type(cls, value: str) -> str:
        return canonical_fault_type(value)

    @field_validator("instance", mode="before")
    @classmethod
    def _instance_as_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("key_metrics", "fault_description", mode="before")
    @classmethod
    def _null_as_empty(cls, value: object) -> object:
        return [] if value is None else value


class InputFileError(InputError):
    """A ground-truth or answer file that cannot be read; the message names file and line."""


def read_unique_jsonl(path: Path, model: type[RecordT], *, key: str, what: str) -> list[RecordT]:
    """Every record of a JSONL file validated as ``model``, in file order.

    ``key`` names the field that must be unique; errors name the file, line and field.
    """
    if not path.is_file():
        raise InputFileError(f"{path}: {what} file not found")
    return parse_unique_jsonl(path.read_text(encoding="utf-8"), model, key=key, what=what, source=str(path))


def parse_unique_jsonl(text: str, model: type[RecordT], *, key: str, what: str, source: str) -> list[RecordT]:
    """``read_unique_jsonl`` on text already read (``source`` names it in errors), e.g. from a database."""
    records: list[RecordT] = []
    seen: set[str] = set()
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = model.model_validate(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputFileError(f"{source}:{line_no}: malformed JSON: {exc.msg}") from exc
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "line"
            raise InputFileError(f"{source}:{line_no}: field '{where}': {first['msg']}") from exc
        value = getattr(record, key)
        if value in seen:
            raise InputFileError(f"{source}:{line_no}: duplicate {key} {value!r}")
        seen.add(value)
        records.append(record)
    if not records:
        raise InputFileError(f"{source}: no {what} records")
    return records


def load_truth(path: Path) -> list[TruthCase]:
    """All cases of a ground-truth JSONL file, in file order; uuids must be unique."""
    return read_unique_jsonl(path, TruthCase, key="uuid", what="ground-truth")


def parse_truth(text: str, *, source: str) -> list[TruthCase]:
    """``load_truth`` on ground-truth text already read (the judge server keeps it in its database)."""
    return parse_unique_jsonl(text, TruthCase, key="uuid", what="ground-truth", source=source)
