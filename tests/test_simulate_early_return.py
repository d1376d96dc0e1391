"""A handler that fails in its own code stops there: the calls after the failure are not made.

Real code faults do this (Nezha's injected exceptions and early returns, docs/generalisation.md);
before round 21 the simulator's failing server spans kept every child call. A call that failed is
such a failure of its caller's code too (Go's `if err != nil { return err }`, a Java client's
exception): before round 24 a caller went on with its next calls after a failed one.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from simulate.logs import build_hour_logs
from simulate.requests import generate_hour
from simulate.schedule import Fault
from simulate.simulator import _pods_on_node
from simulate.topology import TEMPLATES, place_pods, pods_of

HOUR = datetime(2025, 6, 6, 2, 0, tzinfo=UTC)


def _hour(fault_type: str | None, *, uuid: str = "f", service: str = "checkoutservice"):
    placement = place_pods(rng=np.random.default_rng(0), day="2025-06-06")
    faults = [] if fault_type is None else [Fault(
        uuid=uuid, fault_type=fault_type, level="service", service=service,
        pods=tuple(pods_of(service)), node="", source="", destination="",
        start=HOUR, end=HOUR + timedelta(hours=1), record={})]
    spans, _ = generate_hour(hour_start=HOUR, requests_per_hour=6000, trace_share=1.0, faults=faults,
                             placement=placement,
                             pods_on_node=_pods_on_node(placement), strength=1.0,
                             rng=np.random.default_rng(7))
    return spans


def _place_order(spans) -> np.ndarray:
    return (spans.kind == "server") & (spans.operation == "hipstershop.CheckoutService/PlaceOrder")


def _calls_made(spans, handlers: np.ndarray) -> np.ndarray:
    """How many calls each of the ``handlers`` (a mask over the server spans) made."""
    return np.array([(spans.parent_id == span).sum() for span in spans.span_id[handlers]])


@pytest.mark.parametrize("fault_type", ["code error", "jvm exception"])
def test_a_failing_handler_skips_the_calls_after_its_failure(fault_type: str) -> None:
    healthy = _hour(None)
    full = int(np.median(_calls_made(healthy, _place_order(healthy))))
    assert full >= 6  # cart, catalogue, currency, shipping, payment, email...
    made_by_fault = []
    for uuid in ("a", "b", "c", "d", "e", "f"):
        spans = _hour(fault_type, uuid=uuid)
        failed_own = _place_order(spans) & (spans.origin_callee == "checkoutservice")
        assert failed_own.sum() > 20
        made = set(_calls_made(spans, failed_own).tolist())
        # A fault sits at one place in the handler: every failing request stops there.
        assert len(made) == 1
        made_by_fault.append(made.pop())
        # Handlers that did not fail still make every call.
        assert np.median(_calls_made(spans, _place_order(spans) & (spans.err_kind == 0))) == full
    # Faults sit at different places: before some calls, or after all of them.
    assert min(made_by_fault) < full
    assert len(set(made_by_fault)) >= 3


def test_a_handler_stops_after_a_call_that_failed() -> None:
    healthy = _hour(None)
    full = int(np.median(_calls_made(healthy, _place_order(healthy))))
    spans = _hour("code error", service="cartservice")
    # PlaceOrder's first call is GetCart: where it failed, the handler made no other call.
    get_cart = (spans.kind == "client") & (spans.service == "checkoutservice") & (
        spans.operation == "hipstershop.CartService/GetCart")
    failed_first = _place_order(spans) & np.isin(spans.span_id, spans.parent_id[get_cart & (spans.err_kind > 0)])
    assert failed_first.sum() > 20
    assert set(_calls_made(spans, failed_first).tolist()) == {1}
    # Where it answered, the handler went on with every call.
    answered = _place_order(spans) & np.isin(spans.span_id, spans.parent_id[get_cart & (spans.err_kind == 0)])
    assert np.median(_calls_made(spans, answered)) == full


def test_a_failed_empty_cart_leaves_no_line() -> None:
    """checkoutservice discards EmptyCart's error without a word; its other failures are logged."""
    spans = _hour("code error", service="cartservice")
    empty_failed = (spans.kind == "client") & (spans.operation == "hipstershop.CartService/EmptyCart") & (
        spans.err_kind > 0)
    assert empty_failed.sum() > 5
    logs = build_hour_logs(spans=spans, faults=[], placement=place_pods(rng=np.random.default_rng(0), day="2025-06-06"),
                           hour_start_s=int(HOUR.timestamp()), info_share=0.0, verbose_frontend=False,
                           rng=np.random.default_rng(1))
    checkout = np.array([pod.startswith("checkoutservice") for pod in logs.pod.tolist()])
    cart_lines = sum("could not retrieve cart" in m for m in logs.message[checkout].tolist())
    # One line per PlaceOrder that failed on a cart call (GetCart), none for the discarded EmptyCart.
    failed_orders = _place_order(spans) & (spans.err_kind > 0) & (spans.fail_callee == "cartservice")
    assert cart_lines == failed_orders.sum() > 0


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.name)
def test_templates_list_each_call_before_its_next_sibling(template) -> None:
    """Depth first: a call's whole subtree precedes its next sibling, so the generator can
    decide whether a call failed (its subtree done) before the handler's next call is made."""
    nodes = template.nodes
    for j in range(1, len(nodes)):
        # Every node between a node and its parent descends from that parent (no other branch
        # interleaves), and parents come first.
        assert nodes[j].parent < j
        k = j - 1
        while k != nodes[j].parent:
            assert k > nodes[j].parent
            k = nodes[k].parent
