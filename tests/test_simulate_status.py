"""The frontend's answer carries its own request's HTTP status: 500 where that request failed.

Before round 25 the status of each root span was read from another request's outcome (an index
per span used as an index per request), so failed requests answered 302 and fine ones 500.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from simulate.requests import generate_hour
from simulate.schedule import Fault
from simulate.simulator import _pods_on_node
from simulate.topology import place_pods, pods_of

HOUR = datetime(2025, 6, 6, 2, 0, tzinfo=UTC)


def test_each_answer_has_its_own_status() -> None:
    placement = place_pods(rng=np.random.default_rng(0), day="2025-06-06")
    faults = [Fault(uuid="f", fault_type="code error", level="service", service="cartservice",
                    pods=tuple(pods_of("cartservice")), node="", source="", destination="",
                    start=HOUR, end=HOUR + timedelta(hours=1), record={})]
    spans, _ = generate_hour(hour_start=HOUR, requests_per_hour=6000, trace_share=1.0, faults=faults,
                             placement=placement,
                             pods_on_node=_pods_on_node(placement), strength=1.0, rng=np.random.default_rng(7))
    root = spans.http_method != ""
    failed = root & (spans.err_kind > 0)
    assert 50 < failed.sum() < root.sum() - 50
    assert (spans.http_status[failed] == 500).all()
    assert (spans.http_status[root & ~failed] != 500).all()
