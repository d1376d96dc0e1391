"""The APM counts every request; the tracer keeps a sample of whole traces.

Before round 25 the simulated APM was the sampled traces' calls scaled up, so each pod's
request count carried the sample's noise (MAD/median 0.19-1.0 on the randomised seeds, where
Nezha's real tuning day shows 0.06: scripts/real_vs_sim.py).
"""
from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from simulate.apm import ApmDay
from simulate.requests import generate_hour
from simulate.simulator import _pods_on_node
from simulate.topology import APM_PODS, place_pods

HOUR = datetime(2025, 6, 6, 2, 0, tzinfo=UTC)
DAY_START = datetime(2025, 6, 5, 16, 0, tzinfo=UTC)  # 2025-06-06 00:00 China time


def _hour(*, requests_per_hour: float, trace_share: float, latency_jitter: float = 0.0):
    placement = place_pods(rng=np.random.default_rng(0), day="2025-06-06")
    return generate_hour(hour_start=HOUR, requests_per_hour=requests_per_hour, trace_share=trace_share, faults=[],
                         placement=placement, pods_on_node=_pods_on_node(placement), strength=1.0,
                         rng=np.random.default_rng(3), latency_jitter=latency_jitter)


def _request_noise(calls, *, scale_up: float, kpi: str = "request") -> float:
    """Median over the APM pods of their per-minute ``kpi`` values' MAD/median."""
    apm = ApmDay(day_start_s=int(DAY_START.timestamp()), scale_up=scale_up)
    apm.add_hour(hour_start_s=int(HOUR.timestamp()), calls=calls)
    noise = []
    for pod in APM_PODS:
        counts = apm.pod_rows(pod=pod, faults=[]).columns[kpi].astype(float)
        median = float(np.median(counts))
        if median > 0:
            noise.append(float(np.median(np.abs(counts - median))) / median)
    return float(np.median(noise))


def test_traces_are_a_sample_of_whole_requests() -> None:
    spans, calls = _hour(requests_per_hour=20000, trace_share=0.1)
    everything, all_calls = _hour(requests_per_hour=20000, trace_share=1.0)
    roots = int((spans.http_method != "").sum())
    all_roots = int((everything.http_method != "").sum())
    assert 0.08 * all_roots < roots < 0.12 * all_roots
    # The APM sees every call whichever traces were kept.
    assert abs(len(calls.t_s) - len(all_calls.t_s)) < 0.02 * len(all_calls.t_s)
    # A kept trace is kept whole: every span's parent is among the spans.
    parents = spans.parent_id[spans.parent_id != 0]
    assert np.isin(parents, spans.span_id).all()


def test_request_counts_are_steady_however_few_traces_are_kept() -> None:
    _, calls = _hour(requests_per_hour=30000, trace_share=0.05)
    steady = _request_noise(calls, scale_up=2.0)
    _, sampled_calls = _hour(requests_per_hour=1500, trace_share=1.0)
    from_samples = _request_noise(sampled_calls, scale_up=40.0)
    assert steady < 0.1 < from_samples


def test_a_pods_latency_wobbles_from_minute_to_minute() -> None:
    """Averages over hundreds of calls a minute are smooth; real pods' are not (rrt MAD/median 0.12)."""
    _, smooth = _hour(requests_per_hour=30000, trace_share=0.05)
    _, wobbly = _hour(requests_per_hour=30000, trace_share=0.05, latency_jitter=0.3)
    assert _request_noise(smooth, scale_up=2.0, kpi="rrt") < 0.05
    assert 0.07 < _request_noise(wobbly, scale_up=2.0, kpi="rrt") < 0.2
