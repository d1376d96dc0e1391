"""SOP signals: grammar, matching against evidence data, and the shipped signatures."""
from __future__ import annotations

import pytest

from index.models import EvidenceItem
from knowledge.documents import DocumentError, parse_document
from knowledge.retrieval import fault_signatures
from knowledge.signatures import Signal, SignalError, match_signature, rank_signatures
from rca.settings import load_settings
from rca.taxonomy import FAULT_TYPES, applicable_fault_types


def metric(key: str, direction: str = "up", component: str = "checkoutservice") -> EvidenceItem:
    return EvidenceItem(modality="metric", signal="silent" if direction == "silent" else "level", key=key,
                        component=component, text=f"{key} {direction} on {component}", direction=direction)


def log(line: str, component: str = "frontend-0", *, text: str | None = None) -> EvidenceItem:
    return EvidenceItem(modality="log", signal="new_template", key=line[:40], component=component,
                        text=text if text is not None else line[:100], direction="new", example=line)


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
    ("log:connection refused|trace:calls_stopped", trace("calls_stopped"), True),
    ("log:silent", metric("request", "silent"), False),
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


# Evidence a textbook case of each fault type would produce, and the type it must rank first.
SHIPPED_CASES = [
    ("cpu stress", "shippingservice", [metric("pod_cpu_usage"), metric("rrt"), trace("latency"),
                                       metric("pod_processes")]),
    ("memory stress", "emailservice-2", [metric("pod_memory_working_set_bytes"), metric("pod_processes"), metric("rrt")]),
    ("jvm gc", "adservice", [log("WARN [TransformListener] applying rule adservice--gc (GCHelper.triggerFullGC)"),
                             metric("pod_cpu_usage"), metric("rrt"), metric("pod_memory_working_set_bytes")]),
    ("jvm cpu", "adservice", [log("WARN [TransformListener] applying rule adservice--stress (cpu fullload)"),
                              metric("pod_cpu_usage"), metric("rrt"), trace("latency")]),
    ("network delay", "checkoutservice", [metric("rrt"), trace("latency"),
                                          metric("pod_network_transmit_bytes", "down")]),
    ("network loss", "paymentservice", [metric("rrt_max"), metric("pod_network_transmit_packets", "down"),
                                        metric("client_error"), log("rpc error: code = Unavailable desc = transport is closing")]),
    ("network corrupt", "productcatalogservice", [metric("rrt"), metric("pod_network_receive_bytes"), metric("error"),
                                                  log("rpc error: code = Canceled desc = context canceled")]),
    ("dns error", "checkoutservice", [log("dial tcp: lookup shippingservice on 169.254.25.10:53: server misbehaving"),
                                      trace("fanout"),
                                      metric("client_error"), metric("response", "silent")]),
    ("target port misconfig", "emailservice", [trace("calls_stopped"),
                                               metric("pod_network_transmit_bytes", "down"),
                                               log("dial tcp 10.233.1.2:5000: connect: connection refused")]),
    ("node disk fill", "aiops-k8s-08", [metric("node_filesystem_usage_rate"), metric("node_filesystem_free_bytes", "down")]),
    ("node memory stress", "aiops-k8s-01", [metric("node_memory_usage_rate"), metric("node_memory_MemAvailable_bytes", "down"),
                                            metric("node_cpu_usage_rate")]),
    ("io fault", "tidb-tikv", [metric("io_util"), metric("region_pending"), metric("raft_apply_wait")]),
]


@pytest.mark.parametrize(("fault_type", "component", "evidence"), SHIPPED_CASES, ids=[c[0] for c in SHIPPED_CASES])
def test_shipped_signatures_rank_the_textbook_type_first(fault_type, component, evidence):
    signatures = fault_signatures(load_settings())
    ranked = rank_signatures(signatures, evidence, fault_types=applicable_fault_types(component))
    assert ranked[0].fault_type == fault_type, [m.render() for m in ranked[:3]]


def test_every_fault_type_ships_signals():
    signatures = fault_signatures(load_settings())
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
