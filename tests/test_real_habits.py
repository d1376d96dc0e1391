"""Habits of real telemetry (Nezha, docs/datasets/nezha.md) the detectors and the ranker now survive.

Synthetic signals with known truth, one habit each. Every test also runs the scorer with
the parameter that switches its fix off (named in the test) and asserts the old, wrong
outcome, so each test fails on the code before the fix:

1. traces recorded only around incidents: a window whose minutes hold no span from anyone
   is unrecorded, not every call stopping;
2. a thin trace baseline: the edge's recorded history hours earlier stands in for it;
3. a fan-out counts only callees hit comparably (one broken callee and a noisy one is no fan-out);
4. logs recorded only around incidents: a template is new only if no recorded minute had it;
5. a caller that stops calling its callees gets the drop as its evidence (calls_dropped);
6. an edge slow for one caller, a CPU-starved caller whose fellow callers are fine, is the caller's.

Checked against the tree before these fixes (``git archive 798f319^``, this file copied in):
every parametrised case of the six fails there at its first assertion; the contrast tests
(what must keep working: silence in a recorded window, no latency from a flat history,
callees hit comparably, a caller whose own demand fell, an edge slow for several callers)
pass on both.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import networkx as nx
import numpy as np
import polars as pl
import pytest

from index.params import RankWeights
from index.rank import rank_candidates
from preprocess.detect import LogParams, TraceParams
from preprocess.detect_log import LOG_COUNT_SCHEMA, LOG_EVENT_SCHEMA, score_log_window
from preprocess.detect_metric import METRIC_EVENT_SCHEMA, PLACEMENT_SCHEMA
from preprocess.detect_trace import (
    DROPPED_EVENT_SCHEMA,
    EDGE_STATS_SCHEMA,
    FANOUT_EVENT_SCHEMA,
    TRACE_EVENT_SCHEMA,
    caller_fanout,
    score_trace_window,
)
from rca.system import bundled_system
from tests.fakes import undeclared_system

SYSTEM = bundled_system()  # names a candidate's service
T0 = datetime(2022, 8, 22, 3, 0, tzinfo=UTC)
WINDOW = 300  # the incident's window opens at T0 + 300 min and lasts 3 minutes (Nezha: inject + 3 min)
START, END = T0 + timedelta(minutes=WINDOW, seconds=9), T0 + timedelta(minutes=WINDOW + 3, seconds=9)
BASELINE_START = START - timedelta(minutes=30)


def _t(minute: int) -> datetime:
    return T0 + timedelta(minutes=minute)


def _edge_rows(minutes, *, caller: str, callee: str, calls: int, p95_ms, rng, caller_pod: str | None = None,
               callee_pod: str | None = "auto") -> list[tuple]:
    """Per-minute edge statistics (EDGE_STATS_SCHEMA) of one edge; ``p95_ms(minute)`` gives the minute's p95."""
    pod = f"{callee}-0" if callee_pod == "auto" else callee_pod
    rows = []
    for m in minutes:
        p95 = float(p95_ms(m)) * 1000.0
        rows.append((_t(m), caller, caller_pod or f"{caller}-0", callee, pod, "node-1" if pod else None,
                     f"hipstershop.{callee}/Call", max(1, int(rng.poisson(calls))), 0, p95 / 2, p95, p95 / 1.5,
                     None, None))
    return rows


def _stats(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=EDGE_STATS_SCHEMA, orient="row")


# --------------------------------------------------------------------------- 1. unrecorded window


@pytest.mark.parametrize("seed", range(3))
def test_a_window_with_no_span_from_anyone_is_unrecorded_not_silent(seed):
    """Nezha keeps traces only around injections, and the snapshot lacks some of those files.

    No parameter switches this fix off (preprocess/detect_trace.py ``_edge_anomalies``: a
    window with no recorded minute returns nothing); before commit 798f319 every edge of the
    baseline came out "silent" (calls stopped). The contrast below is what silence still means.
    """
    rng = np.random.default_rng(seed)
    recorded = range(WINDOW - 30, WINDOW)  # the baseline is recorded; the window's files are absent
    rows = []
    for callee in ("cartservice", "currencyservice", "productcatalogservice"):
        rows += _edge_rows(recorded, caller="frontend", callee=callee, calls=40, p95_ms=lambda m: 20 + rng.normal(0, 1),
                           rng=rng)
    events = score_trace_window(_stats(rows), start=START, end=END, baseline_start=BASELINE_START)
    assert events.filter(pl.col("signal") == "silent").height == 0, events
    # Contrast: the window recorded (other edges have calls), one edge gone: that edge stopped.
    window = range(WINDOW, WINDOW + 4)
    for callee in ("cartservice", "currencyservice"):
        rows += _edge_rows(window, caller="frontend", callee=callee, calls=40, p95_ms=lambda m: 20 + rng.normal(0, 1),
                           rng=rng)
    events = score_trace_window(_stats(rows), start=START, end=END, baseline_start=BASELINE_START)
    assert events.filter(pl.col("signal") == "silent").get_column("callee").to_list() == ["productcatalogservice"]


# --------------------------------------------------------------------------- 2. thin trace baseline


def _thin_baseline_edge(seed: int) -> pl.DataFrame:
    """frontend -> currencyservice recorded only around incidents: three minutes after each of two earlier
    injections (p95 ~50 ms), one minute just before this window, then the window (p95 ~500 ms)."""
    rng = np.random.default_rng(seed)
    history = [*range(WINDOW - 180, WINDOW - 177), *range(WINDOW - 90, WINDOW - 87), WINDOW - 1]
    rows = _edge_rows(history, caller="frontend", callee="currencyservice", calls=30,
                      p95_ms=lambda m: 50 + rng.normal(0, 4), rng=rng)
    rows += _edge_rows(range(WINDOW, WINDOW + 4), caller="frontend", callee="currencyservice", calls=30,
                       p95_ms=lambda m: 500 + rng.normal(0, 30), rng=rng)
    return _stats(rows)


@pytest.mark.parametrize("seed", range(3))
def test_a_thin_trace_baseline_is_replaced_by_the_recorded_history(seed):
    stats = _thin_baseline_edge(seed)
    events = score_trace_window(stats, start=START, end=END, baseline_start=BASELINE_START)
    latency = events.filter((pl.col("callee") == "currencyservice") & (pl.col("signal") == "latency"))
    assert latency.height >= 1, events
    assert latency.get_column("ratio").max() == pytest.approx(10, rel=0.25)
    # TraceParams(min_baseline_minutes=0) switches the history off: one baseline minute, no verdict.
    blind = score_trace_window(stats, start=START, end=END, baseline_start=BASELINE_START,
                               params=TraceParams(min_baseline_minutes=0))
    assert blind.filter(pl.col("signal") == "latency").height == 0


def test_the_history_does_not_invent_latency():
    rng = np.random.default_rng(7)
    history = [*range(WINDOW - 180, WINDOW - 177), *range(WINDOW - 90, WINDOW - 87), WINDOW - 1]
    rows = _edge_rows([*history, *range(WINDOW, WINDOW + 4)], caller="frontend", callee="currencyservice", calls=30,
                      p95_ms=lambda m: 50 + rng.normal(0, 4), rng=rng)
    assert score_trace_window(_stats(rows), start=START, end=END, baseline_start=BASELINE_START).height == 0


# --------------------------------------------------------------------------- 3. fan-out


def _fanout_world(seed: int) -> pl.DataFrame:
    """frontend-0 calls productcatalogservice (x80 latency in the window) and shippingservice (3 calls a
    minute, so a noisy p95: 10 +- 6 ms, 40 +- 6 ms in the window). Only frontend calls either."""
    rng = np.random.default_rng(seed)
    minutes = range(WINDOW - 30, WINDOW + 4)
    rows = _edge_rows(minutes, caller="frontend", callee="productcatalogservice", calls=200,
                      p95_ms=lambda m: (10 + rng.normal(0, 0.5)) * (80 if m >= WINDOW else 1), rng=rng)
    rows += _edge_rows(minutes, caller="frontend", callee="shippingservice", calls=3,
                       p95_ms=lambda m: (40 if m >= WINDOW else 10) + rng.uniform(-6, 6), rng=rng)
    return _stats(rows)


@pytest.mark.parametrize("seed", range(4))
def test_one_broken_callee_and_a_noisy_one_are_no_fanout(seed):
    stats = _fanout_world(seed)
    window = {"start": START, "end": END, "baseline_start": BASELINE_START}
    # Both edges are anomalous for frontend-0 ...
    edges = score_trace_window(stats, **window).filter(pl.col("signal") == "latency")
    assert set(edges.get_column("callee")) == {"productcatalogservice", "shippingservice"}, edges
    # ... but shippingservice's z is a small share of productcatalogservice's: a broken callee, not a fan-out.
    assert caller_fanout(stats, **window).height == 0
    # TraceParams(fanout_min_share=0) counts every anomalous callee: the old fan-out on frontend-0.
    old = caller_fanout(stats, **window, params=TraceParams(fanout_min_share=0.0))
    assert old.get_column("caller_pod").to_list() == ["frontend-0"]


def test_callees_hit_comparably_still_fan_out():
    rng = np.random.default_rng(3)
    minutes = range(WINDOW - 30, WINDOW + 4)
    rows = []
    for callee in ("productcatalogservice", "shippingservice"):
        rows += _edge_rows(minutes, caller="frontend", callee=callee, calls=100,
                           p95_ms=lambda m: (10 + rng.normal(0, 0.5)) * (30 if m >= WINDOW else 1), rng=rng)
    fanout = caller_fanout(_stats(rows), start=START, end=END, baseline_start=BASELINE_START)
    assert fanout.get_column("caller_pod").to_list() == ["frontend-0"]
    assert set(fanout.item(0, "callees")) == {"productcatalogservice", "shippingservice"}


# --------------------------------------------------------------------------- 4. logs recorded around incidents

INFO, ERROR = 1, 2
TEMPLATES = pl.DataFrame({"template_id": [INFO, ERROR],
                          "template": ["GetQuote request received <*>", "failed to charge card: <*>"]})


def _log_counts(seed: int) -> pl.DataFrame:
    """paymentservice-0 logs an INFO line ~20 times a minute in every recorded minute (three minutes
    after each of two earlier injections, and the window); an ERROR template appears in the window only.
    Nothing is recorded in the 30 minutes before the window."""
    rng = np.random.default_rng(seed)
    history = [*range(WINDOW - 180, WINDOW - 177), *range(WINDOW - 90, WINDOW - 87)]
    rows = [(_t(m), "paymentservice-0", "node-1", INFO, int(rng.poisson(20)), "GetQuote request received <*>")
            for m in [*history, *range(WINDOW, WINDOW + 4)]]
    rows += [(_t(m), "paymentservice-0", "node-1", ERROR, int(rng.poisson(6)) + 3, "failed to charge card: <*>")
             for m in range(WINDOW, WINDOW + 4)]
    return pl.DataFrame(rows, schema=LOG_COUNT_SCHEMA, orient="row")


@pytest.mark.parametrize("seed", range(3))
def test_a_template_is_new_only_if_no_recorded_minute_had_it(seed):
    counts = _log_counts(seed)
    window = {"start": START, "end": END, "baseline_start": BASELINE_START}
    events = score_log_window(counts, TEMPLATES, **window)
    new = set(events.filter(pl.col("direction") == "new").get_column("template_id"))
    assert new == {ERROR}, events
    assert INFO not in set(events.get_column("template_id"))  # same rate as in its history: no burst either
    # LogParams(min_baseline_minutes=0) switches the history off: the empty baseline makes INFO "new" too.
    blind = score_log_window(counts, TEMPLATES, **window, params=LogParams(min_baseline_minutes=0))
    assert set(blind.filter(pl.col("direction") == "new").get_column("template_id")) == {INFO, ERROR}


# --------------------------------------------------------------------------- ranker worlds

ONSET = START


def _events(metric: list[dict] = (), trace: list[dict] = ()) -> dict[str, pl.DataFrame]:
    return {"metric": pl.DataFrame(list(metric), schema=METRIC_EVENT_SCHEMA),
            "log": pl.DataFrame(schema=LOG_EVENT_SCHEMA),
            "trace": pl.DataFrame(list(trace), schema=TRACE_EVENT_SCHEMA),
            "fanout": pl.DataFrame(schema=FANOUT_EVENT_SCHEMA),
            "dropped": pl.DataFrame(schema=DROPPED_EVENT_SCHEMA),
            "stopped_after": pl.DataFrame(schema=DROPPED_EVENT_SCHEMA)}


def _metric(component: str, kind: str, kpi: str, direction: str, z: float, ratio: float) -> dict:
    return {"component": component, "kind": kind, "kpi": kpi, "direction": direction, "z": z, "ratio": ratio,
            "baseline": 100.0, "window_value": 100.0 * ratio, "onset": ONSET, "reference": "history"}


def _rank(events: dict[str, pl.DataFrame], graph: nx.DiGraph, pods: set[str], weights: RankWeights = RankWeights(),
          declared_calls: tuple[tuple[str, str], ...] = ()):
    return rank_candidates(events=events, graph=graph, placement=pl.DataFrame(schema=PLACEMENT_SCHEMA),
                           known_pods=pods, top_k=10, window_start=START, weights=weights,
                           system=undeclared_system(calls=declared_calls))


OB_GRAPH = nx.DiGraph([("frontend", "checkoutservice"), ("checkoutservice", "cartservice"),
                       ("checkoutservice", "paymentservice"), ("checkoutservice", "emailservice"),
                       ("frontend", "cartservice"), ("frontend", "productcatalogservice"),
                       ("checkoutservice", "productcatalogservice"), ("recommendationservice", "productcatalogservice")])
OB_PODS = {f"{s}-0" for s in OB_GRAPH.nodes}


def _dropped_calls_world(z: float) -> dict[str, pl.DataFrame]:
    """checkoutservice returns early (Nezha's ``return`` fault): paymentservice and emailservice receive
    fewer requests, checkoutservice's own requests hold. No other evidence."""
    metric = [_metric(f"{callee}-0", kind, kpi, "down", z, 0.2)
              for callee in ("paymentservice", "emailservice")
              for kind, kpi in (("apm_pod", "request"), ("infra_pod", "pod_network_receive_bytes"))]
    return _events(metric=metric)


@pytest.mark.parametrize("z", [8.0, 20.0, 50.0])
def test_a_caller_that_stops_calling_is_blamed_for_the_drop(z):
    events = _dropped_calls_world(z)
    candidates = _rank(events, OB_GRAPH, OB_PODS)
    top = candidates[0]
    assert top.component.startswith("checkoutservice"), [(c.component, c.score) for c in candidates]
    dropped = [e for e in top.evidence if e.signal == "calls_dropped"]
    assert dropped and dropped[0].caller == "checkoutservice"
    assert {dropped[0].callee} <= {"paymentservice", "emailservice"} and dropped[0].more_callees == 1
    # RankWeights(dropped_callees=99) switches the rule off: the starved callees rank first again.
    old = _rank(events, OB_GRAPH, OB_PODS, weights=replace(RankWeights(), dropped_callees=99))
    assert not old[0].component.startswith("checkoutservice")
    assert all(e.signal != "calls_dropped" for c in old for e in c.evidence)


@pytest.mark.parametrize("cpu_z", [20.0, 37.5, 50.0])
def test_a_starved_pods_idle_cpu_is_the_callers_drop_too(cpu_z):
    """checkoutservice stops before its payment and email calls (a real code error, Nezha
    2022-08-22): both callees' requests go silent, and paymentservice's CPU with them, for a pod
    with no work idles. The CPU's fall is the starvation's, so it no longer outranks the caller."""
    metric = [_metric(f"{callee}-0", kind, kpi, "silent", 37.5, 0.0)
              for callee in ("paymentservice", "emailservice")
              for kind, kpi in (("apm_pod", "request"), ("infra_pod", "pod_syscall_read"))]
    metric.append(_metric("paymentservice-0", "infra_pod", "pod_cpu_usage", "silent", cpu_z, 0.0))
    candidates = _rank(_events(metric=metric), OB_GRAPH, OB_PODS)
    assert candidates[0].component.startswith("checkoutservice"), [(c.component, c.score) for c in candidates]
    assert _score(candidates, "paymentservice") < _score(candidates, "checkoutservice")


def _slow_callee_world() -> dict[str, pl.DataFrame]:
    """currencyservice's CPU is stressed (real, Nezha 2022-08-22, metrics only): its answers take
    30x longer, and so do frontend's, which waits on it. The load generator sends each request
    after the last answer, so frontend's requests fall to a fifth and its CPU and network idle;
    every service frontend calls loses traffic with it."""
    metric = [_metric("frontend-0", "apm_pod", "rrt", "up", 50.0, 39.0),
              *(_metric("frontend-0", kind, kpi, "silent", 37.5, 0.0) for kind, kpi in
                (("apm_pod", "request"), ("infra_pod", "pod_cpu_usage"), ("infra_pod", "pod_network_receive_bytes"))),
              _metric("currencyservice-0", "apm_pod", "rrt", "up", 50.0, 30.0),
              _metric("currencyservice-0", "infra_pod", "pod_cpu_usage", "up", 4.0, 1.8),
              *(_metric(f"{callee}-0", kind, kpi, "silent", 37.5, 0.0)
                for callee in ("currencyservice", "cartservice", "checkoutservice")
                for kind, kpi in (("apm_pod", "request"), ("infra_pod", "pod_syscall_read")))]
    return _events(metric=metric)


def test_an_entrys_clients_waiting_on_a_slow_callee_are_not_its_fault():
    graph = nx.DiGraph([("frontend", "currencyservice"), ("frontend", "cartservice"), ("frontend", "checkoutservice"),
                        ("checkoutservice", "currencyservice")])
    candidates = _rank(_slow_callee_world(), graph, {f"{s}-0" for s in graph.nodes})
    assert candidates[0].component.startswith("currencyservice"), [(c.component, c.score) for c in candidates]
    # An entry that is not slow keeps its silence: a dead frontend is frontend's fault.
    events = _slow_callee_world()
    events["metric"] = events["metric"].filter(~((pl.col("component") == "frontend-0") & (pl.col("kpi") == "rrt")))
    dead = _rank(events, graph, {f"{s}-0" for s in graph.nodes})
    assert dead[0].component.startswith("frontend"), [(c.component, c.score) for c in dead]


def test_a_candidate_shows_which_share_of_a_line_its_own_fault_explains():
    """The ranker's reading travels with the evidence: currencyservice's silences, which frontend's
    waiting clients explain, carry a small own share; its slow answers are wholly its own."""
    graph = nx.DiGraph([("frontend", "currencyservice"), ("frontend", "cartservice"), ("frontend", "checkoutservice"),
                        ("checkoutservice", "currencyservice")])
    candidates = _rank(_slow_callee_world(), graph, {f"{s}-0" for s in graph.nodes})
    currency = next(c for c in candidates if c.component.startswith("currencyservice"))
    shares = {(e.key, e.direction): e.own_share for e in currency.evidence}
    assert shares[("rrt", "up")] == 1.0
    assert shares[("request", "silent")] == pytest.approx(RankWeights().starved_weight)


def test_without_traces_the_declared_calls_are_the_call_graph():
    """A system without tracing (metrics and logs only): the same drop, and no call graph from traces.
    The calls its description declares stand in for it, so the caller that stopped calling is blamed;
    without them a starved callee ranks first."""
    events = _dropped_calls_world(20.0)
    blind = _rank(events, nx.DiGraph(), OB_PODS)
    assert not blind[0].component.startswith("checkoutservice"), [(c.component, c.score) for c in blind]
    declared = _rank(events, nx.DiGraph(), OB_PODS, declared_calls=tuple(OB_GRAPH.edges))
    assert declared[0].component.startswith("checkoutservice"), [(c.component, c.score) for c in declared]
    assert any(e.signal == "calls_dropped" and e.caller == "checkoutservice" for e in declared[0].evidence)


def test_where_traces_show_a_callers_calls_they_not_the_description_say_what_it_called():
    """The traces of the window show checkoutservice calling cartservice only: its declared calls to
    paymentservice and emailservice do not join, so their fall is not put on it (a network delay that
    slows a whole shop lowers every callee's traffic; the description cannot tell what was called)."""
    events = _dropped_calls_world(20.0)
    traced = nx.DiGraph([("checkoutservice", "cartservice")])
    candidates = _rank(events, traced, OB_PODS, declared_calls=tuple(OB_GRAPH.edges))
    assert all(e.signal != "calls_dropped" for c in candidates for e in c.evidence)


def test_a_caller_whose_own_demand_fell_is_a_victim_not_the_source():
    events = _dropped_calls_world(20.0)
    # checkoutservice's own requests fell too: the drop comes from further up (frontend), not from it.
    events["metric"] = pl.concat([events["metric"], pl.DataFrame(
        [_metric("checkoutservice-0", "apm_pod", "request", "down", 20.0, 0.2)], schema=METRIC_EVENT_SCHEMA)])
    candidates = _rank(events, OB_GRAPH, OB_PODS)
    assert all(e.signal != "calls_dropped" or e.caller != "checkoutservice" for c in candidates for e in c.evidence)


def _abandoned_callee_world(*, state: str = "abandoned") -> dict[str, pl.DataFrame]:
    """checkoutservice throws before its email call (a real code error, Nezha 2022-08-22, seen without
    traces): emailservice, which only checkoutservice calls, receives no request at all, and the
    last slow calls' client latency soars on it; checkoutservice shows only its memory creeping up.
    ``state``: ``dead``, emailservice itself is gone instead, its memory series ending with its
    requests; ``failing``, it answers errors (to what it was still asked); ``unreachable``,
    checkoutservice's calls to it fail (a refused port), its client errors rising; ``refused``,
    they fail in the traces only."""
    metric = [_metric(component, kind, kpi, "silent", 30.0, 0.0)
              for component, kind in (("emailservice", "apm_service"), ("emailservice-0", "apm_pod"))
              for kpi in ("request", "response")]
    metric += [_metric("emailservice-0", "infra_pod", "pod_client_latency_p90", "up", 50.0, 9.2),
               _metric("emailservice-0", "infra_pod", "rrt_client_p50", "up", 4.4, 1.2),
               _metric("checkoutservice-0", "infra_pod", "pod_memory_working_set_bytes", "up", 7.4, 1.4)]
    if state == "dead":
        metric.append(_metric("emailservice-0", "infra_pod", "pod_memory_working_set_bytes", "silent", 30.0, 0.0))
    if state == "failing":
        metric.append(_metric("emailservice", "apm_service", "error_ratio", "up", 12.0, 100.0))
    if state == "unreachable":
        metric.append(_metric("checkoutservice-0", "apm_pod", "client_error", "up", 12.0, 30.0))
    if state == "refused":  # the same, where the caller counts no error of its own but the traces do
        trace = [{"caller": "checkoutservice", "callee": "emailservice", "callee_pod": "emailservice-0",
                  "callee_node": None, "operation": "hipstershop.EmailService/SendOrderConfirmation",
                  "signal": "errors", "z": 50.0, "ratio": 30.0, "window_calls": 40, "onset": ONSET,
                  "wait_share": None, "wait_added_us": None}]
        return _events(metric=metric, trace=trace)
    return _events(metric=metric)


def test_a_callee_its_only_caller_stopped_calling_points_at_the_caller():
    candidates = _rank(_abandoned_callee_world(), OB_GRAPH, OB_PODS)
    assert SYSTEM.service_of(candidates[0].component) == "checkoutservice", [(c.component, c.score) for c in candidates]
    dropped = [e for e in candidates[0].evidence if e.signal == "calls_dropped"]
    assert dropped and dropped[0].caller == "checkoutservice" and dropped[0].callee == "emailservice"


FRONTEND_GRAPH = nx.DiGraph([("frontend", "adservice"), ("frontend", "recommendationservice"),
                             ("frontend", "productcatalogservice"), ("recommendationservice", "productcatalogservice")])


@pytest.mark.parametrize("fall_z", [7.5, 12.0, 20.0])
def test_a_callee_only_a_dropping_caller_calls_lost_its_traffic_to_it(fall_z):
    """frontend throws after some of its calls (a real code error, Nezha 2022-08-22): the traces say
    it calls adservice less for its demand, and recommendationservice, which only frontend calls,
    receives fewer requests (0.39x); frontend's own syscalls fall a little. The fall is frontend's."""
    metric = [_metric("recommendationservice-0", kind, kpi, "down", fall_z, 0.39)
              for kind, kpi in (("apm_pod", "request"), ("infra_pod", "pod_network_receive_bytes"),
                                ("infra_pod", "pod_syscall_write"))]
    metric += [_metric("frontend-0", "infra_pod", kpi, "down", 5.0, 0.7) for kpi in ("pod_syscall_read", "pod_syscall_write")]
    events = _events(metric=metric)
    events["dropped"] = pl.DataFrame([{"caller": "frontend", "callee": "adservice", "z": 6.0, "ratio": 0.3,
                                       "window_calls": 20, "onset": ONSET}], schema=DROPPED_EVENT_SCHEMA)
    candidates = _rank(events, FRONTEND_GRAPH, {f"{s}-0" for s in FRONTEND_GRAPH.nodes})
    assert SYSTEM.service_of(candidates[0].component) == "frontend", [(c.component, c.score) for c in candidates]
    assert _score(candidates, "recommendationservice") < 0.5 * _score(candidates, "frontend")


@pytest.mark.parametrize(("counted", "failing"), [(True, False), (False, False), (True, True)])
def test_a_sampled_drop_is_as_strong_as_its_callees_counters_say(counted, failing):
    """frontend throws before some of its ad calls (Nezha 2022-08-22, 6531eb07-1) and the tracer keeps
    a fifth of the traces: they show frontend calling adservice less for its demand, but on few calls
    (z 4.9). adservice, which only frontend calls, counts every request it gets, and they fell silent
    (z 42): the same drop, read on every call. The stronger reading is the drop's strength. A callee
    that others call too (productcatalogservice, also called by recommendationservice) lends nothing,
    nor does any callee when one of frontend's calls fails (``failing``: its calls to
    recommendationservice are refused): a failed call ends its caller's handler, and the drop may be
    that failure's echo."""
    metric = [_metric("frontend-0", "infra_pod", "pod_network_receive_bytes", "down", 4.6, 0.7),
              _metric("productcatalogservice-0", "apm_pod", "request", "silent", 45.0, 0.0)]
    if counted:
        metric += [_metric("adservice-0", kind, kpi, "silent", 42.0, 0.0)
                   for kind, kpi in (("apm_pod", "request"), ("infra_pod", "pod_network_receive_bytes"))]
    trace = [{"caller": "frontend", "callee": "recommendationservice", "callee_pod": "recommendationservice-0",
              "callee_node": None, "operation": "hipstershop.RecommendationService/ListRecommendations",
              "signal": "errors", "z": 20.0, "ratio": 0.9, "window_calls": 40, "onset": ONSET,
              "wait_share": None, "wait_added_us": None}] if failing else []
    events = _events(metric=metric, trace=trace)
    events["dropped"] = pl.DataFrame([{"caller": "frontend", "callee": callee, "z": 4.9, "ratio": 0.3,
                                       "window_calls": 4, "onset": ONSET}
                                      for callee in ("adservice", "productcatalogservice")],
                                     schema=DROPPED_EVENT_SCHEMA)
    candidates = _rank(events, FRONTEND_GRAPH, {f"{s}-0" for s in FRONTEND_GRAPH.nodes})
    frontend = next(c for c in candidates if SYSTEM.service_of(c.component) == "frontend")
    drop = next(e for e in frontend.evidence if e.signal == "calls_dropped")
    assert drop.z == (pytest.approx(42.0) if counted and not failing else 4.9)
    if not failing:
        assert SYSTEM.service_of(candidates[0].component) == "frontend", [(c.component, c.score) for c in candidates]


def _echoed_drop_world(*, checkout_stops_after: int) -> dict[str, pl.DataFrame]:
    """checkoutservice throws before its payment and email calls (a real code error, Nezha 2022-08-22):
    its traces show both calls stopped, the callees' requests silent. frontend's handler, failed by
    it, stops too: frontend's traces show its later call to cartservice dropped from minute 1.
    ``checkout_stops_after``: the minute checkoutservice's stop begins."""
    stop = ONSET + timedelta(minutes=checkout_stops_after)
    trace = [{"caller": "checkoutservice", "callee": callee, "callee_pod": f"{callee}-0", "callee_node": None,
              "operation": operation, "signal": "silent", "z": 30.0, "ratio": 0.0, "window_calls": 0, "onset": stop,
              "wait_share": None, "wait_added_us": None}
             for callee, operation in (("emailservice", "hipstershop.EmailService/SendOrderConfirmation"),
                                       ("paymentservice", "hipstershop.PaymentService/Charge"))]
    metric = [{**_metric(f"{callee}-0", "apm_pod", "request", "silent", 30.0, 0.0), "onset": stop}
              for callee in ("emailservice", "paymentservice")]
    metric.append(_metric("checkoutservice-0", "infra_pod", "pod_memory_working_set_bytes", "up", 7.4, 1.4))
    events = _events(metric=metric, trace=trace)
    events["dropped"] = pl.DataFrame([{"caller": "frontend", "callee": "cartservice", "z": 30.0, "ratio": 0.05,
                                       "window_calls": 2, "onset": ONSET + timedelta(minutes=1)}],
                                     schema=DROPPED_EVENT_SCHEMA)
    return events


def test_a_callers_drop_after_a_callee_below_stopped_its_own_is_their_echo():
    candidates = _rank(_echoed_drop_world(checkout_stops_after=1), OB_GRAPH, OB_PODS)
    assert SYSTEM.service_of(candidates[0].component) == "checkoutservice", [(c.component, c.score) for c in candidates]
    (drop,) = [e for c in candidates if c.component == "frontend" for e in c.evidence if e.signal == "calls_dropped"]
    assert drop.own_share is not None and drop.own_share <= 0.5
    # A drop that began before the one below it is no echo of it.
    earlier = _rank(_echoed_drop_world(checkout_stops_after=2), OB_GRAPH, OB_PODS)
    (drop,) = [e for c in earlier if c.component == "frontend" for e in c.evidence if e.signal == "calls_dropped"]
    assert (drop.own_share or 1.0) == 1.0


@pytest.mark.parametrize("state", ["dead", "failing", "unreachable", "refused"])
def test_a_dead_failing_or_unreachable_callee_or_one_with_other_callers_keeps_its_silence(state):
    # Dead: its memory ended with its requests; failing: it answers errors; unreachable: the
    # caller's calls to it fail. The caller calls on; it did not stop.
    broken = _rank(_abandoned_callee_world(state=state), OB_GRAPH, OB_PODS)
    if state == "dead" or state == "failing":  # unreachable: the caller's errors make it a suspect too, rightly
        assert SYSTEM.service_of(broken[0].component) == "emailservice", [(c.component, c.score) for c in broken]
    assert all(e.signal != "calls_dropped" for c in broken for e in c.evidence)
    # Two callers (frontend and checkoutservice call cartservice): no single caller stopped it.
    events = _abandoned_callee_world()
    events["metric"] = events["metric"].with_columns(pl.col("component").str.replace("emailservice", "cartservice"))
    shared = _rank(events, OB_GRAPH, OB_PODS)
    assert all(e.signal != "calls_dropped" for c in shared for e in c.evidence)


def _lone_caller_world(edge_z: float) -> dict[str, pl.DataFrame]:
    """frontend-0's CPU is starved (pod_cpu_usage up, z=50): every call it times looks slow, so its edge
    to productcatalogservice shows latency; checkoutservice and recommendationservice call the same
    service and see nothing wrong."""
    metric = [_metric("frontend-0", "infra_pod", "pod_cpu_usage", "up", 50.0, 4.0)]
    trace = [{"caller": "frontend", "callee": "productcatalogservice", "callee_pod": "productcatalogservice-0",
              "callee_node": None, "operation": "hipstershop.ProductCatalogService/GetProduct", "signal": "latency",
              "z": edge_z, "ratio": 6.0, "window_calls": 400, "onset": ONSET}]
    return _events(metric=metric, trace=trace)


@pytest.mark.parametrize("edge_z", [30.0, 50.0])
def test_an_edge_slow_for_one_starved_caller_is_the_callers(edge_z):
    events = _lone_caller_world(edge_z)
    candidates = _rank(events, OB_GRAPH, OB_PODS)
    services = [SYSTEM.service_of(c.component) for c in candidates]
    assert services.index("frontend") < services.index("productcatalogservice"), \
        [(c.component, c.score) for c in candidates]
    # RankWeights(fanout_victim_weight=1.0) keeps the lone caller's edge at full strength: the callee
    # scores more. (It still ranks below the caller here: since one-pod services count a series once,
    # not on the pod and again on the service, the edge alone no longer outweighs a CPU at z 50.)
    old = _rank(events, OB_GRAPH, OB_PODS, weights=replace(RankWeights(), fanout_victim_weight=1.0))
    assert _score(old, "productcatalogservice") > _score(candidates, "productcatalogservice")


def test_an_edge_slow_for_several_callers_stays_the_callees():
    events = _lone_caller_world(50.0)
    second = events["trace"].with_columns(pl.lit("checkoutservice").alias("caller"))
    events["trace"] = pl.concat([events["trace"], second])
    names = [c.component for c in _rank(events, OB_GRAPH, OB_PODS)]
    assert names[0].startswith("productcatalogservice"), names


# One pod per service (Nezha's deployments): the release-style service-level APM row is that pod's row.
ONE_POD_GRAPH = nx.DiGraph([("frontend", "checkoutservice"), ("frontend", "currencyservice"),
                            ("checkoutservice", "paymentservice"), ("checkoutservice", "currencyservice")])
ONE_POD_PODS = {f"{s}-0" for s in ONE_POD_GRAPH.nodes}


def _score(candidates, name: str) -> float:
    return next(c.score for c in candidates if c.component == name)


@pytest.mark.parametrize("z", [5.0, 12.0, 50.0])
def test_a_single_pod_services_series_counts_once_not_per_row(z):
    pod_row = _metric("paymentservice-0", "apm_pod", "request", "up", z, 2.0)
    service_row = {**pod_row, "component": "paymentservice", "kind": "apm_service"}
    alone = _rank(_events(metric=[pod_row]), ONE_POD_GRAPH, ONE_POD_PODS)
    both = _rank(_events(metric=[pod_row, service_row]), ONE_POD_GRAPH, ONE_POD_PODS)
    assert _score(both, "paymentservice") == pytest.approx(_score(alone, "paymentservice"))


def test_a_pod_only_kpi_is_not_outweighed_by_a_series_reported_twice():
    """checkoutservice's network is slow: its callers time its calls 2x slower (the mesh's caller-side
    latency, a KPI only the pod has); paymentservice's traffic rose about as clearly, on the pod's row and
    on the service's row aggregated from it. Counted twice, the traffic won."""
    pod_row = _metric("paymentservice-0", "apm_pod", "request", "up", 4.7, 2.0)
    metric = [pod_row, {**pod_row, "component": "paymentservice", "kind": "apm_service"},
              _metric("checkoutservice-0", "infra_pod", "rrt_client_p50", "up", 6.0, 2.1)]
    names = [c.component for c in _rank(_events(metric=metric), ONE_POD_GRAPH, ONE_POD_PODS)]
    assert names[0] == "checkoutservice", names


def _slow_callee_fanout_world(callee_z: float, *, signal: str = "latency") -> dict[str, pl.DataFrame]:
    """currencyservice's CPU is starved: frontend-0's calls to it and to checkoutservice (which calls it
    too) are slow. The traces kept show only frontend's calls (a source that records around incidents,
    files absent), so they look like a fan-out of frontend-0; currencyservice's own server-side latency
    (its service-level rrt) says it is slow for everybody."""
    events = _events(metric=[_metric("currencyservice", "apm_service", "rrt", "up", callee_z, 30.0),
                             _metric("frontend", "apm_service", "rrt", "up", 50.0, 30.0)])
    events["fanout"] = pl.DataFrame([{"caller": "frontend", "caller_pod": "frontend-0",
                                      "callees": ["currencyservice", "checkoutservice"], "signal": signal,
                                      "z": 50.0, "onset": ONSET}], schema=FANOUT_EVENT_SCHEMA)
    return events


def test_a_latency_fanout_to_a_callee_slow_by_its_own_measure_is_no_fanout():
    events = _slow_callee_fanout_world(50.0)
    candidates = _rank(events, ONE_POD_GRAPH, ONE_POD_PODS)
    assert candidates[0].component == "currencyservice", [(c.component, c.score) for c in candidates]
    assert all(e.signal != "fanout" for c in candidates for e in c.evidence)
    # RankWeights(fanout_slow_callee_share=inf) counts every callee as fine: the caller pod wins again.
    old = _rank(events, ONE_POD_GRAPH, ONE_POD_PODS, weights=replace(RankWeights(), fanout_slow_callee_share=np.inf))
    assert SYSTEM.service_of(old[0].component) == "frontend", [(c.component, c.score) for c in old]


def test_the_meshs_callee_side_on_a_pod_makes_its_service_slow():
    """The mesh measures a workload: its callee-side latency lands on the service's pods, not on a service row."""
    events = _slow_callee_fanout_world(50.0)
    events["metric"] = pl.DataFrame([_metric("currencyservice-0", "infra_pod", "rrt_server_p50", "up", 50.0, 30.0),
                                     _metric("frontend", "apm_service", "rrt", "up", 50.0, 30.0)],
                                    schema=METRIC_EVENT_SCHEMA)
    candidates = _rank(events, ONE_POD_GRAPH, ONE_POD_PODS)
    assert all(e.signal != "fanout" for c in candidates for e in c.evidence)
    assert candidates[0].component == "currencyservice", [(c.component, c.score) for c in candidates]


@pytest.mark.parametrize("callee_z, signal", [(10.0, "latency"), (50.0, "errors")])
def test_a_fanout_stays_when_the_callee_is_barely_slow_or_the_calls_fail(callee_z, signal):
    candidates = _rank(_slow_callee_fanout_world(callee_z, signal=signal), ONE_POD_GRAPH, ONE_POD_PODS)
    assert any(e.signal == "fanout" for c in candidates for e in c.evidence)


CURRENCY_GRAPH = nx.DiGraph([("frontend", "checkoutservice"), ("frontend", "currencyservice"),
                             ("checkoutservice", "currencyservice"), ("checkoutservice", "cartservice")])


def _delayed_callee_world() -> dict[str, pl.DataFrame]:
    """currencyservice's network is delayed (Nezha's OnlineBoutique, no mesh files): its callers' own
    client latency (``pod_client_latency_*``, the calls they make) soars, checkoutservice's most (it
    calls currencyservice once per item), and its memory creeps up as requests queue; currencyservice
    shows only the wait between the spans of frontend's calls and its traffic falling."""
    metric = [_metric("checkoutservice-0", "infra_pod", "pod_client_latency_p90", "up", 50.0, 9.8),
              _metric("checkoutservice-0", "infra_pod", "pod_memory_working_set_bytes", "up", 6.2, 1.4),
              _metric("frontend-0", "infra_pod", "pod_client_latency_p90", "up", 38.0, 13.0),
              _metric("currencyservice-0", "infra_pod", "pod_network_receive_bytes", "down", 6.5, 0.68)]
    trace = [{"caller": "frontend", "callee": "currencyservice", "callee_pod": "currencyservice-0",
              "callee_node": None, "operation": "hipstershop.CurrencyService/Convert", "signal": "latency",
              "z": 6.3, "ratio": 4.5, "window_calls": 400, "onset": ONSET, "wait_share": 1.0,
              "wait_added_us": 90_000.0}]
    return _events(metric=metric, trace=trace)


def test_a_pods_client_latency_is_its_callees_time_not_its_own():
    pods = {f"{s}-0" for s in CURRENCY_GRAPH.nodes}
    candidates = _rank(_delayed_callee_world(), CURRENCY_GRAPH, pods)
    assert SYSTEM.service_of(candidates[0].component) == "currencyservice", [(c.component, c.score) for c in candidates]
    # At full strength (client_latency_weight=1.0) the loudest caller's own calls outrank the callee.
    old = _rank(_delayed_callee_world(), CURRENCY_GRAPH, pods, weights=replace(RankWeights(), client_latency_weight=1.0))
    assert SYSTEM.service_of(old[0].component) == "checkoutservice", [(c.component, c.score) for c in old]
