"""Baseline exclusion (preprocess.baseline): other incidents' minutes leave the baseline, never the window."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from preprocess.baseline import bucket_spans, drop_spans, spans_before

T0 = datetime(2022, 8, 22, 7, 0, tzinfo=UTC)


def _minutes(n: int) -> pl.DataFrame:
    return pl.DataFrame({"time": [T0 + timedelta(minutes=i) for i in range(n)], "value": list(range(n))})


@pytest.mark.parametrize("bucketed", [False, True])
def test_a_span_clipped_at_the_window_start_keeps_the_windows_first_minute(bucketed):
    """The earlier incident (07:10:43, three minutes and a five-minute tail: to 07:18:43) runs past
    this window's start (07:17): clipped there, it drops 07:10-07:16 and keeps the window's 07:17."""
    window_start = T0 + timedelta(minutes=17)
    spans = spans_before([(T0 + timedelta(minutes=10, seconds=43), T0 + timedelta(minutes=13, seconds=43))],
                         window_start=window_start, margin=timedelta(minutes=5))
    assert spans == [(T0 + timedelta(minutes=10, seconds=43), window_start)]
    if bucketed:  # per-minute tables (log counts, call edges): the span's first bucket goes too
        spans = bucket_spans(spans)
    kept = drop_spans(_minutes(20), spans).get_column("value").to_list()
    first_dropped = 10 if bucketed else 11
    assert kept == [*range(first_dropped), 17, 18, 19]


def test_a_span_wholly_before_the_window_drops_its_minutes():
    kept = drop_spans(_minutes(10), [(T0 + timedelta(minutes=3), T0 + timedelta(minutes=5, seconds=30))])
    assert kept.get_column("value").to_list() == [0, 1, 2, 6, 7, 8, 9]
