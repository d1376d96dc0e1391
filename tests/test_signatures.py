"""SOP signals: grammar, matching against evidence data, and the shipped signatures."""
from __future__ import annotations

from datetime import UTC, datetime
from typing import get_args

import polars as pl
import pytest

from index.evidence import (
    dropped_calls_item,
    fanout_items,
    log_items,
    metric_items,
    stopped_after_item,
    trace_items,
    wait_items,
    waiting,
)
from index.models import EvidenceItem, EvidenceSignal
from index.params import RankWeights
from knowledge.documents import SHIPPED_DOCS_DIR, DocumentError, load_documents, parse_document
from knowledge.retrieval import fault_signatures
from knowledge.signatures import (
    NARROWED_TRACE_CLUES,
    Clue,
    Signal,
    SignalError,
    match_signature,
    rank_signatures,
)
from preprocess.detect_log import LOG_EVENT_SCHEMA
from preprocess.detect_metric import METRIC_EVENT_SCHEMA
from preprocess.detect_trace import FANOUT_EVENT_SCHEMA, TRACE_EVENT_SCHEMA
from rca.system import bundled_system
from rca.taxonomy import FAULT_TYPES

ONSET = datetime(2025, 6, 5, 16, 30, tzinfo=UTC)


def metric(key: str, direction: str = "up", component: str = "checkoutservice") -> EvidenceItem:
    return EvidenceItem(modality="metric", signal="silent" if direction == "silent" else "level", key=key,
                        component=component, text=f"{key} {direction} on {component}", direction=direction)


def log(line: str, component: str = "frontend-0", *, text: str | None = None) -> EvidenceItem:
    return EvidenceItem(modality="log", signal="new_template", key=line[:40], component=component,
                        text=text if text is not None else line[:100], direction="new", example=line)


def fell(line: str, component: str = "checkoutservice-0") -> EvidenceItem:
    return EvidenceItem(modality="log", signal="fell", key=line[:40], component=component,
                        text=line[:100], direction="down", example=line, ratio=0.0, count=0)


def trace(signal: str, component: str = "checkoutservice") -> EvidenceItem:
    return EvidenceItem(modality="trace", signal=signal, key="frontend->checkoutservice", component=component,
                        text=f"frontend->checkoutservice {signal}", caller="frontend", callee="checkoutservice")


@pytest.mark.parametrize(("spec", "item", "expected"), [
    ("metric:pod_cpu_usage:up", metric("pod_cpu_usage"), True),
    ("metric:pod_cpu_usage:up", metric("pod_cpu_usage", "down"), False),
    ("metric:pod_network_*:down", metric("pod_network_receive_bytes", "down"), True),
    ("metric:*error*", metric("client_error_ratio", "silent"), True),
    ("metric:rrt", metric("rrt_max"), False),
    ("log:Server Misbehaving", log("lookup currencyservice on 169.254.25.10:53: server misbehaving"), True),
    # The log line is data: a phrase the rendered sentence elided still matches, its suffix never does.
    ("log:server misbehaving", log("lookup currencyservice: server misbehaving", text="lookup…x3 on frontend-0"), True),
    ("log:on frontend", log("dial tcp: connection refused", text="dial tcp: connection refused x3 on frontend-0"),
     False),
    ("trace:latency", trace("latency"), True),
    ("trace:latency", trace("errors"), False),
    ("trace:latency", metric("rrt"), False),
    ("trace:fanout", trace("fanout"), True),
    ("trace:errors", trace("fanout").model_copy(update={"fanout_signal": "errors"}), True),
    ("trace:errors", trace("fanout").model_copy(update={"fanout_signal": "latency"}), False),
    ("trace:latency", trace("fanout").model_copy(update={"fanout_signal": "latency"}), True),
    ("trace:latency", trace("fanout").model_copy(update={"fanout_signal": "errors"}), False),
    ("log:connection refused|trace:calls_stopped", trace("calls_stopped"), True),
    # inside: the callee's own spans slowed (a latency the spans tell from a wait), not a wait,
    # and not a slow call whose callee recorded no span (the two sides cannot be told apart).
    ("trace:inside", trace("latency").model_copy(update={"wait_share": 0.2}), True),
    ("trace:inside", trace("latency"), False),
    ("trace:inside", trace("latency").model_copy(update={"wait_share": 0.9}), False),
    ("trace:inside", trace("wait"), False),
    ("trace:latency", trace("latency").model_copy(update={"wait_share": 0.2}), True),
    ("log:silent", metric("request", "silent"), False),
    # A line that stopped is the opposite of a line that appeared: only log:fell matches it.
    ("log:fell", fell("Charge successfully, transaction id <NUM>"), True),
    ("log:connection refused", fell("dial tcp: connection refused"), False),
    ("log:fell", log("Charge successfully, transaction id <NUM>"), False),
])
def test_signal_matching(spec, item, expected):
    assert (Signal.parse(spec).seen([item]) is not None) is expected


@pytest.mark.parametrize("spec", ["cpu:pod_cpu_usage", "metric:", "metric:rrt:sideways", "pod_cpu_usage up",
                                  "trace:p95", "trace:calls stopped"])
def test_bad_signals_are_rejected(spec):
    with pytest.raises(SignalError, match="expected|direction|names a signal"):
        Signal.parse(spec)


def test_contradictions_lower_the_score():
    signals = [Signal.parse(s) for s in ("metric:rrt*:up", "trace:latency", "not trace:errors")]
    clean = match_signature("network delay", signals, [metric("rrt"), trace("latency")])
    noisy = match_signature("network delay", signals, [metric("rrt"), trace("latency"), trace("errors")])
    assert clean.matched == ("rrt* up", "trace 'p95'") and clean.contradicted == ()
    assert noisy.contradicted == ("trace 'errors'",)
    assert noisy.score < clean.score
    assert noisy.render() == "network delay 2/2 (rrt* up, trace 'p95'), against: trace 'errors'"


def test_equal_fits_go_to_the_type_that_explains_the_stronger_evidence():
    """Two types each see one of their signals: the one that explains the candidate's strongest
    line (evidence comes strongest first) ranks first, whatever the catalogue's order."""
    signatures = {"target port misconfig": [Signal.parse(s) for s in ("metric:pod_network_*:down", "log:refused",
                                                                     "metric:request:silent", "trace:calls_stopped")],
                  "code error": [Signal.parse(s) for s in ("metric:*error*:up", "trace:errors|trace:calls_dropped",
                                                           "log:panic", "metric:pod_processes")]}
    dropped = trace("calls_dropped", component="frontend")
    network = metric("pod_network_receive_bytes", "down", component="frontend")
    order = ["target port misconfig", "code error"]
    assert [m.fault_type for m in rank_signatures(signatures, [dropped, network], fault_types=order)] == \
        ["code error", "target port misconfig"]
    assert [m.fault_type for m in rank_signatures(signatures, [network, dropped], fault_types=order)] == \
        ["target port misconfig", "code error"]


def test_a_signal_shown_only_by_weak_evidence_counts_in_proportion():
    """A real CPU stress (Nezha OnlineBoutique): CPU up 180x at z 50, memory up 1.3x at z 6.7, the
    response time up. Counting signals, memory stress (2 of 3) beat cpu stress (2 of 4)."""
    signatures = {"memory stress": [Signal.parse(s) for s in ("metric:pod_memory_working_set_bytes:up",
                                                              "metric:pod_processes:up", "metric:rrt*:up")],
                  "cpu stress": [Signal.parse(s) for s in ("metric:pod_cpu_usage:up", "metric:rrt*:up", "trace:latency",
                                                           "metric:pod_processes:up")]}
    evidence = [metric("rrt").model_copy(update={"magnitude": 50.0}),
                metric("pod_cpu_usage").model_copy(update={"magnitude": 50.0}),
                metric("pod_memory_working_set_bytes").model_copy(update={"magnitude": 6.7})]
    ranked = rank_signatures(signatures, evidence, fault_types=["memory stress", "cpu stress"])
    assert [m.fault_type for m in ranked] == ["cpu stress", "memory stress"]
    assert ranked[1].render() == "memory stress 2/3 (pod_memory_working_set_bytes up, rrt* up)"  # still both seen
    strong = [evidence[0], evidence[1], metric("pod_memory_working_set_bytes").model_copy(update={"magnitude": 30.0})]
    assert rank_signatures(signatures, strong, fault_types=["memory stress", "cpu stress"])[0].fault_type == "memory stress"


@pytest.mark.parametrize("starved", [False, True])
def test_a_line_another_components_fault_explains_shows_little_of_this_ones(starved):
    """A real CPU stress on currencyservice (Nezha 2022-08-22, metrics only): its answers 30x slower,
    its CPU up only a little (z 4), and its requests and network silent because frontend's waiting
    clients sent fewer. The ranker reads the silences as frontend's doing (own share 0.2); judged on
    that share they no longer make a misrouted port."""
    own = {"own_share": 0.2} if starved else {}
    evidence = [metric("rrt", component="currencyservice").model_copy(update={"magnitude": 50.0}),
                metric("request", "silent", component="currencyservice").model_copy(update={"magnitude": 37.5, **own}),
                metric("pod_network_receive_bytes", "silent", component="currencyservice").model_copy(
                    update={"magnitude": 37.5, **own}),
                metric("pod_cpu_usage", component="currencyservice").model_copy(update={"magnitude": 4.0})]
    signatures = fault_signatures(load_documents(SHIPPED_DOCS_DIR))
    ranked = rank_signatures(signatures, evidence, fault_types=["cpu stress", "target port misconfig"])
    assert ranked[0].fault_type == ("cpu stress" if starved else "target port misconfig"), [m.render() for m in ranked]


# Evidence a textbook case of each fault type would produce, and the type it must rank first.
SHIPPED_CASES = [
    ("cpu stress", "shippingservice", [metric("pod_cpu_usage"), metric("rrt"), trace("latency"),
                                       metric("pod_processes")]),
    # A CPU-starved entry service (nothing calls it): every call it makes is slow (a latency
    # fan-out), its own requests and syscalls fall (Nezha's frontend, real tuning day).
    ("cpu stress", "frontend", [trace("fanout").model_copy(update={"fanout_signal": "latency"}),
                                metric("pod_cpu_usage"), metric("rrt"), metric("request", "down"),
                                metric("response", "down"), metric("pod_network_receive_bytes", "down")]),
    # Traces only: a CPU-starved callee's requests queue before its spans open (a wait) and its
    # own spans slow down too; a delayed network leaves them as fast as before (real tuning day:
    # productcatalogservice's and recommendationservice's CPU stresses, every network delay).
    ("cpu stress", "productcatalogservice", [trace("wait"), trace("latency").model_copy(update={"wait_share": 0.2})]),
    ("network delay", "productcatalogservice", [trace("wait")]),
    # Traces only (no metrics recorded): a CPU-starved pod's every call is slow, nothing fails.
    # A slow fan-out is not a name that cannot be looked up (real tuning day, traces-only view:
    # frontend's and checkoutservice's CPU stresses).
    ("cpu stress", "checkoutservice", [trace("fanout").model_copy(update={"fanout_signal": "latency"})]),
    ("memory stress", "emailservice-2", [metric("pod_memory_working_set_bytes"), metric("pod_processes"), metric("rrt")]),
    ("jvm gc", "adservice", [log("WARN [TransformListener] applying rule adservice--gc (GCHelper.triggerFullGC)"),
                             metric("pod_cpu_usage"), metric("rrt"), metric("pod_memory_working_set_bytes")]),
    ("jvm cpu", "adservice", [log("WARN [TransformListener] applying rule adservice--stress (cpu fullload)"),
                              metric("pod_cpu_usage"), metric("rrt"), trace("latency")]),
    ("network delay", "checkoutservice", [metric("rrt"), trace("wait"),
                                          metric("pod_network_transmit_bytes", "down")]),
    # The time is spent between the two spans of the callers' calls (the delayed network)...
    ("network delay", "emailservice", [metric("rrt"), trace("wait")]),
    # ... not inside the service's own spans, which a starved service's are.
    ("cpu stress", "emailservice", [metric("rrt"), trace("latency")]),
    # Where the mesh measures both sides of each call (Nezha OnlineBoutique): the callers time the
    # delayed service's calls slower, its own side does not move, their ratio (caller_wait_ratio_p50)
    # rises; its memory drifts up with the calls in flight (real tuning day).
    ("network delay", "checkoutservice", [metric("pod_memory_working_set_bytes"), metric("caller_wait_ratio_p50"),
                                          metric("rrt_client_p50")]),
    ("network loss", "paymentservice", [metric("rrt_max"), metric("pod_network_transmit_packets", "down"),
                                        metric("client_error"), log("rpc error: code = Unavailable desc = transport is closing")]),
    ("network corrupt", "productcatalogservice", [metric("rrt"), metric("pod_network_receive_bytes"), metric("error"),
                                                  log("rpc error: code = Canceled desc = context canceled")]),
    ("dns error", "checkoutservice", [log("dial tcp: lookup shippingservice on 169.254.25.10:53: server misbehaving"),
                                      trace("fanout").model_copy(update={"fanout_signal": "errors"}),
                                      metric("client_error"), metric("response", "silent")]),
    ("target port misconfig", "emailservice", [trace("calls_stopped"),
                                               metric("pod_network_transmit_bytes", "down"),
                                               log("dial tcp 10.233.1.2:5000: connect: connection refused")]),
    # A misrouted port: the service's pods run (their CPU and memory report on) but get no traffic;
    # the callers' "connection refused" sits in the callers' evidence, not here.
    ("target port misconfig", "paymentservice", [trace("errors"), metric("pod_network_receive_bytes", "silent"),
                                                 metric("pod_network_transmit_packets", "silent"),
                                                 metric("pod_network_transmit_packets", "down")]),
    ("target port misconfig", "shippingservice", [trace("calls_stopped"), metric("request", "silent"),
                                                  metric("response", "silent"), metric("rrt", "silent"),
                                                  metric("pod_network_receive_bytes", "silent")]),
    # A failed pod: its own resource series stop as well.
    ("pod failure", "shippingservice-1", [trace("calls_stopped"), metric("request", "silent"),
                                          metric("pod_cpu_usage", "silent"), metric("pod_processes", "silent"),
                                          metric("pod_memory_working_set_bytes", "silent"),
                                          metric("pod_network_receive_bytes", "silent")]),
    ("pod failure", "tidb-tikv", [metric("server_is_up", "silent"), metric("cpu_usage", "silent"),
                                  metric("memory_usage", "silent"), metric("qps", "silent")]),
    ("node disk fill", "aiops-k8s-08", [metric("node_filesystem_usage_rate"), metric("node_filesystem_free_bytes", "down")]),
    ("node memory stress", "aiops-k8s-01", [metric("node_memory_usage_rate"), metric("node_memory_MemAvailable_bytes", "down"),
                                            metric("node_cpu_usage_rate")]),
    ("io fault", "tidb-tikv", [metric("io_util"), metric("region_pending"), metric("raft_apply_wait")]),
]


@pytest.mark.parametrize(("fault_type", "component", "evidence"), SHIPPED_CASES,
                         ids=[f"{c[0]}@{c[1]}" for c in SHIPPED_CASES])
def test_shipped_signatures_rank_the_textbook_type_first(fault_type, component, evidence):
    signatures = fault_signatures(load_documents(SHIPPED_DOCS_DIR))
    ranked = rank_signatures(signatures, evidence, fault_types=bundled_system().applicable_fault_types(component))
    assert ranked[0].fault_type == fault_type, [m.render() for m in ranked[:3]]


def test_every_fault_type_ships_signals():
    signatures = fault_signatures(load_documents(SHIPPED_DOCS_DIR))
    assert set(signatures) == set(FAULT_TYPES)
    assert all(sum(not s.negated for s in signals) >= 2 for signals in signatures.values())


def test_a_bad_signal_in_a_document_names_the_field_and_line():
    text = """+++
id = "x-fault"
title = "Some fault"
kind = "fault"
fault_type = "cpu stress"
fault_category = "stress test"
levels = ["pod"]
key_metrics = ["pod_cpu_usage"]
reason_template = "cpu stress"
signals = ["metric:pod_cpu_usage:up", "metric:rrt:sideways"]
+++
# Some fault
Body.
"""
    with pytest.raises(DocumentError) as info:
        parse_document(text, source="x-fault.md")
    assert info.value.field == "signals" and info.value.line == 10
    assert "sideways" in str(info.value)


def _metric_event(kpi: str, direction: str) -> pl.DataFrame:
    return pl.DataFrame([{"component": "checkoutservice-0", "kind": "infra_pod", "kpi": kpi, "direction": direction,
                          "z": 9.0, "ratio": 3.0, "baseline": 1.0, "window_value": 3.0, "onset": ONSET}],
                        schema=METRIC_EVENT_SCHEMA)


def _log_event(example: str, direction: str) -> pl.DataFrame:
    return pl.DataFrame([{"component": "checkoutservice-0", "template_id": 7, "template": "request error <*>",
                          "example": example, "direction": direction, "z": 9.0, "ratio": 0.0 if direction == "down" else None, "window_count": 30,
                          "baseline_count": 0, "onset": ONSET}], schema=LOG_EVENT_SCHEMA)


def _trace_items() -> list[EvidenceItem]:
    edges = pl.DataFrame([{"caller": "frontend", "callee": "checkoutservice", "callee_pod": "checkoutservice-0",
                           "callee_node": "aiops-k8s-01", "operation": "PlaceOrder", "signal": signal, "z": 9.0,
                           "ratio": 0.4, "window_calls": 50, "onset": ONSET}
                          for signal in ("latency", "errors", "silent")], schema=TRACE_EVENT_SCHEMA)
    fanout = pl.DataFrame([{"caller": "checkoutservice", "caller_pod": "checkoutservice-0",
                            "callees": ["emailservice", "shippingservice"], "signal": signal, "z": 9.0,
                            "onset": ONSET} for signal in ("errors", "latency")], schema=FANOUT_EVENT_SCHEMA)
    waits = edges.head(1).with_columns(wait_share=pl.lit(1.0), wait_added_us=pl.lit(200_000.0))
    # A slow call whose callee's own span grew (the spans tell it from a wait).
    inside = edges.head(1).with_columns(wait_share=pl.lit(0.2), wait_added_us=pl.lit(20_000.0))
    items = (trace_items(pl.concat([edges, inside]), propagation={}, fanout_callers=set(), weights=RankWeights())
             + fanout_items(fanout)
             + wait_items(waits.filter(waiting(waits, weights=RankWeights())), fanout_callers=set(), starved=set(),
                          served_fine=set(), own_slowdown={}))
    dropped = dropped_calls_item(caller="checkoutservice", callees=["emailservice", "shippingservice"], z=9.0, onset=ONSET)
    stopped = stopped_after_item(caller="frontend", callee="checkoutservice", z=9.0, ratio=0.1, onset=ONSET)
    return [item.evidence for _, item in items] + [dropped.evidence, stopped.evidence]


def _items_a_clue_could_match(clue: Clue) -> list[EvidenceItem]:
    """Evidence the index's own builders make from an event that fits ``clue``."""
    if clue.modality == "metric":
        direction = "up" if clue.direction == "any" else clue.direction
        events = _metric_event(clue.pattern.replace("*", "x"), direction)
        return [item.evidence for _, item in metric_items(events, weights=RankWeights())]
    if clue.modality == "log":
        events = (_log_event("", "silent") if clue.pattern == "silent"
                  else _log_event("Charge successfully", "down") if clue.pattern == "fell"
                  else _log_event(f"request error: {clue.pattern} (after 3 tries)", "new"))
        return [item.evidence for _, item in log_items(events, known_services=set(), weights=RankWeights(), system=bundled_system())]
    return _trace_items()


def test_every_shipped_clue_can_match_evidence_the_index_produces():
    """The SOP signals and the index share a vocabulary: no clue waits for evidence that cannot exist."""
    signatures = fault_signatures(load_documents(SHIPPED_DOCS_DIR))
    clues = {clue for signals in signatures.values() for signal in signals for clue in signal.clues}
    signals = {NARROWED_TRACE_CLUES.get(c.pattern, c.pattern) for c in clues if c.modality == "trace"}
    assert signals <= set(get_args(EvidenceSignal))
    unmatched = [f"{c.modality}:{c.pattern}" for c in sorted(clues, key=repr)
                 if not any(c.matches(item) for item in _items_a_clue_could_match(c))]
    assert unmatched == []
