"""A handler that stops after one of its calls: the code past the call broke, or the call failed.

On Nezha's tuning day a frontend exception (3fbd36b8-3) made every checkout handler stop right
after its PlaceOrder call (0 of 26 went on to their next call, 1.00 every other recorded minute);
frontend's calls to the services it calls next fell by a few percent only, as its other handlers
call them too. Errors travel up the same way: a caller whose call failed returns there. The
ranker tells the two apart by the callee's own trouble.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from preprocess.detect_trace import TraceParams, binomial_tail_z, call_edges, dropped_calls, edge_stats, stopped_after
from preprocess.schema import SPAN_SCHEMA
from tests.trace_ranking import ranked_services

T0 = datetime(2022, 8, 22, 3, 0, tzinfo=UTC)
FAULT_FROM, FAULT_TO = 40, 42  # minutes after T0
WINDOW = {"start": T0 + timedelta(minutes=FAULT_FROM), "end": T0 + timedelta(minutes=FAULT_TO),
          "baseline_start": T0 + timedelta(minutes=10)}
# frontend's handlers and the calls each makes, one after another; checkout is one handler of four.
HANDLERS = {"home": ["currencyservice", "recommendationservice", "cartservice"],
            "product": ["currencyservice", "recommendationservice"],
            "cart": ["cartservice", "recommendationservice", "currencyservice"],
            "checkout": ["checkoutservice", "recommendationservice", "currencyservice"]}
PODS = {"frontend", "checkoutservice", "recommendationservice", "currencyservice", "cartservice"}


def _spans(*, fault: str | None, seed: int = 0, minutes: int = 50, per_minute: int = 80) -> pl.DataFrame:
    """Traces of frontend's handlers; in the fault minutes most checkout handlers stop after PlaceOrder.

    ``fault``: ``frontend`` (its code past the call throws), ``checkoutservice`` (PlaceOrder fails
    with an error status and frontend returns it), or None.
    """
    rng = np.random.default_rng(seed)
    rows: list[tuple] = []
    for minute in range(minutes):
        faulty = fault is not None and FAULT_FROM <= minute <= FAULT_TO
        for n in range(per_minute):
            handler = list(HANDLERS)[int(rng.integers(len(HANDLERS)))]
            trace = f"{minute:04d}{n:04d}".ljust(32, "0")
            start = T0 + timedelta(minutes=minute, seconds=1.5 * n)
            root, cursor = f"{trace[:12]}root", start + timedelta(milliseconds=1)
            stops = faulty and handler == "checkout" and rng.random() < 0.9
            for k, callee in enumerate(HANDLERS[handler]):
                took = timedelta(milliseconds=float(rng.uniform(3, 6)))
                failed = stops and fault == "checkoutservice" and callee == "checkoutservice"
                client, server = f"{trace[:12]}c{k}", f"{trace[:12]}s{k}"
                rows.append((trace, client, root, f"{callee}/Call", "frontend", "frontend-0", "node-1", "client",
                             callee, cursor, int(took / timedelta(microseconds=1)), 2 if failed else 0, failed))
                rows.append((trace, server, client, f"{callee}/Serve", callee, f"{callee}-0", "node-2", "server",
                             None, cursor + timedelta(microseconds=200), int(took / timedelta(microseconds=1)) - 400,
                             2 if failed else 0, failed))
                cursor += took + timedelta(microseconds=100)
                if stops and callee == "checkoutservice":
                    break
            rows.append((trace, root, None, f"GET /{handler}", "frontend", "frontend-0", "node-1", "server", None,
                         start, int((cursor - start) / timedelta(microseconds=1)), 0, False))
    return pl.DataFrame(rows, schema=SPAN_SCHEMA, orient="row")


def _ranked(spans: pl.DataFrame) -> list[str]:
    return ranked_services(spans, **WINDOW, services=PODS)


def test_a_call_is_followed_when_its_handler_makes_another_call_after_it_returned():
    calls = call_edges(_spans(fault=None, minutes=1, per_minute=8))
    last = {callees[-1] for callees in HANDLERS.values()}
    for callee, followed in calls.select("callee", "followed").iter_rows():
        if callee not in last:
            assert followed
    assert calls.filter(pl.col("callee") == "checkoutservice").get_column("followed").all()


@pytest.mark.parametrize("seed", range(3))
def test_handlers_that_stop_after_a_call_are_found_where_dropped_calls_are_not(seed):
    stats = edge_stats(_spans(fault="frontend", seed=seed))
    found = stopped_after(stats, **WINDOW)
    assert [(a, b) for a, b in found.select("caller", "callee").iter_rows()] == [("frontend", "checkoutservice")]
    assert found.item(0, "ratio") < 0.5
    # The calls it no longer makes after PlaceOrder are a small part of what its other handlers make.
    assert dropped_calls(stats, **WINDOW).height == 0
    assert stopped_after(edge_stats(_spans(fault=None, seed=seed)), **WINDOW).height == 0


@pytest.mark.parametrize("seed", range(3))
def test_the_stop_is_the_callers_code_unless_the_callee_failed(seed):
    assert _ranked(_spans(fault="frontend", seed=seed))[0] == "frontend"
    # PlaceOrder failing (its error status) ends the handler too: the callee's failure, not frontend's.
    failed = _ranked(_spans(fault="checkoutservice", seed=seed))
    assert failed[0] == "checkoutservice"
    assert "frontend" not in failed[:1]


@pytest.mark.parametrize("seed", range(3))
def test_a_stop_seen_on_few_sampled_handlers_is_judged_by_its_exact_tail(seed):
    # A fifth of the traces sampled: 6 to 11 checkout handlers in the window, nearly all of which
    # stop after PlaceOrder; too few for the Poisson z (0 of 11 is z 3.2).
    sampled = _spans(fault="frontend", seed=seed, per_minute=12)
    stats = edge_stats(sampled)
    found = stopped_after(stats, **WINDOW)
    assert [(a, b) for a, b in found.select("caller", "callee").iter_rows()] == [("frontend", "checkoutservice")]
    assert _ranked(sampled)[0] == "frontend"
    assert stopped_after(edge_stats(_spans(fault=None, seed=seed, per_minute=12)), **WINDOW).height == 0
    off = stopped_after(stats, **WINDOW, params=TraceParams(exact_tail=False))
    assert off.height == 0


@pytest.mark.parametrize(("calls", "demand", "usual", "stop"), [
    (0, 4, (32, 32), True),    # a share always kept: 0 of 4 is a stop (Nezha's sampled frontend, 3fbd36b8-3)
    (0, 4, (26, 32), False),   # kept 80% of the time: 0 of 4 happens (p ~ 0.002)
    (0, 2, (32, 32), False),   # two calls tell too little
    (4, 4, (32, 32), False),   # all followed
    (1, 8, (100, 100), True),
    (0, 4, (0, 0), False),     # no usual calls: the prior alone (a share of 1/2) is no reference
])
def test_the_exact_tail_of_a_few_calls_against_their_usual_share(calls, demand, usual, stop):
    assert (binomial_tail_z(calls=calls, demand=demand, usual=usual) >= TraceParams().min_z) is stop
