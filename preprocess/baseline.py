"""Baseline minutes of a window query: which minutes before a window count as its fault-free reference.

Real incidents come close together, so the minutes just before a window may hold the previous
incident. When the caller knows the other incidents' windows (the diagnoser knows every case
window of its input file: input, not ground truth) they are passed as ``exclude`` spans: their
rows are dropped from the baseline and the baseline reaches further back to keep its length.
Only minutes before the window are ever excluded: the window itself is what is judged.
Where the baseline is too thin (sources that record only around incidents), the log and trace
detectors judge against the history around the window instead (``history_span``).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

import polars as pl

Span = tuple[datetime, datetime]


def window_first_minute(start: datetime) -> datetime:
    """The first per-minute row of a window starting at ``start``: rows are whole minutes stamped
    with their first second, so the row of the minute ``start`` falls in (13:03:00 holds 13:03:21)."""
    return start.replace(second=0, microsecond=0)


def history_span(start: datetime, end: datetime, *, history_minutes: int, after_minutes: int) -> Span:
    """The history that stands in for a thin baseline of the window [start, end]: ``history_minutes``
    before the window's first minute to ``after_minutes`` after its end.

    One rule for the log and trace scorers and for the minutes their detectors ask the index to
    read (``context_spans``), so the history a scorer judges against is the one that was read.
    """
    window_start = window_first_minute(start)
    return window_start - timedelta(minutes=history_minutes), end + timedelta(minutes=after_minutes)


def spans_before(exclude: Iterable[Span], *, window_start: datetime, margin: timedelta = timedelta(0)) -> list[Span]:
    """``exclude`` spans (each widened by ``margin`` after its end: recovery tails) clipped to before ``window_start``.

    A span that covers the window start (the window itself, or an overlapping one) keeps only
    its part before the window; spans wholly at or after the window start are dropped.
    """
    clipped: list[Span] = []
    for lo, hi in exclude:
        hi = min(hi + margin, window_start)
        if lo < hi:
            clipped.append((lo, hi))
    return sorted(clipped)


def bucket_spans(spans: Sequence[Span]) -> list[Span]:
    """``spans`` widened to whole minute buckets at their start, for tables aggregated per minute.

    A bucket is stamped with its first second and aggregates the minute's events (calls, log
    lines): the bucket an incident starts in holds the incident's first seconds, so it goes too.
    """
    return [(lo.replace(second=0, microsecond=0), hi) for lo, hi in spans]


def drop_spans(frame: pl.DataFrame, spans: Sequence[Span], *, column: str = "time") -> pl.DataFrame:
    """``frame`` without the rows whose ``column`` lies in one of ``spans``, each ``[lo, hi)``.

    Half-open: ``spans_before`` clips a span that runs into the window at the window's start,
    and the row stamped with that instant is the window's own first minute, not the span's.
    """
    if not spans or frame.height == 0:
        return frame
    inside = pl.lit(False)
    for lo, hi in spans:
        inside = inside | pl.col(column).is_between(pl.lit(lo), pl.lit(hi), closed="left")
    return frame.filter(~inside)


def clean_minutes(lo: datetime, hi: datetime, spans: Sequence[Span]) -> float:
    """Minutes of [lo, hi) outside ``spans``."""
    total = max(0.0, (hi - lo).total_seconds() / 60)
    for a, b in merged_spans(spans):
        overlap = (min(b, hi) - max(a, lo)).total_seconds() / 60
        total -= max(0.0, overlap)
    return max(0.0, total)


def extended_start(window_start: datetime, *, minutes: int, spans: Sequence[Span], max_minutes: int) -> datetime:
    """The baseline start that leaves ``minutes`` clean minutes before ``window_start``, reaching at most
    ``max_minutes`` back."""
    floor = window_start - timedelta(minutes=max_minutes)
    start = window_start - timedelta(minutes=minutes)
    for _ in range(len(spans) + 1):
        missing = minutes - clean_minutes(start, window_start, spans)
        if missing <= 0 or start <= floor:
            break
        start = max(floor, start - timedelta(minutes=missing))
    return start


def merged_spans(spans: Sequence[Span]) -> list[Span]:
    """Overlapping spans joined, sorted (so no minute is counted or read twice)."""
    merged: list[Span] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged
