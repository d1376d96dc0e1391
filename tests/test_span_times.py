"""scripts/span_times.py on synthetic spans with known times: where a call's added time was spent."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from preprocess.schema import SPAN_SCHEMA
from tests.script_modules import load_script

START = datetime(2022, 8, 22, 5, 0, tzinfo=UTC)


def _call(trace: str, at: datetime, *, wait_us: int, own_us: int, child_us: int) -> list[dict]:
    """frontend's client span -> cartservice's server span (own work) -> its client span to redis."""
    server_us = own_us + child_us
    base = {"operation": "op", "pod": None, "node": None, "peer_service": None, "start": at, "status_code": 0,
            "is_error": False}
    return [
        {**base, "trace_id": trace, "span_id": f"{trace}c", "parent_span_id": None, "service": "frontend",
         "span_kind": "client", "duration_us": server_us + wait_us},
        {**base, "trace_id": trace, "span_id": f"{trace}s", "parent_span_id": f"{trace}c", "service": "cartservice",
         "span_kind": "server", "duration_us": server_us},
        {**base, "trace_id": trace, "span_id": f"{trace}r", "parent_span_id": f"{trace}s", "service": "cartservice",
         "span_kind": "client", "duration_us": child_us},
    ]


@pytest.mark.parametrize(("fault", "during"), [
    ("network delay", {"wait_us": 200_000, "own_us": 400, "child_us": 1_000}),  # the time is on the wire
    ("cpu stress", {"wait_us": 50_000, "own_us": 40_000, "child_us": 1_000}),  # and in the work itself
])
def test_times_tell_the_wait_from_the_work(fault, during):
    span_times = load_script("span_times")
    rows = [row for i in range(20) for row in _call(f"b{i}", START - timedelta(seconds=60 - i),
                                                    wait_us=2_000, own_us=400, child_us=1_000)]
    rows += [row for i in range(20) for row in _call(f"d{i}", START + timedelta(seconds=40 + i), **during)]
    served = span_times.server_span_times(pl.DataFrame(rows, schema=SPAN_SCHEMA))
    before = span_times.times_of(served, service="cartservice", start=START, stretch=span_times.BEFORE)
    after = span_times.times_of(served, service="cartservice", start=START, stretch=span_times.DURING)
    assert (before.spans, after.spans) == (20, 20)
    assert (before.self_us, before.wait_us, before.duration_us) == (400, 2_000, 1_400)
    assert (after.self_us, after.wait_us) == (during["own_us"], during["wait_us"])
    assert span_times.times_of(served, service="frontend", start=START, stretch=span_times.DURING).spans == 0
