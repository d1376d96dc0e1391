"""A few sampled calls a minute: a minute's p95 is the slowest of a handful of calls.

A callee with a slow path now and then (on Nezha's tuning day emailservice answers some calls in
60 ms, most in 6) then shows the slow path in about a fifth of the minutes of a sampled edge, a
tail the MAD of the per-minute p95 does not see. A window whose p95 sits at that tail is the edge's
habit, not a latency anomaly (``TraceParams.reference_quantile``); a real slowdown clears it.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from preprocess.detect_trace import EDGE_STATS_SCHEMA, TraceParams, score_trace_window

WINDOW_START = datetime(2022, 8, 22, 6, 53, tzinfo=UTC)
WINDOW_END = WINDOW_START + timedelta(minutes=3)
BASELINE_START = WINDOW_START - timedelta(minutes=30)
FAST_US, SLOW_US = 6_000.0, 60_000.0


# The other injections' windows with their tails: no clean minute is left before the window, and the
# edge is judged against every recorded minute around it (``TraceParams.history_minutes``).
OTHER_INCIDENTS = [(WINDOW_START - timedelta(minutes=9 * k + 3), WINDOW_START - timedelta(minutes=9 * k - 5))
                   for k in range(1, 31)]


def _edge(*, calls: int, window_p95: list[float], seed: int, waits: tuple[float, float] | None = None,
          window_wait: float | None = None) -> pl.DataFrame:
    """Per-minute stats of checkoutservice -> emailservice as Nezha records them: three minutes
    every nine in the hours before the window (around other injections, ``OTHER_INCIDENTS``),
    ``calls`` a minute, the p95 at the slow path in every fourth recorded minute; then
    ``window_p95`` minute by minute. ``waits``: the mean wait between the spans of a usual and of
    every fourth recorded minute, ``window_wait`` the window's (None: no client spans)."""
    rng = np.random.default_rng(seed)
    recorded = sorted(WINDOW_START - timedelta(minutes=9 * k + m) for k in range(1, 31) for m in (1, 2, 3))
    p95s = [(SLOW_US if i % 4 == 0 else FAST_US) * rng.uniform(0.9, 1.1) for i in range(len(recorded))]
    recorded += [WINDOW_START + timedelta(minutes=m) for m in range(len(window_p95))]
    p95s += window_p95
    wait_means = ([None if waits is None else waits[i % 4 == 0] for i in range(len(recorded) - len(window_p95))]
                  + [window_wait] * len(window_p95))
    rows = [{"time": time, "caller": "checkoutservice", "caller_pod": "checkoutservice-0", "callee": "emailservice",
             "callee_pod": "emailservice-0", "callee_node": None,
             "operation": "hipstershop.EmailService/SendOrderConfirmation", "count": calls, "errors": 0,
             "p50_us": FAST_US, "p95_us": p95, "mean_us": p95 / 2, "wait_mean_us": wait, "followed": 0}
            for time, p95, wait in zip(recorded, p95s, wait_means, strict=True)]
    return pl.DataFrame(rows, schema=EDGE_STATS_SCHEMA)


def _latency(stats: pl.DataFrame, params: TraceParams = TraceParams()) -> pl.DataFrame:
    events = score_trace_window(stats, start=WINDOW_START, end=WINDOW_END, baseline_start=BASELINE_START,
                                params=params, exclude=OTHER_INCIDENTS)
    return events.filter(pl.col("signal") == "latency")


@pytest.mark.parametrize("seed", range(3))
def test_a_few_calls_at_the_edges_slow_path_are_its_habit(seed):
    habit = _edge(calls=3, window_p95=[SLOW_US, FAST_US], seed=seed)  # aa037df9-17, a fifth of the traces
    assert _latency(habit).height == 0
    # Without the check the MAD z reads it as a tenfold slowdown.
    assert _latency(habit, TraceParams(reference_quantile=0)).height == 1


@pytest.mark.parametrize("seed", range(3))
def test_a_slowdown_beyond_the_habit_stands_on_a_few_calls(seed):
    slow = _edge(calls=3, window_p95=[600_000.0, 580_000.0], seed=seed)
    events = _latency(slow)
    assert events.height == 1 and events.item(0, "ratio") > 50


@pytest.mark.parametrize("seed", range(3))
def test_a_few_calls_a_minute_are_few_over_a_longer_window(seed):
    # Five calls a minute over three minutes: fifteen in the window, yet each minute's p95 is the
    # slowest of five (f69fee6f-9's checkoutservice -> shippingservice, 18 calls over its window).
    habit = _edge(calls=5, window_p95=[SLOW_US, SLOW_US, FAST_US], seed=seed)
    assert _latency(habit).height == 0


@pytest.mark.parametrize(("window_wait", "told"), [(20_000.0, False), (500_000.0, True)])
def test_a_wait_the_edge_reaches_now_and_then_does_not_tell_where_the_time_went(window_wait, told):
    # A real slowdown (p95 100x) whose wait between the spans sits below what every fourth usual
    # minute reaches (300 ms): the spans do not tell the network from the callee (``wait_share``
    # None, as without client spans). A wait beyond that habit does.
    slow = _edge(calls=3, window_p95=[600_000.0, 580_000.0], seed=0, waits=(1_000.0, 300_000.0),
                 window_wait=window_wait)
    events = _latency(slow)
    assert events.height == 1
    assert (events.item(0, "wait_share") is not None) is told


@pytest.mark.parametrize("seed", range(3))
def test_many_calls_keep_the_mad_z(seed):
    # Ten calls or more in the window: a p95 over them is no longer the slowest of a handful.
    busy = _edge(calls=20, window_p95=[SLOW_US, FAST_US], seed=seed)
    assert _latency(busy).height == 1
