"""Opening foreign-format files: plain or gzipped, JSON lines or one JSON document, raw bytes.

Every failure here is recorded as a ``RecordIssue`` rather than raised, so one bad file or
line costs that file or line only (docs/reliability.md: "what a bad file costs").
"""
from __future__ import annotations

import gzip
import json
import logging
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from preprocess.formats.contract import FormatError, FormatResult, RecordIssue
from preprocess.formats.rows import Rows

log = logging.getLogger(__name__)

_GZIP_MAGIC = b"\x1f\x8b"


class BadField(ValueError):
    """A record field that cannot be read; the record is skipped and the field named."""

    def __init__(self, field: str | None, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


@dataclass
class IssueLog:
    """Issues of one read, with the file and line being read filled in for the caller."""

    issues: list[RecordIssue] = field(default_factory=list)

    def add(self, path: Path, reason: str, *, line: int | None = None, where: str | None = None,
            field: str | None = None, lost: bool = True) -> None:
        issue = RecordIssue(path=path, reason=reason, line=line, where=where, field=field, lost=lost)
        # Debug only: the command line prints every issue once, with its context.
        log.debug("%s", issue)
        self.issues.append(issue)


def read_bytes(path: Path, *, issues: IssueLog) -> bytes | None:
    """The file's content, gunzipped when it starts with the gzip magic (whatever its name); None if unreadable."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        issues.add(path, f"unreadable file: {exc.strerror or exc}")
        return None
    if raw[:2] != _GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        # A truncated gzip (a collector killed mid-write) still yields its complete lines.
        partial = _gunzip_prefix(raw)
        issues.add(path, f"damaged gzip stream ({exc}); {len(partial)} bytes recovered")
        return partial


def _gunzip_prefix(raw: bytes) -> bytes:
    decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        return decompressor.decompress(raw)
    except zlib.error:
        return b""


def json_lines(path: Path, *, issues: IssueLog) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every line of a JSON-lines file; a bad line is an issue naming it."""
    data = read_bytes(path, issues=issues)
    if data is None:
        return
    for number, raw_line in enumerate(data.splitlines(), start=1):
        if not raw_line.strip():
            continue
        try:
            text = raw_line.decode("utf-8")
        except UnicodeDecodeError as exc:
            issues.add(path, f"not UTF-8 ({exc.reason} at byte {exc.start})", line=number)
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            issues.add(path, f"malformed JSON: {exc.msg} at column {exc.colno}", line=number)
            continue
        if not isinstance(value, dict):
            issues.add(path, f"expected a JSON object, got {type(value).__name__}", line=number)
            continue
        yield number, value


def json_document(path: Path, *, issues: IssueLog) -> Any | None:
    """The single JSON document a file holds (an API response); None, with an issue, if it is not one."""
    data = read_bytes(path, issues=issues)
    if data is None:
        return None
    try:
        return json.loads(data)
    except UnicodeDecodeError as exc:
        issues.add(path, f"not UTF-8 ({exc.reason} at byte {exc.start})")
    except json.JSONDecodeError as exc:
        issues.add(path, f"malformed JSON: {exc.msg}", line=exc.lineno)
    return None


# A document's records, each with where it lies in the document and what appends it to the rows
# (raising ``BadField`` to skip it). The document's shape is checked when the first is asked for.
SpanRecords = Callable[[Any], Iterable[tuple[str, Callable[[Rows], None]]]]


def read_span_documents(paths: Sequence[Path], *, format_name: str, records: SpanRecords) -> FormatResult:
    """Spans of files that each hold one JSON document (an API response) of many spans.

    A file that is not such a document costs that file, a span that cannot be read that span:
    each becomes an issue naming the file, where in the document and the field.
    """
    if not paths:
        raise FormatError(f"{format_name}: no input files")
    issues, rows, files = IssueLog(), Rows("spans"), []
    for path in map(Path, paths):
        document = json_document(path, issues=issues)
        if document is None:
            continue
        try:
            appenders = list(records(document))
        except BadField as exc:
            issues.add(path, exc.reason, field=exc.field)
            continue
        files.append(path)
        for where, append in appenders:
            try:
                append(rows)
            except BadField as exc:
                issues.add(path, exc.reason, where=where, field=exc.field)
    return FormatResult(spans=rows.frame() if len(rows) else None, files=files, issues=issues.issues)
