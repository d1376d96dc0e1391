"""bench/index_eval.py (behind scripts/eval_index.py) on synthetic incidents with known truth."""
from __future__ import annotations

import json
from datetime import timedelta

from bench.index_eval import evaluate_index
from index.params import IndexParams
from index.query import known_components
from rca.system import bundled_system
from tests.test_index_query import FAULT_END, FAULT_START, T0, build_world, write_world


def test_eval_reports_hits_and_chance(tmp_path):
    write_world(tmp_path, build_world("service_cpu", seed=4))
    start, end = T0 + timedelta(minutes=FAULT_START, seconds=5), T0 + timedelta(minutes=FAULT_END, seconds=5)
    description = (f"The system experienced an anomaly from {start:%Y-%m-%dT%H:%M:%SZ} to "
                   f"{end:%Y-%m-%dT%H:%M:%SZ}. Please infer the possible cause.")
    (tmp_path / "input.json").write_text(json.dumps([
        {"uuid": "right-1", "Anomaly Description": description},
        {"uuid": "wrong-2", "Anomaly Description": description},
    ]))
    truth = {"fault_category": "stress test", "fault_type": "cpu stress", "instance_type": "service",
             "key_observations": [], "key_metrics": ["pod_cpu_usage"], "fault_description": ["cpu stress"]}
    (tmp_path / "gt.jsonl").write_text("\n".join(json.dumps({**truth, **case}) for case in [
        {"uuid": "right-1", "instance": "emailservice"},
        {"uuid": "wrong-2", "instance": ["shippingservice", "paymentservice"]},
    ]))
    results = evaluate_index(index_dir=tmp_path, input_file=tmp_path / "input.json",
                             gt_file=tmp_path / "gt.jsonl", params=IndexParams())
    cases = results.by_type()["cpu stress"]
    assert len(cases) == 2
    ac1, low, high = results.accuracy(cases, 1)
    assert ac1 == 0.5 and low <= 0.5 <= high  # the second truth is not in the data at all
    assert results.accuracy(cases, 5)[0] == 0.5
    assert 0 < results.chance(cases, 1) < results.chance(cases, 3) < 1
    assert [c.uuid for c in results.misses()] == ["wrong-2"]


def test_the_universe_of_a_system_without_metrics_comes_from_its_logs_and_traces(tmp_path):
    # The chance floor's denominator: a system may have no metrics (or no traces); the components
    # its other telemetry saw are still there to guess among, not none (which made chance 1.0).
    world = build_world("service_cpu", seed=4)
    start, end = T0 + timedelta(minutes=FAULT_START), T0 + timedelta(minutes=FAULT_END)
    write_world(tmp_path / "all", world)
    write_world(tmp_path / "no-metrics", {k: v for k, v in world.items() if not k.startswith("metric_")})
    everything = known_components(tmp_path / "all", start=start, end=end, system=bundled_system())
    without = known_components(tmp_path / "no-metrics", start=start, end=end, system=bundled_system())
    assert "emailservice" in without and "cartservice-1" in without
    assert set(without) <= set(everything) and len(without) > len(everything) / 2
