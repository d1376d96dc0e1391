"""SOP documents: their schema, parsing, validation and the document directory.

A document is a markdown file ``<id>.md`` that starts with TOML front matter
between two ``+++`` lines, followed by a markdown body whose ``## `` sections
(symptoms, signatures, look-alikes ...) are indexed separately. Validation errors
name the file, the field and, where it can be found, the line.
"""
from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from knowledge.signatures import Signal, SignalError
from rca.errors import InputError
from rca.settings import KnowledgeSettings
from rca.taxonomy import FAULT_TYPES, LEVELS, fault_types_named

FRONT_MATTER_FENCE = "+++"
SHIPPED_DOCS_DIR = Path(__file__).parent / "docs"
_ID_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
_TOML_LINE = re.compile(r"at line (\d+)")


class DocumentError(InputError):
    """A document that cannot be used; the message names file, field and line when known."""

    def __init__(self, *, source: str, message: str, field: str | None = None, line: int | None = None) -> None:
        self.source = source
        self.field = field
        self.line = line
        where = source if line is None else f"{source}:{line}"
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{message}")


class FrontMatter(BaseModel):
    """The validated TOML front matter of one document."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=_ID_PATTERN)
    title: str = Field(min_length=3)
    kind: Literal["fault", "guide"]
    fault_type: str | None = None
    fault_category: str | None = None
    levels: list[Literal["service", "pod", "node"]] = []
    components: list[str] = []
    key_metrics: list[str] = []
    log_keywords: list[str] = []
    trace_signatures: list[str] = []
    look_alikes: list[str] = []
    signals: list[str] = []  # machine-checkable signature, see knowledge/signatures.py
    reason_template: str | None = None
    tags: list[str] = []

    @model_validator(mode="after")
    def _check_kind_fields(self) -> FrontMatter:
        if self.kind == "fault":
            if self.fault_type not in FAULT_TYPES:
                raise _FieldProblem("fault_type", f"must be one of the 18 fault types, got {self.fault_type!r}")
            if self.fault_category != FAULT_TYPES[self.fault_type]:
                raise _FieldProblem("fault_category",
                                    f"must be {FAULT_TYPES[self.fault_type]!r} for {self.fault_type!r}, "
                                    f"got {self.fault_category!r}")
            if not self.levels:
                raise _FieldProblem("levels", f"a fault document needs at least one of {list(LEVELS)}")
            if not self.key_metrics:
                raise _FieldProblem("key_metrics", "a fault document needs at least one KPI name")
            if not self.reason_template:
                raise _FieldProblem("reason_template", "a fault document needs a reason template")
            if self.signals and len([s for s in self.signals if not s.strip().lower().startswith("not ")]) < 2:
                raise _FieldProblem("signals", "give at least two expected signals (or none)")
        elif self.fault_type is not None or self.fault_category is not None:
            field = "fault_type" if self.fault_type is not None else "fault_category"
            raise _FieldProblem(field, "only fault documents name a fault type or category")
        elif self.signals:
            raise _FieldProblem("signals", "only fault documents have signals")
        for spec in self.signals:
            try:
                Signal.parse(spec)
            except SignalError as exc:
                raise _FieldProblem("signals", str(exc)) from exc
        unknown = [name for name in self.look_alikes if name not in FAULT_TYPES]
        if unknown:
            raise _FieldProblem("look_alikes", f"unknown fault types {unknown}")
        return self


class _FieldProblem(ValueError):
    """Raised inside validators so the error can name its field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


class Section(BaseModel):
    model_config = ConfigDict(frozen=True)

    heading: str
    text: str


class SopDocument(BaseModel):
    """One parsed, validated document."""

    model_config = ConfigDict(frozen=True)

    meta: FrontMatter
    body: str
    sections: list[Section]
    source: str
    content_hash: str

    @property
    def id(self) -> str:
        return self.meta.id

    def excerpt(self, heading: str) -> str:
        """The text of the ``## heading`` section on one line; the whole body for the header
        chunk or the overview, which have no section of their own."""
        wanted = heading.strip().lower()
        if wanted != "overview":
            for section in self.sections:
                if section.heading.lower() == wanted:
                    return " ".join(section.text.split())
        return " ".join(self.body.split())


    def look_alike_notes(self) -> dict[str, str]:
        """How this fault differs from each look-alike, from the ``## Look-alikes`` bullets whose
        head names fault types (``- pod kill: the pod is restarted within seconds ...``)."""
        section = next((s.text for s in self.sections if s.heading.lower() == "look-alikes"), "")
        notes: dict[str, str] = {}
        for bullet in re.split(r"^- ", section, flags=re.M):
            head, colon, text = bullet.partition(":")
            for name in fault_types_named(head) if colon else []:  # "network loss / network corrupt: ..."
                notes.setdefault(name, " ".join(text.split()))
        return notes


def parse_document(text: str, *, source: str, expected_id: str | None = None) -> SopDocument:
    """Parse and validate a document's text. ``source`` names it in errors."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != FRONT_MATTER_FENCE:
        raise DocumentError(source=source, line=1, message=f"document must start with a '{FRONT_MATTER_FENCE}' line "
                                                          "opening the TOML front matter")
    try:
        closing = next(i for i in range(1, len(lines)) if lines[i].strip() == FRONT_MATTER_FENCE)
    except StopIteration:
        raise DocumentError(source=source, line=1, message=f"front matter is not closed by a '{FRONT_MATTER_FENCE}' line") from None
    front_lines = lines[1:closing]
    try:
        raw = tomllib.loads("\n".join(front_lines))
    except tomllib.TOMLDecodeError as exc:
        match = _TOML_LINE.search(str(exc))
        if match:
            line = int(match.group(1)) + 1  # +1 for the opening fence
        elif "end of document" in str(exc):
            line = len(front_lines) + 1  # the last front-matter line
        else:
            line = None
        raise DocumentError(source=source, line=line, message=f"invalid TOML front matter: {exc}") from exc

    try:
        meta = FrontMatter.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        message = first["msg"]
        cause = first.get("ctx", {}).get("error")
        if isinstance(cause, _FieldProblem):
            field, message = cause.field, str(cause)
        top_field = field.split(".")[0] if field else None
        raise DocumentError(source=source, field=field, message=message,
                            line=_line_of_key(front_lines, top_field)) from exc
    if expected_id is not None and meta.id != expected_id:
        raise DocumentError(source=source, field="id", line=_line_of_key(front_lines, "id"),
                            message=f"id {meta.id!r} must equal the file name stem {expected_id!r}")

    body = "\n".join(lines[closing + 1:]).strip()
    sections = split_sections(body)
    if not sections:
        raise DocumentError(source=source, line=closing + 2, message="document body is empty")
    return SopDocument(meta=meta, body=body, sections=sections, source=source,
                       content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest())


def _line_of_key(front_lines: list[str], key: str | None) -> int | None:
    """1-based line in the file where ``key = ...`` is set, if it is set."""
    if key is None:
        return None
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for index, line in enumerate(front_lines):
        if pattern.match(line):
            return index + 2  # +1 for 1-based, +1 for the opening fence
    return None


def split_sections(body: str) -> list[Section]:
    """Split a markdown body on ``## `` headings; text before the first heading is 'Overview'."""
    sections: list[Section] = []
    heading = "Overview"
    buffer: list[str] = []
    for line in body.splitlines():
        if line.startswith("## "):
            if "\n".join(buffer).strip():
                sections.append(Section(heading=heading, text="\n".join(buffer).strip()))
            heading, buffer = line[3:].strip(), []
        elif not line.startswith("# "):  # the document title repeats the front matter
            buffer.append(line)
    if "\n".join(buffer).strip():
        sections.append(Section(heading=heading, text="\n".join(buffer).strip()))
    return sections


def read_document(path: Path) -> SopDocument:
    """Read and validate one document file; its id must match the file name."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DocumentError(source=str(path), message=f"cannot read: {exc}") from exc
    return parse_document(text, source=str(path), expected_id=path.stem)


def docs_dir(knowledge: KnowledgeSettings) -> Path:
    """The document directory in use: ``[knowledge] docs_dir`` or the shipped one."""
    return knowledge.docs_dir or SHIPPED_DOCS_DIR


def load_documents(directory: Path) -> list[SopDocument]:
    """All documents of a directory, sorted by id; the first invalid one raises DocumentError."""
    if not directory.is_dir():
        raise DocumentError(source=str(directory), message="document directory does not exist")
    documents = [read_document(path) for path in sorted(directory.glob("*.md"))]
    seen: dict[str, str] = {}
    for document in documents:
        if document.id in seen:
            raise DocumentError(source=document.source, field="id",
                                message=f"duplicate id {document.id!r}, also in {seen[document.id]}")
        seen[document.id] = document.source
    return documents


def validate_directory(directory: Path) -> list[DocumentError]:
    """Every problem in a directory (not only the first), for the ``validate`` command."""
    problems: list[DocumentError] = []
    for path in sorted(directory.glob("*.md")):
        try:
            read_document(path)
        except DocumentError as exc:
            problems.append(exc)
    if not problems:
        try:
            load_documents(directory)
        except DocumentError as exc:
            problems.append(exc)
    return problems
