"""``dropped_calls``: calls a caller makes less often for the demand it serves, on synthetic call
counts with known truth.

frontend (the entry: nobody calls it) calls cartservice and adservice; checkoutservice, called by
frontend, calls paymentservice and emailservice. A code path that returns early makes one call
rarer for the same demand; a source that records part of a minute, or a quieter hour, moves the
demand and the calls alike and is no drop.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from preprocess.detect_trace import EDGE_STATS_SCHEMA, dropped_calls

T0 = datetime(2025, 6, 5, 16, 0, tzinfo=UTC)
MINUTES, FAULT = 60, range(40, 44)
START, END, BASELINE_START = T0 + timedelta(minutes=40, seconds=5), T0 + timedelta(minutes=43), T0 + timedelta(minutes=10)
RATES = {("frontend", "cartservice"): 60, ("frontend", "adservice"): 40, ("frontend", "checkoutservice"): 20,
         ("checkoutservice", "paymentservice"): 20, ("checkoutservice", "emailservice"): 20}


def _stats(*, seed: int, scale: dict[tuple[str, str], float] | None = None, recorded: float = 1.0) -> pl.DataFrame:
    """Per-minute call counts; in the fault minutes each edge's rate times ``scale`` and every edge
    times ``recorded`` (the share of each minute the source kept)."""
    rng = np.random.default_rng(seed)
    rows = []
    for minute in range(MINUTES):
        faulty = minute in FAULT
        for (caller, callee), rate in RATES.items():
            factor = ((scale or {}).get((caller, callee), 1.0) * recorded) if faulty else 1.0
            count = int(rng.poisson(rate * factor))
            if count:
                rows.append((T0 + timedelta(minutes=minute), caller, f"{caller}-0", callee, f"{callee}-0",
                             "aiops-k8s-01", f"{callee}/Op", count, 0, 1000.0, 2000.0, 1200.0, None, None))
    return pl.DataFrame(rows, schema=EDGE_STATS_SCHEMA, orient="row")


def _dropped(stats: pl.DataFrame) -> set[tuple[str, str]]:
    events = dropped_calls(stats, start=START, end=END, baseline_start=BASELINE_START)
    return set(events.select("caller", "callee").iter_rows())


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("edge", "share"), [
    (("frontend", "adservice"), 0.4),  # the entry's product page returns before asking for ads
    (("checkoutservice", "emailservice"), 0.3),  # an order path that throws before the confirmation
])
def test_a_call_made_less_often_for_the_same_demand_is_the_callers(seed, edge, share):
    events = dropped_calls(_stats(seed=seed, scale={edge: share}), start=START, end=END, baseline_start=BASELINE_START)
    assert set(events.select("caller", "callee").iter_rows()) == {edge}
    assert events.item(0, "ratio") == pytest.approx(share, abs=0.2)
    assert events.item(0, "onset") == T0 + timedelta(minutes=40)


@pytest.mark.parametrize("seed", range(5))
def test_noise_alone_drops_nothing(seed):
    assert _dropped(_stats(seed=seed)) == set()


@pytest.mark.parametrize("seed", range(3))
def test_minutes_recorded_in_part_drop_nothing(seed):
    """The source kept a third of each fault minute: demand and calls fall alike."""
    assert _dropped(_stats(seed=seed, recorded=0.3)) == set()


@pytest.mark.parametrize("seed", range(3))
def test_a_caller_whose_demand_fell_drops_nothing(seed):
    """frontend sends checkoutservice 40% of its orders, and checkoutservice makes its calls for each of them."""
    scale = {("frontend", "checkoutservice"): 0.4, ("checkoutservice", "paymentservice"): 0.4,
             ("checkoutservice", "emailservice"): 0.4}
    assert not {caller for caller, _ in _dropped(_stats(seed=seed, scale=scale))} & {"checkoutservice"}


def test_a_call_that_stopped_is_left_to_the_edge_stop():
    assert _dropped(_stats(seed=0, scale={("checkoutservice", "emailservice"): 0.0})) == set()
