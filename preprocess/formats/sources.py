"""Opening foreign-format files: plain or gzipped, JSON lines or one JSON document, raw bytes.

Every failure here is recorded as a ``RecordIssue`` rather than raised, so one bad file or
line costs that file or line only (docs/reliability.md: "what a bad file costs").
"""
from __future__ import annotations

import gzip
import json
import logging
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from preprocess.formats.contract import RecordIssue

log = logging.getLogger(__name__)

_GZIP_MAGIC = b"\x1f\x8b"


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
