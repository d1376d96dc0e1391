"""What the real tuning day taught the simulator in round 22 (docs/generalisation.md).

k6's users wait for their answers: a minute whose answers are slow sends fewer requests (Nezha
2022-08-22: frontend's rrt 39x, its requests 0.23x); before, the simulator drew the same requests
however slow the answers were. And a CPU stress queues calls faster than it grows.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from simulate.effects import POD_ID, CallEffect, server_effects
from simulate.requests import BACKOFF_MIN_SLOWDOWN, closed_loop_share, generate_hour
from simulate.schedule import Fault
from simulate.simulator import _pods_on_node
from simulate.topology import place_pods, pods_of

HOUR = datetime(2025, 6, 6, 2, 0, tzinfo=UTC)
SLOW = (20, 30)  # the fault's minutes of the hour


def _hour(fault_type: str | None, *, service: str = "adservice"):
    placement = place_pods(rng=np.random.default_rng(0), day="2025-06-06")
    faults = [] if fault_type is None else [Fault(
        uuid="f", fault_type=fault_type, level="service", service=service, pods=tuple(pods_of(service)),
        node="", source="", destination="", start=HOUR + timedelta(minutes=SLOW[0]),
        end=HOUR + timedelta(minutes=SLOW[1]), record={})]
    spans, calls = generate_hour(hour_start=HOUR, requests_per_hour=6000, trace_share=1.0, faults=faults,
                                 placement=placement,
                                 pods_on_node=_pods_on_node(placement), strength=1.0,
                                 rng=np.random.default_rng(7))
    return spans, calls


def _per_minute(spans) -> tuple[np.ndarray, np.ndarray]:
    """Requests and their mean answer time (µs) per minute of the hour."""
    roots = spans.parent_id == 0
    minute = ((spans.start_us[roots] / 1e6 - HOUR.timestamp()) // 60).astype(int)
    count = np.bincount(minute, minlength=60)
    return count, np.bincount(minute, weights=spans.dur_us[roots], minlength=60) / np.maximum(count, 1)


@pytest.mark.parametrize(("slowdown", "share"), [(39.0, 0.23), (10.0, 0.55), (1.2, 1.0)])
def test_the_share_of_requests_sent_follows_the_answers_time(slowdown, share):
    usual = 50_000.0  # frontend's usual answer, µs
    assert closed_loop_share(minute_us=np.array([slowdown * usual]), usual_us=usual)[0] == pytest.approx(share, abs=0.01)


def test_slow_answers_cost_requests_in_their_minutes_only():
    healthy, _ = _hour(None)
    slowed, _ = _hour("jvm latency")  # every page waits on adservice
    base, _ = _per_minute(healthy)
    count, mean = _per_minute(slowed)
    inside = slice(SLOW[0] + 1, SLOW[1] - 1)
    usual = float(np.median(mean))
    assert np.median(mean[inside]) >= BACKOFF_MIN_SLOWDOWN * usual  # the fault slows the shop's answers
    expected = closed_loop_share(minute_us=mean[inside], usual_us=usual)
    assert count[inside].sum() < 0.9 * base[inside].sum()
    assert count[inside].sum() == pytest.approx((base[inside] * expected).sum(), rel=0.25)
    outside = np.r_[0:SLOW[0], SLOW[1] + 2:60]
    assert (count[outside] == base[outside]).all()  # the rest of the hour is drawn as before


def test_an_hour_without_slow_answers_is_drawn_as_before():
    a, _ = _hour(None)
    b, _ = _hour("cpu stress", service="emailservice")  # too little of the shop's time to slow its answers
    assert len(a) > 0 and _per_minute(a)[0].sum() == _per_minute(b)[0].sum()


@pytest.mark.parametrize(("effect", "mult"), [(1.0, 3.0), (0.5, 2.0), (4.0, 49.5)])
def test_a_cpu_stress_queues_calls_faster_than_it_grows(effect, mult):
    """A CPU held at its quota: beyond the fixed world's stress the wait grows with the square of the
    excess (real: the culprit's rrt median 50x under cpu stress, Nezha 2022-08-22); the fixed world
    (effect 1) and weaker stresses are as before (1 + 2 x effect)."""
    fault = replace(Fault(uuid="c", fault_type="cpu stress", level="service", service="cartservice",
                          pods=tuple(pods_of("cartservice")), node="", source="", destination="", start=HOUR,
                          end=HOUR + timedelta(minutes=10), record={}), effect=effect)
    eff = CallEffect.neutral(1)
    server_effects(eff, [fault], t_s=np.array([HOUR.timestamp() + 300.0]), service="cartservice",
                   pods=np.array([POD_ID[pods_of("cartservice")[0]]], dtype=np.int16), pods_on_node={}, strength=1.0)
    assert eff.mult[0] == pytest.approx(mult)
