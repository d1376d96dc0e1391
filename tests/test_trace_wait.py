"""Latency spent between a call's two spans: on the network of the service the slow calls share.

A delay on one service's network (a ChaosBlade ``network delay`` on its pod) holds up what it
sends: its answers to its callers and its own requests to its callees. Every call touching it
gets slower on the caller's client span while no callee's own server span does. Read as
ordinary latency, the callers' edges blame the delayed service, but its own calls blame each of
its callees, and the most downstream one collects the propagation: the wrong hop.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from index.evidence import wait_items
from index.params import RankWeights
from preprocess.detect_trace import TRACE_EVENT_SCHEMA, edge_stats
from preprocess.schema import SPAN_SCHEMA
from tests.trace_ranking import ranked_services, trace_events

T0 = datetime(2022, 8, 22, 3, 0, tzinfo=UTC)
FAULT_FROM, FAULT_TO = 40, 43  # minutes after T0
START, END = T0 + timedelta(minutes=FAULT_FROM), T0 + timedelta(minutes=FAULT_TO)
BASELINE_START = T0 + timedelta(minutes=10)
# caller -> callees, and each service's own time in ms
CALLS = {"frontend": ["checkoutservice", "cartservice"],
         "checkoutservice": ["paymentservice", "emailservice", "currencyservice"]}
# The same with checkoutservice calling one service: too few callees for a caller fan-out.
ONE_CALLEE = {"frontend": ["checkoutservice", "cartservice"], "checkoutservice": ["paymentservice"]}
OWN_MS = {"frontend": 3.0, "checkoutservice": 4.0, "cartservice": 2.0, "paymentservice": 1.5,
          "emailservice": 2.5, "currencyservice": 1.0}
NETWORK_MS = 0.4


@dataclass(frozen=True)
class _World:
    """What one simulated minute does: which service is faulty how, and who calls whom."""

    calls: dict[str, list[str]]
    delayed: str | None  # its network adds 200 ms to every call it takes part in (both directions)
    slow_inside: str | None  # its own server span is 200 ms slower instead


def _serve(service: str, parent: str | None, *, world: _World, rng: np.random.Generator, trace: str, start: datetime,
           rows: list[tuple], ids: Iterator[int]) -> float:
    """Write the server span of ``service`` and the calls it makes; return its duration (ms)."""
    sid = f"{next(ids):016x}{service[:4]}"
    own = rng.normal(OWN_MS[service], 0.1 * OWN_MS[service])
    if service == world.slow_inside:
        own += rng.normal(200, 10)
    children = 0.0
    for callee in world.calls.get(service, []):
        cid = f"{next(ids):016x}{service[:4]}"
        inner = _serve(callee, cid, world=world, rng=rng, trace=trace, start=start, rows=rows, ids=ids)
        between = rng.normal(NETWORK_MS, 0.05)
        if world.delayed in (service, callee):
            between += rng.normal(200, 10)
        client = inner + between
        rows.append((trace, cid, sid, f"{callee}/Call", service, f"{service}-0", "node-1", "client", callee, start,
                     int(client * 1000), 0, False))
        children += client
    duration = own + children
    rows.append((trace, sid, parent, f"{service}/Serve", service, f"{service}-0", "node-1", "server", None, start,
                 int(duration * 1000), 0, False))
    return duration


def _spans(*, delayed: str | None, slow_inside: str | None = None, calls: dict[str, list[str]] = CALLS,
           seed: int = 0, minutes: int = 50, per_minute: int = 30) -> pl.DataFrame:
    """Spans of ``calls`` from frontend down, 2 s apart; the fault (``_World``) acts in the fault minutes."""
    rng = np.random.default_rng(seed)
    healthy, faulty = _World(calls, None, None), _World(calls, delayed, slow_inside)
    rows: list[tuple] = []
    for minute in range(minutes):
        world = faulty if FAULT_FROM <= minute <= FAULT_TO else healthy
        for n in range(per_minute):
            _serve("frontend", None, world=world, rng=rng, trace=f"{minute:04d}{n:04d}".ljust(32, "0"),
                   start=T0 + timedelta(minutes=minute, seconds=2 * n), rows=rows, ids=iter(range(1, 100)))
    return pl.DataFrame(rows, schema=SPAN_SCHEMA, orient="row")


def _events(spans: pl.DataFrame) -> dict[str, pl.DataFrame]:
    return trace_events(edge_stats(spans), start=START, end=END, baseline_start=BASELINE_START)


def _ranked(spans: pl.DataFrame, weights: RankWeights = RankWeights()) -> list[str]:
    return ranked_services(spans, start=START, end=END, baseline_start=BASELINE_START, services=OWN_MS,
                           weights=weights)


def test_the_wait_of_a_call_is_its_client_span_less_its_server_span():
    stats = edge_stats(_spans(delayed=None, minutes=2))
    wait = stats.group_by("caller", "callee").agg(pl.col("wait_mean_us").mean())
    assert {(a, b) for a, b, _ in wait.iter_rows()} == {(a, b) for a, callees in CALLS.items() for b in callees}
    for value in wait.get_column("wait_mean_us"):
        assert value == pytest.approx(NETWORK_MS * 1000, abs=60)


@pytest.mark.parametrize("seed", range(3))
def test_a_delay_between_the_spans_is_told_from_a_slow_callee(seed):
    events = _events(_spans(delayed="checkoutservice", seed=seed))["trace"].filter(pl.col("signal") == "latency")
    share = {callee: value for _, callee, value in events.select("caller", "callee", "wait_share").iter_rows()}
    # checkoutservice's own calls: all of the added time is between the spans ...
    assert min(share[c] for c in CALLS["checkoutservice"]) > 0.9
    # ... while frontend's calls to it wait mostly inside it (its server span holds its slow calls)
    assert share["checkoutservice"] < 0.5
    inside = _events(_spans(delayed=None, slow_inside="emailservice", seed=seed))["trace"]
    email = inside.filter((pl.col("callee") == "emailservice") & (pl.col("signal") == "latency"))
    assert email.height == 1 and email.item(0, "wait_share") < 0.1


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("delayed", "calls"), [
    ("checkoutservice", CALLS), ("checkoutservice", ONE_CALLEE), ("emailservice", CALLS), ("frontend", CALLS),
    ("paymentservice", ONE_CALLEE)])
def test_a_delayed_services_network_is_blamed_on_it_not_on_a_neighbour(delayed, calls, seed):
    assert _ranked(_spans(delayed=delayed, calls=calls, seed=seed))[0] == delayed


@pytest.mark.parametrize("seed", range(3))
def test_read_as_plain_latency_a_delay_in_the_middle_is_blamed_on_its_callee(seed):
    """The reading before the wait was measured (``wait_share_min`` above 1): with one callee there is no
    caller fan-out, and the latency of checkoutservice's call to paymentservice sends it downstream."""
    spans = _spans(delayed="checkoutservice", calls=ONE_CALLEE, seed=seed)
    assert _ranked(spans, weights=replace(RankWeights(), wait_share_min=1.01))[0] == "paymentservice"


@pytest.mark.parametrize("seed", range(3))
def test_a_callee_slow_in_its_own_span_stays_the_callee(seed):
    assert _ranked(_spans(delayed=None, slow_inside="emailservice", seed=seed))[0] == "emailservice"


def _wait_event(caller: str, callee: str) -> dict:
    return {"caller": caller, "callee": callee, "callee_pod": f"{callee}-0", "callee_node": None,
            "operation": f"{callee}/Call", "signal": "latency", "z": 30.0, "ratio": 10.0, "window_calls": 300,
            "onset": START, "wait_share": 1.0, "wait_added_us": 150_000.0}


@pytest.mark.parametrize(("starved", "owner"), [(set(), "checkoutservice"), ({"cartservice"}, "cartservice-0")])
def test_a_starved_end_takes_the_wait_whatever_the_counts(starved, owner):
    """Nezha's tuning day: cartservice's CPU stressed 12x, its requests queue before its span opens
    (checkoutservice -> cartservice waits); checkoutservice's call to productcatalogservice waits too, so
    by the counts checkoutservice touches both. A clearly starved end takes the edge into it."""
    events = pl.DataFrame([_wait_event("checkoutservice", "cartservice"),
                           _wait_event("checkoutservice", "productcatalogservice")], schema=TRACE_EVENT_SCHEMA)
    items = wait_items(events, fanout_callers=set(), starved=starved, served_fine=set(), own_slowdown={})
    targets = {item.evidence.key: name for name, item in items if name.endswith("-0") or name == "checkoutservice"}
    assert targets["checkoutservice->cartservice"] == owner
    assert targets["checkoutservice->productcatalogservice"] == "checkoutservice"
