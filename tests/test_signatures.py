"""SOP signals: grammar, matching against evidence lines, and the shipped signatures."""
from __future__ import annotations

import pytest

from index.models import EvidenceItem
from knowledge.documents import SHIPPED_DOCS_DIR, DocumentError, load_documents, parse_document
from knowledge.retrieval import fault_signatures
from knowledge.signatures import Signal, SignalError, match_signature, rank_signatures
from rca.taxonomy import FAULT_TYPES, applicable_fault_types


def metric(key: str, direction: str = "up", component: str = "checkoutservice") -> EvidenceItem:
    return EvidenceItem(modality="metric", key=key, component=component, text=f"{key} {direction} on {component}",
                        direction=direction)


def log(text: str, component: str = "frontend-0") -> EvidenceItem:
    return EvidenceItem(modality="log", key=text[:40], component=component, text=text, direction="new")


def trace(text: str, component: str = "checkoutservice") -> EvidenceItem:
    return EvidenceItem(modality="trace", key=text.split()[0], component=component, text=text)


@pytest.mark.parametrize(("spec", "item", "expected"), [
    ("metric:pod_cpu_usage:up", metric("pod_cpu_usage"), True),
    ("metric:pod_cpu_usage:up", metric("pod_cpu_usage", "down"), False),
    ("metric:pod_network_*:down", metric("pod_network_receive_bytes", "down"), True),
    ("metric:*error*", metric("client_error_ratio", "silent"), True),
    ("metric:rrt", metric("rrt_max"), False),
    ("log:Server Misbehaving", log("lookup currencyservice on 169.254.25.10:53: server misbehaving x3"), True),
    ("trace:p95", trace("frontend->adservice p95 7.1x (z=47.6) to adservice"), True),
    ("trace:p95", metric("rrt"), False),
    ("log:connection refused|trace:calls stopped", trace("checkoutservice->emailservice calls stopped"), True),
])
def test_signal_matching(spec, item, expected):
    assert (Signal.parse(spec).seen([item]) is not None) is expected


@pytest.mark.parametrize("spec", ["cpu:pod_cpu_usage", "metric:", "metric:rrt:sideways", "pod_cpu_usage up"])
def test_bad_signals_are_rejected(spec):
    with pytest.raises(SignalError, match="expected|direction"):
        Signal.parse(spec)


def test_contradictions_lower_the_score():
    signals = [Signal.parse(s) for s in ("metric:rrt*:up", "trace:p95", "not trace:errors")]
    clean = match_signature("network delay", signals, [metric("rrt"), trace("a->b p95 3x")])
    noisy = match_signature("network delay", signals, [metric("rrt"), trace("a->b p95 3x"), trace("a->b errors 40%")])
    assert clean.matched == ("rrt* up", "trace 'p95'") and clean.contradicted == ()
    assert noisy.contradicted == ("trace 'errors'",)
    assert noisy.score < clean.score
    assert noisy.render() == "network delay 2/2 (rrt* up, trace 'p95'), against: trace 'errors'"


# Evidence a textbook case of each fault type would produce, and the type it must rank first.
SHIPPED_CASES = [
    ("cpu stress", "shippingservice", [metric("pod_cpu_usage"), metric("rrt"), trace("frontend->shippingservice p95 4x"),
                                       metric("pod_processes")]),
    ("memory stress", "emailservice-2", [metric("pod_memory_working_set_bytes"), metric("pod_processes"), metric("rrt")]),
    ("jvm gc", "adservice", [log("WARN [TransformListener] applying rule adservice--gc (GCHelper.triggerFullGC)"),
                             metric("pod_cpu_usage"), metric("rrt"), metric("pod_memory_working_set_bytes")]),
    ("jvm cpu", "adservice", [log("WARN [TransformListener] applying rule adservice--stress (cpu fullload)"),
                              metric("pod_cpu_usage"), metric("rrt"), trace("frontend->adservice p95 9x")]),
    ("network delay", "checkoutservice", [metric("rrt"), trace("frontend->checkoutservice p95 2.7x"),
                                          metric("pod_network_transmit_bytes", "down")]),
    ("network loss", "paymentservice", [metric("rrt_max"), metric("pod_network_transmit_packets", "down"),
                                        metric("client_error"), log("rpc error: code = Unavailable desc = transport is closing")]),
    ("network corrupt", "productcatalogservice", [metric("rrt"), metric("pod_network_receive_bytes"), metric("error"),
                                                  log("rpc error: code = Canceled desc = context canceled")]),
    ("dns error", "checkoutservice", [log("dial tcp: lookup shippingservice on 169.254.25.10:53: server misbehaving"),
                                      trace("checkoutservice->shippingservice: errors on calls from checkoutservice-1"),
                                      metric("client_error"), metric("response", "silent")]),
    ("target port misconfig", "emailservice", [trace("checkoutservice->emailservice calls stopped"),
                                               metric("pod_network_transmit_bytes", "down"),
                                               log("dial tcp 10.233.1.2:5000: connect: connection refused")]),
    ("node disk fill", "aiops-k8s-08", [metric("node_filesystem_usage_rate"), metric("node_filesystem_free_bytes", "down")]),
    ("node memory stress", "aiops-k8s-01", [metric("node_memory_usage_rate"), metric("node_memory_MemAvailable_bytes", "down"),
                                            metric("node_cpu_usage_rate")]),
    ("io fault", "tidb-tikv", [metric("io_util"), metric("region_pending"), metric("raft_apply_wait")]),
]


@pytest.mark.parametrize(("fault_type", "component", "evidence"), SHIPPED_CASES, ids=[c[0] for c in SHIPPED_CASES])
def test_shipped_signatures_rank_the_textbook_type_first(fault_type, component, evidence):
    signatures = fault_signatures(load_documents(SHIPPED_DOCS_DIR))
    ranked = rank_signatures(signatures, evidence, fault_types=applicable_fault_types(component))
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
