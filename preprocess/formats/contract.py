"""The one contract every foreign-format reader implements, and what it returns.

A reader turns files of one foreign format (OTLP, Jaeger, Prometheus, Loki ...) into the
canonical frames of ``preprocess/schema.py``, so that one dataset writer can lay them out
as the 2025 release and the index/diagnosis pipeline runs unchanged. A bad record costs that
record only: it is skipped, named in ``FormatResult.issues`` (file, line or JSON path, field)
and the rest is still read; the command line turns any lost record into exit status 3.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import polars as pl

from preprocess.schema import APM_SCHEMA, INFRA_SCHEMA, LOG_SCHEMA, SPAN_IMPORT_SCHEMA
from rca.errors import DataError

# FormatResult attribute -> canonical schema; the same names as dataset_writer.write_frames' keywords.
# Spans: the canonical columns and the raw tags (SPAN_RAW_TAGS): peers are named from them, runtimes drafted.
FRAME_SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "spans": SPAN_IMPORT_SCHEMA,
    "logs": LOG_SCHEMA,
    "apm": APM_SCHEMA,
    "infra": INFRA_SCHEMA,
}


class FormatError(DataError):
    """A foreign-format file that cannot be read at all (not JSON, not protobuf, unknown shape)."""


@dataclass(frozen=True)
class RecordIssue:
    """One record skipped (``lost``) or read with a caveat (not ``lost``), and where it was.

    ``line`` is the 1-based line of a JSON-lines file (None for a whole-document file);
    ``where`` a path inside the document (``data[0].spans[3]``); ``field`` the offending field.
    """

    path: Path
    reason: str
    line: int | None = None
    where: str | None = None
    field: str | None = None
    lost: bool = True

    def __str__(self) -> str:
        place = f"{self.path}:{self.line}" if self.line is not None else str(self.path)
        if self.where:
            place += f" [{self.where}]"
        what = f"field {self.field!r}: " if self.field else ""
        return f"{place}: {what}{self.reason}"


@dataclass
class FormatResult:
    """Canonical frames read from some files (None: the format or files held none of that family)."""

    spans: pl.DataFrame | None = None
    logs: pl.DataFrame | None = None
    apm: pl.DataFrame | None = None
    infra: pl.DataFrame | None = None
    files: list[Path] = field(default_factory=list)
    issues: list[RecordIssue] = field(default_factory=list)

    @property
    def lost(self) -> list[RecordIssue]:
        return [i for i in self.issues if i.lost]

    def frames(self) -> dict[str, pl.DataFrame]:
        """The non-empty frames by name (``spans``, ``logs``, ``apm``, ``infra``): ``write_frames(out, **frames())``."""
        out: dict[str, pl.DataFrame] = {}
        for name in FRAME_SCHEMAS:
            frame = getattr(self, name)
            if frame is not None and frame.height > 0:
                out[name] = frame
        return out

    def merge(self, other: FormatResult) -> FormatResult:
        """Both results' rows, files and issues (frames stacked family by family)."""
        merged = FormatResult(files=[*self.files, *other.files], issues=[*self.issues, *other.issues])
        for name in FRAME_SCHEMAS:
            parts = [f for f in (getattr(self, name), getattr(other, name)) if f is not None]
            setattr(merged, name, pl.concat(parts, how="vertical") if parts else None)
        return merged


class FormatReader(Protocol):
    """Reads files of one foreign format into canonical frames; never raises for a bad record."""

    name: str
    description: str

    def read(self, paths: Sequence[Path]) -> FormatResult:
        """Every record of ``paths`` in canonical frames; bad records skipped and listed in ``issues``.

        Raises ``FormatError`` only when ``paths`` is empty; an unreadable file is an issue too.
        """
        ...
