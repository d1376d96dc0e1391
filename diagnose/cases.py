"""Cases: the incident queries of ``input.json`` and their UTC time windows.

A case is one ``{"uuid": ..., "Anomaly Description": ...}`` object. The description is free
English that holds two UTC instants (five sentence templates in the real release, plus any
paraphrase); this module finds the two instants whatever the wording or order and returns
an aware-UTC window. Bad files and bad descriptions raise ``CaseError`` naming the file,
the JSON position or the uuid.
"""
from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from rca import timeutil
from rca.errors import InputError
from rca.timeutil import as_utc

log = logging.getLogger(__name__)

DESCRIPTION_KEY = "Anomaly Description"

# An ISO-8601 instant: date, 'T' or space, time with optional seconds and fraction, optional
# zone ('Z', '+00:00', '+0000'). Anchored on digits so "uuid-like" tokens do not match.
_INSTANT = re.compile(
    r"(?<![\d-])"
    r"(?P<date>\d{4}-\d{2}-\d{2})[T ]"
    r"(?P<clock>\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?)"
    r"\s*(?P<zone>Z|UTC|[+-]\d{2}:?\d{2})?"
    r"(?![\d:])"
)


class CaseError(InputError):
    """A case file or a case description that cannot be turned into cases."""


class Case(BaseModel):
    """One incident query with its aware-UTC window ``[start, end]``."""

    model_config = ConfigDict(frozen=True)

    uuid: str
    description: str
    start: datetime
    end: datetime

    @field_validator("start", "end")
    @classmethod
    def _must_be_aware_utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("case instants must be timezone-aware")
        return value.astimezone(UTC)

    @model_validator(mode="after")
    def _ordered(self) -> Case:
        if self.end < self.start:
            raise ValueError(f"case {self.uuid}: end {self.end} precedes start {self.start}")
        return self


def _instant_from_match(match: re.Match[str]) -> datetime:
    clock = match.group("clock")
    if clock.count(":") == 1:
        clock += ":00"
    seconds_part, _, fraction = clock.partition(".")
    # datetime.fromisoformat accepts at most 6 fractional digits: truncate nanoseconds.
    text = f"{match.group('date')}T{seconds_part}" + (f".{fraction[:6].ljust(6, '0')}" if fraction else "")
    value = datetime.fromisoformat(text)
    zone = match.group("zone")
    if zone is None or zone in ("Z", "UTC"):
        return value.replace(tzinfo=UTC)
    sign = 1 if zone[0] == "+" else -1
    digits = zone[1:].replace(":", "")
    offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return as_utc(value.replace(tzinfo=timezone(sign * offset)))


def parse_window(text: str, *, uuid: str) -> tuple[datetime, datetime]:
    """The two UTC instants of a description as ``(start, end)``, earliest first.

    Word order does not matter ("from X to Y", "between Y and X", ...); naive instants are
    UTC, as in the release. Raises ``CaseError`` naming ``uuid`` unless exactly two
    instants are present.
    """
    matches = list(_INSTANT.finditer(text))
    if len(matches) != 2:
        raise CaseError(
            f"case {uuid}: expected exactly two ISO-8601 instants in the description, "
            f"found {len(matches)}: {text!r}"
        )
    try:
        first, second = (_instant_from_match(m) for m in matches)
    except ValueError as exc:
        raise CaseError(f"case {uuid}: invalid instant in description {text!r}: {exc}") from exc
    return (first, second) if first <= second else (second, first)


def _case_from_object(obj: object, *, where: str) -> Case:
    if not isinstance(obj, dict):
        raise CaseError(f"{where}: expected an object with 'uuid' and {DESCRIPTION_KEY!r}, got {type(obj).__name__}")
    uuid = obj.get("uuid")
    description = obj.get(DESCRIPTION_KEY)
    if not isinstance(uuid, str) or not uuid.strip():
        raise CaseError(f"{where}: missing or empty 'uuid'")
    if not isinstance(description, str):
        raise CaseError(f"{where}: case {uuid} has no string field {DESCRIPTION_KEY!r}")
    start, end = parse_window(description, uuid=uuid)
    return Case(uuid=uuid.strip(), description=description, start=start, end=end)


def _json_error(path: Path, exc: json.JSONDecodeError, *, line_offset: int = 0) -> CaseError:
    return CaseError(f"{path}: malformed JSON at line {exc.lineno + line_offset}, column {exc.colno}: {exc.msg}")


class CaseFile(BaseModel):
    """The cases of a file that parse, and an error per case that does not (bad cases fail alone).

    ``bad`` maps the case's uuid (or ``item N`` / ``line N`` when it has none) to its error.
    """

    model_config = ConfigDict(frozen=True)

    path: Path
    cases: list[Case]
    bad: dict[str, str]


def load_cases(path: Path) -> list[Case]:
    """Parse an ``input.json`` (a JSON array of cases, or JSON Lines) into cases, in file order.

    Raises ``CaseError`` on the first bad case; ``read_cases`` keeps the good ones instead.
    """
    case_file = read_cases(path)
    if case_file.bad:
        raise CaseError(next(iter(case_file.bad.values())))
    return case_file.cases


def read_cases(path: Path) -> CaseFile:
    """Parse a case file, keeping every good case and one error per bad one, by name.

    Only a file that cannot be read or is not JSON at all raises ``CaseError``.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CaseError(f"{path}: cannot read case file: {exc}") from exc

    objects: list[tuple[object, str]] = []
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _json_error(path, exc) from exc
        objects = [(obj, f"{path}: item {i}") for i, obj in enumerate(data)]
    elif text.strip():
        # JSON Lines: one case object per non-empty line.
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                objects.append((json.loads(line), f"{path}: line {number}"))
            except json.JSONDecodeError as exc:
                raise _json_error(path, exc, line_offset=number - 1) from exc
    else:
        raise CaseError(f"{path}: case file is empty")

    cases: list[Case] = []
    bad: dict[str, str] = {}
    seen: set[str] = set()
    for obj, where in objects:
        raw_uuid = obj.get("uuid") if isinstance(obj, dict) else None
        name = raw_uuid.strip() if isinstance(raw_uuid, str) and raw_uuid.strip() else where.rsplit(": ", 1)[-1]
        try:
            case = _case_from_object(obj, where=where)
            if case.uuid in seen:
                raise CaseError(f"{where}: duplicate uuid {case.uuid}")
        except (CaseError, ValueError) as exc:  # ValueError: pydantic's validation of the window
            bad.setdefault(name, str(exc) if isinstance(exc, CaseError) else f"{where}: {exc}")
            continue
        seen.add(case.uuid)
        cases.append(case)
    log.info("loaded %d cases from %s%s", len(cases), path, f" ({len(bad)} unusable)" if bad else "")
    return CaseFile(path=path, cases=cases, bad=bad)


def input_case_windows(path: Path | None) -> list[tuple[datetime, datetime]]:
    """The window of every good case of an input file (empty when there is no such file).

    These are input, not ground truth: the index leaves each other incident's minutes out of
    a window's baseline. An unreadable file gives none (logged): diagnosis does not depend on it.
    """
    if path is None or not Path(path).is_file():
        return []
    try:
        return [(case.start, case.end) for case in read_cases(Path(path)).cases]
    except CaseError as exc:
        log.warning("no case windows to leave out of baselines: %s", exc)
        return []


# --------------------------------------------------------------------------- cases as an SRE has them


def _one_instant(text: str, *, where: str) -> datetime:
    matches = list(_INSTANT.finditer(text.strip()))
    if len(matches) != 1 or matches[0].group(0) != text.strip():
        raise CaseError(f"{where}: {text!r} is not an ISO-8601 instant (e.g. 2025-06-22T04:18Z)")
    try:
        return _instant_from_match(matches[0])
    except ValueError as exc:
        raise CaseError(f"{where}: invalid instant {text!r}: {exc}") from exc


def _case_for(start: datetime, end: datetime, *, uuid: str | None, summary: str, where: str) -> Case:
    if end < start:
        raise CaseError(f"{where}: end {end.isoformat()} precedes start {start.isoformat()}")
    # The description carries the window in the release's own wording, so a Case built here
    # reads like one of input.json wherever the description is shown or parsed again.
    window = f"from {start.strftime('%Y-%m-%dT%H:%M:%SZ')} to {end.strftime('%Y-%m-%dT%H:%M:%SZ')}"
    name = uuid or f"window-{start.strftime('%Y%m%dT%H%M%SZ')}-{end.strftime('%Y%m%dT%H%M%SZ')}"
    description = f"{summary.strip()} The anomaly lasted {window}." if summary.strip() else \
        f"An anomaly occurred {window}."
    return Case(uuid=name, description=description, start=start, end=end)


def case_from_window(text: str, *, uuid: str | None = None) -> Case:
    """A case for an ISO-8601 interval ``START/END`` (``2025-06-22T04:18Z/2025-06-22T04:21Z``).

    The uuid defaults to ``window-<start>-<end>`` (compact UTC), stable for the same window.
    """
    start_text, sep, end_text = text.partition("/")
    if not sep:
        raise CaseError(f"--window {text!r}: expected START/END, e.g. 2025-06-22T04:18Z/2025-06-22T04:21Z")
    start = _one_instant(start_text, where="--window start")
    end = _one_instant(end_text, where="--window end")
    return _case_for(start, end, uuid=uuid, summary="", where=f"--window {text!r}")


def parse_duration(text: str) -> timedelta:
    """``15m``, ``2h``, ``1h30m``, ``90s``, ``1d`` as a positive timedelta (``rca.timeutil``'s rule)."""
    try:
        return timeutil.parse_duration(text)
    except ValueError as exc:
        raise CaseError(f"--since {exc}") from exc


def case_since(duration: str, *, until: datetime) -> Case:
    """A case for the last ``duration`` before ``until`` (the newest telemetry, or now)."""
    end = as_utc(until).replace(microsecond=0)
    return _case_for(end - parse_duration(duration), end, uuid=None, summary="", where=f"--since {duration!r}")


def read_alerts(path: Path) -> CaseFile:
    """An alert file: a JSON list of ``{"id", "start", "end", "summary"}`` (instants ISO-8601, UTC
    when naive), as an SRE's alerting exports them. Bad alerts fail alone, like bad cases."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CaseError(f"{path}: cannot read alert file: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise _json_error(path, exc) from exc
    if not isinstance(data, list):
        raise CaseError(f"{path}: expected a JSON list of alerts {{id, start, end, summary}}, got {type(data).__name__}")
    cases: list[Case] = []
    bad: dict[str, str] = {}
    for i, obj in enumerate(data):
        where = f"{path}: alert {i}"
        raw_id = obj.get("id") if isinstance(obj, dict) else None
        name = str(raw_id).strip() if raw_id not in (None, "") else f"alert {i}"
        try:
            if not isinstance(obj, dict):
                raise CaseError(f"{where}: expected an object with id, start, end, summary")
            for field in ("id", "start", "end"):
                if obj.get(field) in (None, ""):
                    raise CaseError(f"{where}: missing field {field!r}")
            summary = obj.get("summary") or ""
            if not isinstance(summary, str):
                raise CaseError(f"{where}: field 'summary' must be a string")
            case = _case_for(_one_instant(str(obj["start"]), where=f"{where}.start"),
                             _one_instant(str(obj["end"]), where=f"{where}.end"),
                             uuid=name, summary=summary, where=where)
            if any(c.uuid == case.uuid for c in cases):
                raise CaseError(f"{where}: duplicate id {case.uuid}")
        except CaseError as exc:
            bad.setdefault(name, str(exc))
            continue
        cases.append(case)
    log.info("loaded %d alerts from %s%s", len(cases), path, f" ({len(bad)} unusable)" if bad else "")
    return CaseFile(path=path, cases=cases, bad=bad)
