"""Quotas and rate limits of the judge server, on an injectable clock.

Quota: at most ``daily_quota`` accepted submissions per team per day and ``total_quota`` in all
(the contest's; a team belongs to one contest). The day starts at midnight in the configured time
zone. Rejected submissions never count (the count is of stored rows). Rate: at most
``rate_max_requests`` authenticated requests per team in any ``rate_window_s`` seconds, kept in
memory (one server process per database; a restart forgets the window, never the quota).
"""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from rca.errors import InputError

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def time_zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InputError(f"setting 'judge_server.timezone': unknown time zone {name!r}") from exc


def quota_day(moment: datetime, zone: ZoneInfo) -> str:
    """The quota day a moment falls in: its local date in ``zone``."""
    return moment.astimezone(zone).date().isoformat()


class RateLimiter:
    """Sliding window per key; only allowed requests enter the window."""

    def __init__(self, *, max_requests: int, window_s: float, clock: Clock) -> None:
        self._max = max_requests
        self._window = window_s
        self._clock = clock
        self._seen: dict[int, deque[float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: int) -> bool:
        now = self._clock().timestamp()
        with self._lock:
            times = self._seen.setdefault(key, deque())
            while times and times[0] <= now - self._window:
                times.popleft()
            if len(times) >= self._max:
                return False
            times.append(now)
            return True
