"""Time rules shared by every package.

Inside the project every instant is a timezone-aware UTC ``datetime`` (or polars
``Datetime("us", "UTC")``). Beijing time (CST, UTC+8) is used only to find files:
day directories and hour files are named in CST while their contents are UTC.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

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


def format_utc(value: datetime) -> str:
    """``2025-06-05T16:10:02Z`` form used in cases and ground truth."""
    return as_utc(value).strftime("%Y-%m-%dT%H:%M:%SZ")


def cst_day_and_hour(instant: datetime) -> tuple[str, int]:
    """CST directory date (``YYYY-MM-DD``) and CST hour holding a UTC instant."""
    local = as_utc(instant).astimezone(CST)
    return local.strftime("%Y-%m-%d"), local.hour


def cst_hours_between(start: datetime, end: datetime) -> list[tuple[str, int]]:
    """Every (CST date, CST hour) file slot touched by the closed UTC interval [start, end]."""
    start, end = as_utc(start), as_utc(end)
    if end < start:
        raise ValueError(f"window end {format_utc(end)} precedes start {format_utc(start)}")
    slot = start.replace(minute=0, second=0, microsecond=0)
    slots: list[tuple[str, int]] = []
    while slot <= end:
        slots.append(cst_day_and_hour(slot))
        slot += timedelta(hours=1)
    return slots


def cst_day_bounds_utc(day: str) -> tuple[datetime, datetime]:
    """UTC [start, end) of the CST calendar day named ``day`` (``YYYY-MM-DD``)."""
    local_midnight = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=CST)
    start = local_midnight.astimezone(UTC)
    return start, start + timedelta(days=1)
