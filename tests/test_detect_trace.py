"""Trace detector: call edges, anomalous edges against baseline, propagation ranking."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from preprocess.detect_trace import call_graph, caller_fanout, edge_stats, propagation_scores, score_trace_window
from preprocess.schema import SPAN_SCHEMA

T0 = datetime(2025, 6, 5, 16, 0, tzinfo=UTC)
WINDOW_START, WINDOW_END = T0 + timedelta(minutes=35), T0 + timedelta(minutes=50)
BASELINE_START = T0 + timedelta(minutes=5)


def synthetic_spans(*, fault: str | None, seed: int = 0, minutes: int = 60, per_minute: int = 20) -> pl.DataFrame:
    """frontend -> cartservice -> redis-cart, frontend -> adservice (client only)."""
    rng = np.random.default_rng(seed)
    rows = []
    for minute in range(minutes):
        faulty = fault is not None and 35 <= minute <= 50
        for n in range(per_minute):
            trace = f"{minute:04d}{n:04d}".ljust(32, "0")
            start = T0 + timedelta(minutes=minute, seconds=n)
            cart_pod = f"cartservice-{n % 3}"
            redis_ms = rng.normal(1700, 100) * (8 if faulty and fault == "redis_latency" else 1)
            cart_ms = rng.normal(500, 50) + redis_ms
            cart_error = faulty and fault == "cart_pod_errors" and cart_pod == "cartservice-1"
            ad_ms = rng.normal(3000, 200) * (5 if faulty and fault == "ad_latency" else 1)
            def span(sid, parent, op, service, pod, kind, peer, dur, err=False, trace=trace, start=start):
                rows.append((trace, sid, parent, op, service, pod, "aiops-k8s-01", kind, peer, start,
                             int(dur), 2 if err else 0, err))
            span("a" * 15 + "1", None, "GET /cart", "frontend", "frontend-0", "server", None, cart_ms + ad_ms + 900)
            span("a" * 15 + "2", "a" * 15 + "1", "hipstershop.CartService/GetCart", "frontend", "frontend-0",
                 "client", "cartservice", cart_ms + 300, cart_error)
            span("a" * 15 + "3", "a" * 15 + "2", "POST /hipstershop.CartService/GetCart", "cartservice", cart_pod,
                 "server", None, cart_ms, cart_error)
            span("a" * 15 + "4", "a" * 15 + "3", "HGET", "redis-cart", "redis-cart-0", "server", None, redis_ms)
            span("a" * 15 + "5", "a" * 15 + "1", "hipstershop.AdService/GetAds", "frontend", "frontend-0",
                 "client", "adservice", ad_ms)
    return pl.DataFrame(rows, schema=SPAN_SCHEMA, orient="row")


def _score(spans: pl.DataFrame) -> pl.DataFrame:
    return score_trace_window(edge_stats(spans), start=WINDOW_START, end=WINDOW_END, baseline_start=BASELINE_START)


def test_edges_cover_server_and_client_only_callees():
    stats = edge_stats(synthetic_spans(fault=None, minutes=2))
    graph = call_graph(stats)
    assert set(graph.edges) == {("frontend", "cartservice"), ("cartservice", "redis-cart"), ("frontend", "adservice")}
    ads = stats.filter(pl.col("callee") == "adservice")
    assert ads.get_column("callee_pod").null_count() == ads.height
    assert stats.filter(pl.col("callee") == "cartservice").get_column("callee_pod").n_unique() == 3
    assert stats.get_column("count").sum() == 2 * 20 * 3


@pytest.mark.parametrize(("fault", "callee", "signal", "callee_pod"), [
    ("redis_latency", "redis-cart", "latency", "redis-cart-0"),
    ("ad_latency", "adservice", "latency", None),
    ("cart_pod_errors", "cartservice", "errors", "cartservice-1"),
])
def test_anomalous_edge_found(fault, callee, signal, callee_pod):
    events = _score(synthetic_spans(fault=fault))
    found = events.filter((pl.col("callee") == callee) & (pl.col("signal") == signal))
    assert found.height >= 1
    assert found.get_column("callee_pod").to_list()[0] == callee_pod
    assert found.get_column("z").max() >= 10
    assert abs((found.item(0, "onset") - WINDOW_START).total_seconds()) <= 120
    # Edges into healthy callees stay quiet.
    healthy = {"redis_latency": "adservice", "ad_latency": "redis-cart", "cart_pod_errors": "adservice"}[fault]
    assert events.filter(pl.col("callee") == healthy).height == 0


@pytest.mark.parametrize("seed", range(4))
def test_noise_only_gives_no_event(seed):
    assert _score(synthetic_spans(fault=None, seed=seed)).height == 0


def test_propagation_favours_most_downstream_component():
    events = _score(synthetic_spans(fault="redis_latency"))
    # Redis latency shows in both frontend->cartservice and cartservice->redis-cart.
    assert {"cartservice", "redis-cart"} <= set(events.get_column("callee"))
    ranks = propagation_scores(events)
    assert max(ranks, key=ranks.get) == "redis-cart"
    assert ranks["redis-cart"] > ranks["cartservice"]


def test_caller_fanout_points_at_the_failing_caller_pod():
    spans = synthetic_spans(fault=None)
    in_window = (pl.col("start") >= WINDOW_START) & (pl.col("start") <= WINDOW_END)
    # frontend-0 fails every outgoing call (e.g. DNS): its client spans error, callees unaffected.
    spans = spans.with_columns(
        is_error=pl.when(in_window & (pl.col("pod") == "frontend-0") & (pl.col("span_kind") == "client"))
        .then(True).otherwise(pl.col("is_error")))
    spans = spans.vstack(spans.with_columns(pod=pl.lit("frontend-1"), span_id=pl.col("span_id") + "b",
                                            parent_span_id=pl.col("parent_span_id") + "b",
                                            is_error=pl.lit(False)))
    fanout = caller_fanout(edge_stats(spans), start=WINDOW_START, end=WINDOW_END, baseline_start=BASELINE_START)
    assert fanout.get_column("caller_pod").to_list() == ["frontend-0"]
    assert set(fanout.item(0, "callees")) == {"cartservice", "adservice"}


def test_shared_callee_failure_is_not_a_fanout():
    events = caller_fanout(edge_stats(synthetic_spans(fault="cart_pod_errors")), start=WINDOW_START,
                           end=WINDOW_END, baseline_start=BASELINE_START)
    assert events.height == 0


def test_vanished_edge_is_silent():
    spans = synthetic_spans(fault=None)
    dead = spans.filter(~((pl.col("pod") == "cartservice-2") & (pl.col("start") >= WINDOW_START)))
    events = _score(dead)
    silent = events.filter(pl.col("signal") == "silent")
    assert "cartservice-2" in silent.get_column("callee_pod").to_list()


def test_edge_stats_do_not_depend_on_row_order():
    """A rebuild must rewrite the same file: group_by's order varies, the stored order must not."""
    spans = synthetic_spans(fault="cart_pod_errors", minutes=10)
    assert edge_stats(spans).equals(edge_stats(spans.sample(fraction=1.0, shuffle=True, seed=3)))


def test_services_that_emit_their_own_spans_keep_the_call_graph():
    # Real services also emit internal spans (a handler, a connection pool) between their
    # server span and the calls they make; those are not calls and must not become edges,
    # and the calls beneath them still belong to the service that made them.
    rows = []
    for n in range(10):
        trace, start = f"{n:04d}".ljust(32, "0"), T0 + timedelta(seconds=n)

        def span(sid, parent, op, service, pod, kind, peer, dur, trace=trace, start=start):
            rows.append((trace, sid, parent, op, service, pod, "aiops-k8s-01", kind, peer, start, dur, 0, False))
        span("s1", None, "GET /cart", "frontend", "frontend-0", "server", None, 9000)
        span("s2", "s1", "render cart page", "frontend", "frontend-0", None, None, 8000)  # internal
        span("s3", "s2", "hipstershop.CartService/GetCart", "frontend", "frontend-0", "client", "cartservice", 7000)
        span("s4", "s3", "POST /hipstershop.CartService/GetCart", "cartservice", "cartservice-1", "server", None, 6000)
        span("s5", "s4", "CartStore.load", "cartservice", "cartservice-1", None, None, 5000)  # internal
        span("s6", "s5", "HGET", "redis-cart", "redis-cart-0", "server", None, 4000)
    stats = edge_stats(pl.DataFrame(rows, schema=SPAN_SCHEMA, orient="row"))
    assert set(call_graph(stats).edges) == {("frontend", "cartservice"), ("cartservice", "redis-cart")}
    assert stats.filter(pl.col("caller") == pl.col("callee")).height == 0
    redis = stats.filter(pl.col("callee") == "redis-cart")
    assert redis.get_column("caller_pod").unique().to_list() == ["cartservice-1"]
    assert redis.get_column("count").sum() == 10
    assert stats.filter(pl.col("callee") == "cartservice").get_column("count").sum() == 10


def _failing_frontend_pod_stats() -> pl.DataFrame:
    spans = synthetic_spans(fault=None)
    in_window = (pl.col("start") >= WINDOW_START) & (pl.col("start") <= WINDOW_END)
    spans = spans.with_columns(
        is_error=pl.when(in_window & (pl.col("pod") == "frontend-0") & (pl.col("span_kind") == "client"))
        .then(True).otherwise(pl.col("is_error")))
    return edge_stats(spans)


@pytest.mark.parametrize("seed", range(5))
def test_fanout_callees_tied_at_the_cap_come_in_name_order(seed):
    """Both callees fail every call: their z is capped alike, and the list is the same whatever the row order."""
    stats = _failing_frontend_pod_stats().sample(fraction=1.0, shuffle=True, seed=seed)
    fanout = caller_fanout(stats, start=WINDOW_START, end=WINDOW_END, baseline_start=BASELINE_START)
    assert fanout.item(0, "z") == 50.0
    assert fanout.item(0, "callees").to_list() == ["adservice", "cartservice"]


@pytest.mark.parametrize("seed", range(3))
def test_call_graph_node_order_does_not_depend_on_row_order(seed):
    stats = _failing_frontend_pod_stats()
    assert list(call_graph(stats.sample(fraction=1.0, shuffle=True, seed=seed)).nodes) == list(call_graph(stats).nodes)


def test_calls_that_stop_late_in_the_windows_first_minute_are_a_stop():
    """A fault injected at 16:35:50 stops frontend's calls to adservice: the minute 16:35 holds all of its
    calls (made before the fault), the three after it none. A quarter of the expected calls is no
    ordinary fall: the edge is silent from the window's second minute."""
    start = T0 + timedelta(minutes=35, seconds=50)
    spans = synthetic_spans(fault=None)
    stopped = spans.filter(~((pl.col("peer_service") == "adservice").fill_null(False) & (pl.col("start") >= start)))
    events = score_trace_window(edge_stats(stopped), start=start, end=start + timedelta(minutes=3),
                                baseline_start=BASELINE_START)
    silent = events.filter(pl.col("signal") == "silent")
    assert silent.get_column("callee").to_list() == ["adservice"]
    assert silent.item(0, "onset") == T0 + timedelta(minutes=36)
    assert events.filter(pl.col("callee") != "adservice").height == 0
