"""Weak fault classes of the evidence index (issue 17, item 3): synthetic worlds with known truth.

Each world starts from the quiet day of ``tests.test_index_query.build_world`` and injects one
fault the way real telemetry shows it: a brief pod kill whose evidence comes just after its
second-long window, a caller pod that cannot resolve its callees versus a callee that is
broken, a service that receives no traffic versus one that refuses it, a stressed node versus
the pods on it and versus one busy pod, and a failed pod whose series go silent while its
callers shout errors. Every world asserts that the true component, at its level, ranks first.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import numpy as np
import polars as pl
import pytest

from index import store
from index.query import query_window
from preprocess.detect_log import LOG_COUNT_SCHEMA
from preprocess.detect_metric import SERIES_SCHEMA
from preprocess.detect_trace import EDGE_STATS_SCHEMA
from tests.test_index_query import FAULT_END, FAULT_START, MINUTES, NODE_OF, T0, _pods, build_world, write_world

World = dict[str, pl.DataFrame]
NODE = "aiops-k8s-02"
ON_NODE = sorted(p for p, n in NODE_OF.items() if n == NODE)
# Log templates the injected faults write (id 1, "request complete", is the quiet day's).
TEMPLATES = {
    2: "rpc error: code = Unavailable desc = connection refused <*> cartservice",
    3: "rpc error: code = Unavailable desc = connection refused <*> emailservice",
    4: "dial tcp: lookup cartservice on <*>: no such host",
    5: "dial tcp: lookup checkoutservice on <*>: no such host",
    6: "starting grpc server at <*>",
    7: "rpc error: code = Internal desc = cart storage failure",
    8: "rpc error: code = Internal desc = checkoutservice failed <*>",
    9: "dial tcp: lookup redis-cart on <*>: no such host",
    10: "rpc error: code = Internal desc = cartservice failed <*>",
    # Java services (Nezha's TrainTicket): lines that do not name the callee, spans without status.
    11: "java.lang.RuntimeException: injected exception at CartController <*>",
    12: "HttpServerErrorException: 500 Internal Server Error <*>",
    13: "Start charge card for order <*>",
    14: "Charge successfully, transaction id <*>",
}


def _at(first: int, last: int) -> pl.Expr:
    """Rows of minutes ``first``..``last`` (inclusive) after T0."""
    return pl.col("time").is_between(T0 + timedelta(minutes=first), T0 + timedelta(minutes=last))


def _drop(world: World, table: str, where: pl.Expr) -> None:
    world[table] = world[table].filter(~where)


def _scale(world: World, table: str, where: pl.Expr, column: str, factor: float) -> None:
    frame = world[table]
    world[table] = frame.with_columns(
        pl.when(where).then(pl.col(column) * factor).otherwise(pl.col(column)).cast(frame.schema[column]))


def _logs(world: World, *, pods: list[str], template_id: int, minutes: range, count: int) -> None:
    rows = [(T0 + timedelta(minutes=m), pod, NODE_OF[pod], template_id, count, TEMPLATES[template_id])
            for m in minutes for pod in pods]
    world["log_counts"] = pl.concat([world["log_counts"], pl.DataFrame(rows, schema=LOG_COUNT_SCHEMA, orient="row")])


def _series(world: World, *, component: str, kind: str, kpi: str, value: Callable[[int], float]) -> None:
    rows = [(T0 + timedelta(minutes=m), component, kind, kpi, value(m)) for m in range(MINUTES)]
    world["metric_series"] = pl.concat([world["metric_series"],
                                        pl.DataFrame(rows, schema=SERIES_SCHEMA, orient="row")])


def _refuse(world: World, *, where: pl.Expr, share: float, server_sees: bool) -> None:
    """Calls matching ``where`` fail at this ``share``.

    ``server_sees``: the callee answered with an error (its span exists); otherwise the
    connection never reached it (refused, unresolvable), so the failed calls appear only as
    client spans towards the callee service, with no callee pod.
    """
    edges = world["trace_edges"]
    hit = edges.filter(where)
    failed = (pl.col("count") * share).round().cast(pl.Int64)
    if server_sees:
        world["trace_edges"] = edges.with_columns(
            pl.when(where).then(failed).otherwise(pl.col("errors")).alias("errors"))
        return
    client_only = (hit.with_columns(count=failed, errors=failed, callee_pod=pl.lit(None, pl.Utf8),
                                    callee_node=pl.lit(None, pl.Utf8))
                   .group_by("time", "caller", "caller_pod", "callee", "callee_pod", "callee_node", "operation")
                   .agg(pl.col("count").sum(), pl.col("errors").sum(), pl.col("p50_us").mean(),
                        pl.col("p95_us").mean(), pl.col("mean_us").mean(),
                        pl.lit(None, pl.Float64).alias("wait_mean_us"), pl.lit(None, pl.Int64).alias("followed")))
    kept = edges.with_columns(pl.when(where).then(pl.col("count") - failed).otherwise(pl.col("count")).alias("count"))
    world["trace_edges"] = pl.concat([kept.filter(pl.col("count") > 0),
                                      client_only.select(list(EDGE_STATS_SCHEMA)).cast(EDGE_STATS_SCHEMA)])


def _error_kpi(world: World, *, pods: list[str], seed: int, rate: float, first: int, last: int) -> None:
    """An APM error-ratio series on ``pods``: near zero, ``rate`` during minutes first..last."""
    rng = np.random.default_rng(seed)
    for pod in pods:
        _series(world, component=pod, kind="apm_pod", kpi="error_ratio",
                value=lambda m: rate if first <= m <= last else float(rng.uniform(0.0, 0.004)))


FAULT = (T0 + timedelta(minutes=FAULT_START, seconds=5), T0 + timedelta(minutes=FAULT_END, seconds=5))
FAULT_MINUTES = range(FAULT_START, FAULT_END + 1)


# --- the worlds: each returns (tables, window, truth, level) ---------------------------------------

def pod_kill(seed: int):
    """cartservice-1 is killed at :55 of a minute; the window is the kill's one second.

    Inside it nothing has moved yet; the next minutes show the evidence: the pod's rows stop
    while it restarts, calls to it are refused, its callers log the refusals, a restart line.
    """
    world = build_world("healthy", seed=seed, caller_pods=3)
    pod, after = "cartservice-1", FAULT_START + 1
    _drop(world, "metric_series", (pl.col("component") == pod) & _at(after, after + 1))
    _drop(world, "log_counts", (pl.col("pod") == pod) & _at(after, after + 1))
    _refuse(world, where=(pl.col("callee_pod") == pod) & _at(after, after), share=1.0, server_sees=False)
    _drop(world, "trace_edges", (pl.col("callee_pod") == pod) & _at(after + 1, after + 1))
    _logs(world, pods=[pod], template_id=6, minutes=range(after + 2, after + 3), count=1)
    _logs(world, pods=_pods("frontend") + _pods("checkoutservice"), template_id=2, minutes=range(after, after + 1),
          count=12)
    kill = T0 + timedelta(minutes=FAULT_START, seconds=55)
    return world, (kill, kill + timedelta(seconds=1)), pod, "pod"


def dns_caller(seed: int):
    """frontend-1 cannot resolve its callees: its calls to cartservice and checkoutservice fail.

    Its error lines name the callees it could not resolve; the callees serve everyone else.
    """
    world = build_world("healthy", seed=seed, caller_pods=3)
    pod = "frontend-1"
    _refuse(world, where=(pl.col("caller_pod") == pod) & _at(FAULT_START, FAULT_END), share=0.6, server_sees=False)
    _logs(world, pods=[pod], template_id=4, minutes=FAULT_MINUTES, count=15)
    _logs(world, pods=[pod], template_id=5, minutes=FAULT_MINUTES, count=15)
    _error_kpi(world, pods=[p for p in _pods("frontend") if p != pod], seed=seed, rate=0.0, first=1, last=0)
    _error_kpi(world, pods=[pod], seed=seed + 1, rate=0.6, first=FAULT_START, last=FAULT_END)
    return world, FAULT, pod, "pod"


def dns_service(seed: int):
    """Every frontend pod cannot resolve its callees; frontend-2 serves little, so its calls are few.

    Two pods fail loudly, the third the same way but on a handful of calls (trace sampling,
    a pod that gets little traffic): the fault is the service's, not one pod's.
    """
    world = build_world("healthy", seed=seed, caller_pods=3)
    quiet_pod = "frontend-2"
    _scale(world, "trace_edges", pl.col("caller_pod") == quiet_pod, "count", 0.1)
    _refuse(world, where=(pl.col("caller") == "frontend") & _at(FAULT_START, FAULT_END), share=0.6,
            server_sees=False)
    loud = [p for p in _pods("frontend") if p != quiet_pod]
    _logs(world, pods=loud, template_id=4, minutes=FAULT_MINUTES, count=15)
    _logs(world, pods=loud, template_id=5, minutes=FAULT_MINUTES, count=15)
    _logs(world, pods=[quiet_pod], template_id=4, minutes=range(FAULT_START, FAULT_END + 1, 4), count=1)
    _error_kpi(world, pods=loud, seed=seed, rate=0.6, first=FAULT_START, last=FAULT_END)
    return world, FAULT, "frontend", "service"


def dns_single_callee(seed: int):
    """cartservice-1 cannot resolve redis-cart, its only callee; cartservice-0 and -2 reach it fine.

    One callee only, so no fan-out: what points at the caller pod is that its peers call
    the same callee without trouble. Its error lines name redis-cart; its own callers see
    errors from it.
    """
    world = build_world("healthy", seed=seed, caller_pods=3)
    pod, during = "cartservice-1", _at(FAULT_START, FAULT_END)
    _refuse(world, where=(pl.col("caller_pod") == pod) & during, share=0.6, server_sees=False)
    _refuse(world, where=(pl.col("callee_pod") == pod) & during, share=0.5, server_sees=True)
    _logs(world, pods=[pod], template_id=9, minutes=FAULT_MINUTES, count=15)
    _logs(world, pods=_pods("frontend") + _pods("checkoutservice"), template_id=10, minutes=FAULT_MINUTES, count=5)
    _error_kpi(world, pods=[p for p in _pods("cartservice") if p != pod], seed=seed, rate=0.0, first=1, last=0)
    _error_kpi(world, pods=[pod], seed=seed + 1, rate=0.5, first=FAULT_START, last=FAULT_END)
    return world, FAULT, pod, "pod"


def callee_broken(seed: int):
    """cartservice answers every caller with errors: the callers' pods all fail towards it."""
    world = build_world("healthy", seed=seed, caller_pods=3)
    _refuse(world, where=(pl.col("callee") == "cartservice") & _at(FAULT_START, FAULT_END), share=0.5,
            server_sees=True)
    _logs(world, pods=_pods("cartservice"), template_id=7, minutes=FAULT_MINUTES, count=10)
    _logs(world, pods=_pods("frontend") + _pods("checkoutservice"), template_id=2, minutes=FAULT_MINUTES, count=10)
    _error_kpi(world, pods=_pods("frontend") + _pods("checkoutservice"), seed=seed, rate=0.4, first=FAULT_START,
               last=FAULT_END)
    return world, FAULT, "cartservice", "service"



def _callers_feel_it(world: World, *, seed: int, also: list[str] | None = None) -> None:
    """emailservice's callers during the fault: checkoutservice fails 30% of frontend's calls,
    both log the failures, and their error KPIs (and those of ``also``) rise."""
    during = _at(FAULT_START, FAULT_END)
    _refuse(world, where=(pl.col("callee") == "checkoutservice") & during, share=0.3, server_sees=True)
    _logs(world, pods=_pods("checkoutservice"), template_id=3, minutes=FAULT_MINUTES, count=12)
    _logs(world, pods=_pods("frontend"), template_id=8, minutes=FAULT_MINUTES, count=8)
    _error_kpi(world, pods=_pods("checkoutservice") + _pods("frontend") + (also or []), seed=seed, rate=0.3,
               first=FAULT_START, last=FAULT_END)

def no_traffic(seed: int):
    """emailservice's port is misrouted: it receives no traffic at all, its caller shouts.

    Its pods stay up (CPU is scraped) but serve nothing: no APM rows, no request logs, no
    server spans. checkoutservice's calls to it are refused (client spans only), checkout
    logs the refusals and fails some of frontend's calls in turn.
    """
    world = build_world("healthy", seed=seed, caller_pods=3)
    during = _at(FAULT_START, FAULT_END)
    email = pl.col("component").str.starts_with("emailservice")
    _drop(world, "metric_series", email & pl.col("kind").str.starts_with("apm") & during)
    _drop(world, "log_counts", pl.col("pod").str.starts_with("emailservice") & during)
    _refuse(world, where=(pl.col("callee") == "emailservice") & during, share=1.0, server_sees=False)
    _callers_feel_it(world, seed=seed)
    return world, FAULT, "emailservice", "service"


def no_traffic_client_only(seed: int):
    """As ``no_traffic``, for a service seen only from its callers' side (no server spans, no APM).

    Like paymentservice in the simulator, emailservice's calls appear only as client spans
    of checkoutservice, it reports no APM rows and logs nothing per request: when its port
    is misrouted, the only signs on it are the refused calls and its network traffic
    falling to a fifth.
    """
    world = build_world("healthy", seed=seed, caller_pods=3)
    email = pl.col("component").str.starts_with("emailservice")
    _drop(world, "metric_series", email & pl.col("kind").str.starts_with("apm"))
    _drop(world, "log_counts", pl.col("pod").str.starts_with("emailservice"))
    _refuse(world, where=pl.col("callee") == "emailservice", share=1.0, server_sees=False)  # client spans only ...
    world["trace_edges"] = world["trace_edges"].with_columns(errors=pl.lit(0, pl.Int64))  # ... that succeed
    during = _at(FAULT_START, FAULT_END)
    rng = np.random.default_rng(seed + 7)
    for pod in _pods("emailservice"):
        _series(world, component=pod, kind="infra_pod", kpi="pod_network_receive_bytes",
                value=lambda m: float(rng.normal(5e4, 5e3)) * (0.2 if FAULT_START <= m <= FAULT_END else 1.0))
    client = pl.col("callee_pod").is_null() & (pl.col("callee") == "emailservice") & during
    world["trace_edges"] = world["trace_edges"].with_columns(
        pl.when(client).then(pl.col("count")).otherwise(pl.col("errors")).alias("errors"))
    _callers_feel_it(world, seed=seed)
    return world, FAULT, "emailservice", "service"


def refuses_traffic(seed: int):
    """emailservice receives its traffic and refuses it: its own spans carry the errors."""
    world = build_world("healthy", seed=seed, caller_pods=3)
    during = _at(FAULT_START, FAULT_END)
    _refuse(world, where=(pl.col("callee") == "emailservice") & during, share=1.0, server_sees=True)
    _callers_feel_it(world, seed=seed, also=_pods("emailservice"))
    return world, FAULT, "emailservice", "service"


def _move(world: World, pod: str, node: str) -> None:
    """``pod`` runs on ``node`` all day (placement, the node of its spans and of its log lines)."""
    world["metric_placement"] = world["metric_placement"].with_columns(
        pl.when(pl.col("pod") == pod).then(pl.lit(node)).otherwise(pl.col("node")).alias("node"))
    world["trace_edges"] = world["trace_edges"].with_columns(
        pl.when(pl.col("callee_pod") == pod).then(pl.lit(node)).otherwise(pl.col("callee_node")).alias("callee_node"))
    world["log_counts"] = world["log_counts"].with_columns(
        pl.when(pl.col("pod") == pod).then(pl.lit(node)).otherwise(pl.col("node")).alias("node"))


def node_stress(seed: int):
    """aiops-k8s-02's CPU is stressed: it is busier, and every pod on it is a little busier and slower.

    Two of cartservice's three pods run there, so cartservice as a whole looks slow too; the
    node's own rise is moderate (a noisy or large node), below a "clear" node anomaly.
    """
    world = build_world("healthy", seed=seed, caller_pods=3)
    _move(world, "cartservice-2", NODE)
    hosted = [*ON_NODE, "cartservice-2"]
    during = _at(FAULT_START, FAULT_END)
    _scale(world, "metric_series", (pl.col("component") == NODE) & during, "value", 1.35)
    on_node = pl.col("component").is_in(hosted) & during
    _scale(world, "metric_series", on_node & (pl.col("kpi") == "pod_cpu_usage"), "value", 1.3)
    _scale(world, "metric_series", on_node & (pl.col("kpi") == "rrt"), "value", 1.8)
    _scale(world, "metric_series", (pl.col("component") == "cartservice") & during, "value", 1.5)
    _scale(world, "trace_edges", pl.col("callee_pod").is_in(hosted) & during, "p95_us", 1.8)
    return world, FAULT, NODE, "node"


def busy_pod(seed: int):
    """cartservice-1 burns CPU; its node's CPU rises by that pod's share, nothing else on it moves."""
    world = build_world("healthy", seed=seed, caller_pods=3)
    during, pod = _at(FAULT_START, FAULT_END), "cartservice-1"
    _scale(world, "metric_series", (pl.col("component") == NODE_OF[pod]) & during, "value", 1.3)
    mine = (pl.col("component") == pod) & during
    _scale(world, "metric_series", mine & (pl.col("kpi") == "pod_cpu_usage"), "value", 4.0)
    _scale(world, "metric_series", mine & (pl.col("kpi") == "rrt"), "value", 2.5)
    _scale(world, "trace_edges", (pl.col("callee_pod") == pod) & during, "p95_us", 2.5)
    return world, FAULT, pod, "pod"


def silent_pod(seed: int):
    """cartservice-1 fails: its rows stop (no metrics, no logs, no spans) while its callers fail towards it."""
    world = build_world("healthy", seed=seed, caller_pods=3)
    during, pod = _at(FAULT_START, FAULT_END), "cartservice-1"
    _drop(world, "metric_series", (pl.col("component") == pod) & during)
    _drop(world, "log_counts", (pl.col("pod") == pod) & during)
    _refuse(world, where=(pl.col("callee_pod") == pod) & during, share=1.0, server_sees=False)
    _logs(world, pods=_pods("frontend") + _pods("checkoutservice"), template_id=2, minutes=FAULT_MINUTES, count=10)
    _error_kpi(world, pods=_pods("frontend") + _pods("checkoutservice"), seed=seed, rate=0.3, first=FAULT_START,
               last=FAULT_END)
    return world, FAULT, pod, "pod"


def exception_in_callee(seed: int):
    """emailservice throws: it logs the exception; checkoutservice and frontend above it log
    the 500s they got, louder.

    Java services: the callers' lines do not name the callee, and the spans carry no error
    status. The callers' trouble starts the minute the callee's does: it is their echo.
    """
    world = build_world("healthy", seed=seed, caller_pods=3)
    _logs(world, pods=_pods("emailservice"), template_id=11, minutes=FAULT_MINUTES, count=4)
    _logs(world, pods=_pods("frontend") + _pods("checkoutservice"), template_id=12, minutes=FAULT_MINUTES, count=15)
    return world, FAULT, "emailservice", "service"


def return_early(seed: int):
    """checkoutservice returns early between two log statements: the second stops, nothing errs."""
    world = build_world("healthy", seed=seed, caller_pods=3)
    minutes = range(MINUTES)
    _logs(world, pods=_pods("checkoutservice"), template_id=13, minutes=minutes, count=6)
    _logs(world, pods=_pods("checkoutservice"), template_id=14, minutes=minutes, count=6)
    _drop(world, "log_counts", (pl.col("template_id") == 14) & _at(FAULT_START, FAULT_END))
    return world, FAULT, "checkoutservice", "service"


def stalled_entry_traces_only(seed: int):
    """frontend-0 stalls (its CPU is starved) in a system that records traces only (no metric,
    no log): every call it makes is slow, towards callees the other frontend pods find fine.

    The entry service is never a callee, so its pods are seen only as callers; their fan-out is
    all the evidence there is.
    """
    world = build_world("healthy", seed=seed, caller_pods=3)
    for table in ("metric_series", "log_counts", "metric_placement"):
        world[table] = world[table].clear()
    _scale(world, "trace_edges", (pl.col("caller_pod") == "frontend-0") & _at(FAULT_START, FAULT_END), "p95_us", 6.0)
    return world, FAULT, "frontend-0", "pod"


def starved_callee_behind_an_untraced_call(seed: int):
    """cartservice is starved in a system that records traces only; frontend's calls to it are slow,
    and so are its calls to checkoutservice, which calls cartservice in a call its traces never
    show (the system description declares it). Two slow callees of one caller pod, but one slow
    service: no fan-out at the caller.
    """
    world = build_world("healthy", seed=seed)
    for table in ("metric_series", "log_counts", "metric_placement"):
        world[table] = world[table].clear()
    _drop(world, "trace_edges", (pl.col("caller") == "checkoutservice") & (pl.col("callee") == "cartservice"))
    during = _at(FAULT_START, FAULT_END)
    _scale(world, "trace_edges", (pl.col("callee") == "cartservice") & during, "p95_us", 6.0)
    _scale(world, "trace_edges", (pl.col("callee") == "checkoutservice") & during, "p95_us", 4.0)
    return world, FAULT, "cartservice", "service"


def _one_waiting_call(seed: int, *, caller_slowdown: float) -> tuple[World, tuple, str, str]:
    """Traces only; checkoutservice's one traced call, to cartservice, takes 3x as long, all of it
    between the two spans, while cartservice serves frontend as before; checkoutservice's own
    spans grow ``caller_slowdown`` times."""
    world = build_world("healthy", seed=seed)
    for table in ("metric_series", "log_counts", "metric_placement"):
        world[table] = world[table].clear()
    _drop(world, "trace_edges", (pl.col("caller") == "checkoutservice") & (pl.col("callee") == "emailservice"))
    world["trace_edges"] = world["trace_edges"].with_columns(wait_mean_us=pl.col("mean_us") * 0.1)
    during = _at(FAULT_START, FAULT_END)
    into, waiting = pl.col("callee") == "checkoutservice", (
        (pl.col("caller") == "checkoutservice") & (pl.col("callee") == "cartservice"))
    _scale(world, "trace_edges", into & during, "p95_us", caller_slowdown)
    _scale(world, "trace_edges", into & during, "mean_us", caller_slowdown)
    added = pl.col("mean_us") * 2.0  # the call takes 3x as long, all of it between the spans
    world["trace_edges"] = world["trace_edges"].with_columns(
        pl.when(waiting & during).then(pl.col("wait_mean_us") + added).otherwise(pl.col("wait_mean_us")).alias(
            "wait_mean_us"),
        pl.when(waiting & during).then(pl.col("mean_us") + added).otherwise(pl.col("mean_us")).alias("mean_us"),
        pl.when(waiting & during).then(pl.col("p95_us") * 3.0).otherwise(pl.col("p95_us")).alias("p95_us"))
    return world, FAULT, "checkoutservice", "service"


def stalled_caller_traces_only(seed: int):
    """checkoutservice stalls (CPU-starved): its spans grow 8x, more than its waiting call explains.
    One waiting edge touches both ends once: the caller, slower than the wait explains, owns it."""
    return _one_waiting_call(seed, caller_slowdown=8.0)


def delayed_call_traces_only(seed: int):
    """The same call delayed on its way (cartservice's side): checkoutservice's spans grow 1.5x,
    less than the call it waits on (3x), so the wait stays with the callee."""
    world, window, _, level = _one_waiting_call(seed, caller_slowdown=1.5)
    return world, window, "cartservice", level


def returns_early_traces_only(seed: int):
    """frontend's code path returns before most of its calls to cartservice (a bad release), in a
    system that records traces only: nothing is slow and nothing fails; frontend's calls to
    cartservice fall to 40% while its calls to checkoutservice hold."""
    world = build_world("healthy", seed=seed, caller_pods=3)
    for table in ("metric_series", "log_counts", "metric_placement"):
        world[table] = world[table].clear()
    _scale(world, "trace_edges", (pl.col("caller") == "frontend") & (pl.col("callee") == "cartservice")
           & _at(FAULT_START, FAULT_END), "count", 0.4)
    return world, FAULT, "frontend", "service"


WORLDS = {"pod_kill": pod_kill, "dns_caller": dns_caller, "dns_service": dns_service, "dns_single_callee": dns_single_callee, "callee_broken": callee_broken,
          "no_traffic": no_traffic, "no_traffic_client_only": no_traffic_client_only, "refuses_traffic": refuses_traffic, "node_stress": node_stress,
          "busy_pod": busy_pod, "silent_pod": silent_pod, "exception_in_callee": exception_in_callee,
          "return_early": return_early, "stalled_entry_traces_only": stalled_entry_traces_only,
          "starved_callee_behind_an_untraced_call": starved_callee_behind_an_untraced_call,
          "stalled_caller_traces_only": stalled_caller_traces_only, "delayed_call_traces_only": delayed_call_traces_only,
          "returns_early_traces_only": returns_early_traces_only}


def _write(index_dir, world: World) -> None:
    write_world(index_dir, world)
    templates = pl.DataFrame({"template_id": [1, *TEMPLATES], "template": ["request complete", *TEMPLATES.values()]})
    store.atomic_write_parquet(templates, store.index_table_path(index_dir, "log_templates"))


@pytest.mark.parametrize("name", list(WORLDS))
@pytest.mark.parametrize("seed", [0, 1])
def test_weak_class_ranks_its_root_cause_first(tmp_path, name, seed):
    world, (start, end), truth, level = WORLDS[name](seed)
    _write(tmp_path, world)
    result = query_window(tmp_path, start=start, end=end, top_k=5)
    ranking = [(c.component, c.level, c.score) for c in result.candidates]
    assert ranking, "no candidates"
    assert ranking[0][:2] == (truth, level), ranking
