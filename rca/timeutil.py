"""Time rules shared by every package.

Inside the project every instant is a timezone-aware UTC ``datetime`` (or polars
``Datetime("us", "UTC")``). A local zone is used only to find files: day directories and
hour files are named in the system's file zone (``SystemSpec.file_zone()``; the challenge's
is Beijing time, CST, UTC+8, the default here) while their contents are UTC.
"""
from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo

UTC = UTC
CST = timezone(timedelta(hours=8), name="CST")


def as_utc(value: datetime) -> datetime:
    """Return ``value`` as an aware UTC datetime; naive values are taken to be UTC."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def parse_utc(text: str) -> datetime:
    """Parse an ISO-8601 instant (``Z``, ``+00:00`` or naive, all UTC) into aware UTC."""
    cleaned = text.strip().replace("Z", "+00:00")
    return as_utc(datetime.fromisoformat(cleaned))


_DURATION = re.compile(r"^(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")


def parse_duration(text: str) -> timedelta:
    """``15m``, ``2h``, ``1h30m``, ``90s``, ``1d`` as a positive timedelta; ValueError otherwise.

    One spelling for every ``--since`` (``rca diagnose``, ``rca import --url``).
    """
    match = _DURATION.match(text.strip().lower())
    if not text.strip() or match is None or not any(match.groupdict().values()):
        raise ValueError(f"{text!r} is not a duration such as 15m, 2h, 1h30m, 90s or 1d")
    parts = {k: int(v or 0) for k, v in match.groupdict().items()}
    span = timedelta(days=parts["d"], hours=parts["h"], minutes=parts["m"], seconds=parts["s"])
    if span <= timedelta(0):
        raise ValueError(f"{text!r}: a duration must be positive")
    return span


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_us(instant: datetime) -> int:
    """Whole microseconds since 1970-01-01 UTC (a naive instant is UTC)."""
    return (as_utc(instant) - _EPOCH) // timedelta(microseconds=1)


def from_epoch_us(micros: int) -> datetime:
    """The UTC instant ``micros`` microseconds after 1970-01-01 UTC."""
    return _EPOCH + timedelta(microseconds=micros)


def format_utc(value: datetime) -> str:
    """``2025-06-05T16:10:02Z`` form used in cases and ground truth."""
    return as_utc(value).strftime("%Y-%m-%dT%H:%M:%SZ")


def cst_day_and_hour(instant: datetime, *, zone: tzinfo = CST) -> tuple[str, int]:
    """Directory date (``YYYY-MM-DD``) and hour in the file zone (default CST) holding a UTC instant."""
    local = as_utc(instant).astimezone(zone)
    return local.strftime("%Y-%m-%d"), local.hour


def cst_hours_between(start: datetime, end: datetime, *, zone: tzinfo = CST) -> list[tuple[str, int]]:
    """Every (local date, local hour) file slot touched by the closed UTC interval [start, end].

    Local is the file zone (default CST); hours are walked in UTC so a zone with a
    half-hour offset still gets every slot."""
    start, end = as_utc(start), as_utc(end)
    if end < start:
        raise ValueError(f"window end {format_utc(end)} precedes start {format_utc(start)}")
    slot = start.replace(minute=0, second=0, microsecond=0)
    slots: list[tuple[str, int]] = []
    while slot <= end:
        slots.append(cst_day_and_hour(slot, zone=zone))
        slot += timedelta(hours=1)
    # A half-hour zone can touch one more local hour at the end.
    last = cst_day_and_hour(end, zone=zone)
    if last not in slots:
        slots.append(last)
    return list(dict.fromkeys(slots))


def cst_day_bounds_utc(day: str, *, zone: tzinfo = CST) -> tuple[datetime, datetime]:
    """UTC [start, end) of the calendar day named ``day`` (``YYYY-MM-DD``) in the file zone (default CST)."""
    local_midnight = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=zone)
    start = local_midnight.astimezone(UTC)
    # The next local midnight, not +24 h: a zone with daylight saving has 23- and 25-hour days.
    next_midnight = (datetime.strptime(day, "%Y-%m-%d") + timedelta(days=1)).replace(tzinfo=zone).astimezone(UTC)
    return start, next_midnight
