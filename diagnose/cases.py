"""Cases: the incident queries of ``input.json`` and their UTC time windows.

A case is one ``{"uuid": ..., "Anomaly Description": ...}`` object. The description is free
English that holds two UTC instants (five sentence templates in the real release, plus any
paraphrase); this module finds the two instants whatever the wording or order and returns
an aware-UTC window. Bad files and bad descriptions raise ``CaseError`` naming the file,
the JSON position or the uuid.

Cases as an SRE has them are made here too: a window, the last N minutes, and an alert file
(``read_alerts``: Alertmanager's webhook payloads or API v2 alerts, or our own list), or such a
document already loaded (``alert_cases``: what ``diagnose.alertmanager`` pulls).
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from rca import timeutil
from rca.errors import InputError
from rca.settings import DiagnoseSettings
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

    path: Path | str  # the file, or the URL the alerts were pulled from (``diagnose --alertmanager``)
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


# --------------------------------------------------------------------------- alert files

# Go's zero time: the endsAt Alertmanager writes for an end it does not know (a webhook's firing alert).
_GO_ZERO_DATE = "0001-01-01"
# The labels that say where an alert fired, in the order a summary names them.
_WHERE_LABELS = ("service", "deployment", "pod", "container", "node", "instance", "job", "namespace", "cluster")
# A case uuid names files (runs_dir/<uuid>.json, the report's <uuid>.html): nothing else goes in one.
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_SUMMARY_ALERTS = 5  # the alerts a case summary describes; the rest of a group's are counted
_ALERT_DEFAULTS = DiagnoseSettings()
_ALERT_SHAPES = ("an Alertmanager webhook payload {groupKey, alerts: [...]} (one, a list or JSON lines of them), "
                 "or a JSON list of Alertmanager API v2 alerts {labels, startsAt, endsAt, fingerprint, ...} "
                 "or of {id, start, end, summary}")


@dataclass(frozen=True)
class _Firing:
    """One firing of one Alertmanager alert: its start, where its window ends, and a summary's words on it."""

    key: tuple[str, datetime]  # the alert (fingerprint, else its labels) and its startsAt
    start: datetime
    end: datetime
    ended: bool  # False: still firing, and ``end`` is the time it was sent or startsAt + span
    words: str  # "HighErrorRate (service=checkoutservice, namespace=shop): Checkout errors above 5%"
    note: str = ""  # API v2's state when it is not "active": suppressed, unprocessed


@dataclass
class _Incident:
    """What one case of an Alertmanager file gathers: a webhook group's or an API v2 alert's firings."""

    firings: dict[tuple[str, datetime], _Firing] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # its alerts that could not be read, by place

    def add(self, firing: _Firing) -> None:
        # A group is sent again as it changes: the later word on a firing wins, except that a
        # still-firing guess never replaces an end the group once reported.
        known = self.firings.get(firing.key)
        if known is None or firing.ended or not known.ended:
            self.firings[firing.key] = firing

    def merge(self, other: _Incident) -> None:
        for firing in other.firings.values():
            self.add(firing)
        self.errors.update(other.errors)


def _labels_field(obj: dict[str, Any], name: str, *, where: str, required: bool) -> dict[str, str]:
    value = obj.get(name)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise CaseError(f"{where}: missing field {name!r}" if value is None
                        else f"{where}: field {name!r} must be an object of names to strings")
    return {str(k): str(v) for k, v in value.items()}


def _instant_field(obj: dict[str, Any], name: str, *, where: str) -> datetime:
    value = obj.get(name)
    if not isinstance(value, str) or not value.strip():
        raise CaseError(f"{where}: missing field {name!r}" if value in (None, "")
                        else f"{where}: field {name!r} must be an ISO-8601 string, got {value!r}")
    return _one_instant(value, where=f"{where}: field {name!r}")


def _id_part(text: str) -> str:
    return _UNSAFE_ID_CHARS.sub("-", text).strip("-.")[:40] or "alert"


def _firing(alert: object, *, where: str, sent: datetime | None, now: datetime, span: timedelta) -> _Firing:
    """An alert's firing, from its startsAt to its endsAt or, while it still fires, to ``sent`` (when
    the file says it was sent, if that is not before startsAt) but at most to startsAt + ``span``, else
    to startsAt + ``span``. The cap: an alert firing for hours when it is read (a receiver started late,
    ``--alertmanager`` on a long-firing alert) would otherwise make a window of hours, where the onset
    the ranker reads is diluted; the index is tuned on windows of about a quarter of an hour.

    Still firing: the alert says so (a webhook's ``status``), or its endsAt is unset (Go's zero time)
    or after ``sent`` (else ``now``). Alertmanager sets a firing alert's endsAt ahead, to when it
    resolves unless it is sent again: that is no end.
    """
    if not isinstance(alert, dict):
        raise CaseError(f"{where}: expected an alert object {{labels, annotations, startsAt, endsAt}}, "
                        f"got {type(alert).__name__}")
    labels = _labels_field(alert, "labels", where=where, required=True)
    annotations = _labels_field(alert, "annotations", where=where, required=False)
    start = _instant_field(alert, "startsAt", where=where)
    raw_end = alert.get("endsAt")
    unset = raw_end in (None, "") or (isinstance(raw_end, str) and raw_end.strip().startswith(_GO_ZERO_DATE))
    given_end = None if unset else _instant_field(alert, "endsAt", where=where)
    if given_end is not None and given_end <= (sent or now) and alert.get("status") != "firing":
        if given_end < start:
            raise CaseError(f"{where}: field 'endsAt' {raw_end!r} precedes field 'startsAt' {alert['startsAt']!r}")
        end, ended = given_end, True
    else:
        end, ended = (min(sent, start + span) if sent is not None and sent >= start else start + span), False
    place = ", ".join(f"{key}={labels[key]}" for key in _WHERE_LABELS if labels.get(key))
    # Templated annotations span lines and often end without a stop: one line, sentences stopped.
    texts = (" ".join(annotations.get(key, "").split()).rstrip(". ") for key in ("summary", "description"))
    text = ". ".join(dict.fromkeys(t for t in texts if t))
    words = (labels.get("alertname") or "alert") + (f" ({place})" if place else "") + (f": {text}" if text else "")
    fingerprint = alert.get("fingerprint")
    identity = fingerprint.strip() if isinstance(fingerprint, str) and fingerprint.strip() else \
        json.dumps(labels, sort_keys=True)
    return _Firing(key=(identity, start), start=start, end=end, ended=ended, words=words)


def _group_case_id(group_key: str, group_labels: dict[str, str]) -> str:
    """``<alertname>-<10 hex digits of sha256(groupKey)>``, the same for every payload of the group.

    Not the groupKey itself: it is a route path with braces, quotes and slashes (``{}/{team="a"}:
    {alertname="X"}``), no name for a file. The name is the group's alertname, else the values of
    the labels it is grouped by."""
    name = group_labels.get("alertname") or "-".join(value for _, value in sorted(group_labels.items())) or "alerts"
    return f"{_id_part(name)}-{hashlib.sha256(group_key.encode('utf-8')).hexdigest()[:10]}"


def _webhook_incident(payload: dict[str, Any], *, where: str, place: str, now: datetime, span: timedelta,
                      sent: datetime | None = None) -> tuple[str, _Incident]:
    """A webhook payload's case id and its alerts' firings (an alert that cannot be read fails alone);
    ``sent``: when the payload was sent, where the reader knows it (a receiver: when it arrived)."""
    group_key = payload.get("groupKey")
    if not isinstance(group_key, str) or not group_key.strip():
        raise CaseError(f"{where}: Alertmanager webhook payload without field 'groupKey'")
    alerts = payload.get("alerts")
    if not isinstance(alerts, list) or not alerts:
        raise CaseError(f"{where}: Alertmanager webhook payload: field 'alerts' must be a non-empty list")
    incident = _Incident()
    for i, alert in enumerate(alerts):
        try:
            incident.add(_firing(alert, where=f"{where}: alert {i}", sent=sent, now=now, span=span))
        except CaseError as exc:
            incident.errors[f"{place} alert {i}"] = str(exc)
    truncated = payload.get("truncatedAlerts")
    if isinstance(truncated, int) and truncated > 0:
        log.warning("%s: Alertmanager left %d alerts out of this payload (max_alerts); its window is the others'",
                    where, truncated)
    group_labels = _labels_field(payload, "groupLabels", where=where, required=False)
    return _group_case_id(group_key, group_labels), incident


def _api_alert_case_id(alert: dict[str, Any]) -> str | None:
    """``<alertname>-<fingerprint>`` (a fingerprint that is not a plain token: its sha256, 16 hex digits)."""
    fingerprint = alert.get("fingerprint")
    if not isinstance(fingerprint, str) or not fingerprint.strip():
        return None
    fingerprint = fingerprint.strip()
    if _UNSAFE_ID_CHARS.search(fingerprint) or len(fingerprint) > 32:
        fingerprint = hashlib.sha256(fingerprint.encode("utf-8")).hexdigest()[:16]
    labels = alert.get("labels")
    name = labels.get("alertname") if isinstance(labels, dict) else None
    return f"{_id_part(str(name or 'alert'))}-{fingerprint}"


def _api_incident(alert: dict[str, Any], *, where: str, now: datetime, span: timedelta) -> tuple[str, _Incident]:
    """An API v2 alert's case id and its firing, still firing until its ``updatedAt`` when it fires on."""
    case_id = _api_alert_case_id(alert)
    if case_id is None:
        raise CaseError(f"{where}: Alertmanager API v2 alert without field 'fingerprint'")
    sent = None if alert.get("updatedAt") in (None, "") else _instant_field(alert, "updatedAt", where=where)
    firing = _firing(alert, where=where, sent=sent, now=now, span=span)
    status = alert.get("status")
    state = status.get("state") if isinstance(status, dict) else None
    if state in ("suppressed", "unprocessed"):
        firing = replace(firing, note=state)
    incident = _Incident()
    incident.add(firing)
    return case_id, incident


def _incident_case(case_id: str, incident: _Incident, *, lead: timedelta, where: str) -> Case:
    """The case of an incident: from ``lead`` before its first startsAt to its last end, its summary
    saying whether any alert still fires and what each says."""
    firings = sorted(incident.firings.values(), key=lambda f: (f.start, f.words))
    state = "firing" if any(not f.ended for f in firings) else "resolved"
    notes = sorted({f.note for f in firings if f.note})
    described = list(dict.fromkeys(f.words for f in firings))
    shown = "; ".join(described[:_SUMMARY_ALERTS])
    if len(described) > _SUMMARY_ALERTS:
        shown += f"; and {len(described) - _SUMMARY_ALERTS} more"
    head = f"{state.capitalize()} alert{'s' if len(firings) > 1 else ''}" + (f" ({', '.join(notes)})" if notes else "")
    summary = f"{head}: {shown}."
    return _case_for(firings[0].start - lead, max(f.end for f in firings), uuid=case_id, summary=summary, where=where)


def _listed_alert(obj: dict[str, Any], *, where: str, name: str) -> Case:
    """An alert of our own list shape ``{id, start, end, summary}``: its window as given."""
    for key in ("id", "start", "end"):
        if obj.get(key) in (None, ""):
            raise CaseError(f"{where}: missing field {key!r}")
    summary = obj.get("summary") or ""
    if not isinstance(summary, str):
        raise CaseError(f"{where}: field 'summary' must be a string")
    return _case_for(_one_instant(str(obj["start"]), where=f"{where}.start"),
                     _one_instant(str(obj["end"]), where=f"{where}.end"),
                     uuid=name, summary=summary, where=where)


def _alert_lines(path: Path, text: str, exc: json.JSONDecodeError) -> tuple[list[tuple[object, str]], dict[str, str]]:
    """The objects of an alert file that is no one JSON document, each with its place (``line N``), and
    the lines that are not JSON (each fails alone, by place).

    JSON lines (a webhook receiver's log) when the file's first line is a JSON object on its own: a
    pretty-printed document that is not JSON is then one error (``exc``), at its line.
    """
    first = next(line for line in text.splitlines() if line.strip())
    try:
        one_per_line = isinstance(json.loads(first), dict)
    except json.JSONDecodeError:
        one_per_line = False
    if not one_per_line:
        raise _json_error(path, exc) from exc
    objects: list[tuple[object, str]] = []
    bad: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            objects.append((json.loads(line), f"line {number}"))
        except json.JSONDecodeError as line_exc:
            bad[f"line {number}"] = f"{path}: line {number}: malformed JSON at column {line_exc.colno}: {line_exc.msg}"
    return objects, bad


def _document_objects(source: Path | str, document: object) -> list[tuple[object, str]]:
    """The objects of one alert document, each with its place (``payload [N]``, ``alert N``)."""
    if isinstance(document, list):
        return [(obj, f"payload {i}" if isinstance(obj, dict) and "alerts" in obj else f"alert {i}")
                for i, obj in enumerate(document)]
    if isinstance(document, dict) and "alerts" in document:
        return [(document, "payload")]
    keys = f"with keys {', '.join(map(str, list(document)[:8]))}" if isinstance(document, dict) else ""
    raise CaseError(f"{source}: expected {_ALERT_SHAPES}; got a {type(document).__name__} {keys}".rstrip())


def read_alerts(path: Path, *, lead: timedelta = _ALERT_DEFAULTS.alert_lead,
                span: timedelta = _ALERT_DEFAULTS.alert_span, now: datetime | None = None) -> CaseFile:
    """The cases of an alert file as an SRE's alerting writes it, each object told apart by its shape
    (diagnose/README.md, "Alert files"):

    - Alertmanager webhook payloads, Grafana's too: one object, a list, or JSON lines (a receiver's
      log). One case per groupKey over every payload of the group (the same group is sent again as
      it changes): from ``lead`` before its earliest startsAt to its latest end.
    - Alertmanager API v2 alerts (``GET /api/v2/alerts``, ``amtool alert query -o json``): one case
      per fingerprint, from ``lead`` before startsAt to its end, else its ``updatedAt``.
    - Our own list of ``{"id", "start", "end", "summary"}`` (ISO-8601, UTC when naive): as given.

    An alert still firing (``_firing``) ends at the time the file says it was sent, else ``span``
    after its startsAt. ``now`` (default: the clock) stands for that time where the file does not
    say it: an endsAt after it is Alertmanager's guess, not an end. Bad alerts, payloads and lines
    fail alone, like bad cases, named by case id or by place.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CaseError(f"{path}: cannot read alert file: {exc}") from exc
    if not text.strip():
        raise CaseError(f"{path}: alert file is empty")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        objects, bad = _alert_lines(path, text, exc)
        return _alert_cases(objects, bad, source=path, lead=lead, span=span, now=now)
    return alert_cases(document, source=path, lead=lead, span=span, now=now)


def alert_cases(document: object, *, source: Path | str, lead: timedelta = _ALERT_DEFAULTS.alert_lead,
                span: timedelta = _ALERT_DEFAULTS.alert_span, now: datetime | None = None,
                sent: datetime | None = None) -> CaseFile:
    """The cases of one decoded alert document, as ``read_alerts`` reads a file that holds one: an alert
    file's JSON, the answer of Alertmanager's ``GET /api/v2/alerts`` (``diagnose --alertmanager``), or a
    webhook payload as it arrives (``diagnose --listen``).

    ``source`` (the file, the URL) names the document in every error and is the ``CaseFile``'s path.
    ``sent``: when the webhook payloads were sent, where the reader knows it (the receiver: when one
    arrived); a still-firing alert of a payload then ends there instead of ``span`` after its startsAt.
    A document of no known shape raises ``CaseError``; bad alerts and payloads fail alone.
    """
    return _alert_cases(_document_objects(source, document), {}, source=source, lead=lead, span=span, now=now,
                        sent=sent)


def _alert_cases(objects: list[tuple[object, str]], bad: dict[str, str], *, source: Path | str, lead: timedelta,
                 span: timedelta, now: datetime | None, sent: datetime | None = None) -> CaseFile:
    """The cases of an alert document's objects, each with its place; ``bad``: the places already unusable."""
    now = datetime.now(UTC) if now is None else as_utc(now)
    found: dict[str, Case | _Incident] = {}  # by case id, in the order the document first names them
    for obj, place in objects:
        where = f"{source}: {place}"
        name = place
        try:
            if isinstance(obj, dict) and "alerts" in obj:
                case_id, incident = _webhook_incident(obj, where=where, place=place, now=now, span=span,
                                                      sent=None if sent is None else as_utc(sent))
            elif isinstance(obj, dict) and "labels" in obj:
                name = _api_alert_case_id(obj) or place
                case_id, incident = _api_incident(obj, where=where, now=now, span=span)
            elif isinstance(obj, dict) and any(key in obj for key in ("id", "start", "end", "summary")):
                raw_id = obj.get("id")
                name = str(raw_id).strip() if raw_id not in (None, "") else place
                case = _listed_alert(obj, where=where, name=name)
                if case.uuid in found:
                    raise CaseError(f"{where}: duplicate id {case.uuid}")
                found[case.uuid] = case
                continue
            else:
                raise CaseError(f"{where}: not an alert: expected {_ALERT_SHAPES}")
            known = found.setdefault(case_id, _Incident())
            if isinstance(known, Case):
                raise CaseError(f"{where}: duplicate id {case_id}")
            known.merge(incident)
        except CaseError as exc:
            bad.setdefault(name, str(exc))
    cases: list[Case] = []
    for case_id, item in found.items():
        if isinstance(item, Case):
            cases.append(item)
        elif not item.firings:  # not one alert of the group could be read
            bad.setdefault(case_id, "; ".join(item.errors.values()))
        else:
            bad.update(item.errors)
            try:
                cases.append(_incident_case(case_id, item, lead=lead, where=f"{source}: {case_id}"))
            except CaseError as exc:
                bad.setdefault(case_id, str(exc))
    log.info("loaded %d alert cases from %s%s", len(cases), source, f" ({len(bad)} unusable)" if bad else "")
    return CaseFile(path=source, cases=cases, bad=bad)
