"""scripts/eval_index.py on synthetic incidents with known truth (AC@k and the chance baseline)."""
from __future__ import annotations

import importlib.util
import json
from datetime import timedelta
from pathlib import Path

from index.params import IndexParams
from tests.test_index_query import FAULT_END, FAULT_START, T0, build_world, write_world

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "eval_index.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("eval_index", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_eval_reports_hits_and_chance(tmp_path):
    eval_index = _load_script()
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
    results = eval_index.evaluate(index_dir=tmp_path, input_file=tmp_path / "input.json",
                                  gt_file=tmp_path / "gt.jsonl", params=IndexParams())
    row = results["per_type"]["cpu stress"]
    assert row["cases"] == 2
    assert row["AC@1"] == 1 and row["AC@5"] == 1  # the second truth is not in the data at all
    assert 0 < row["chance@1"] < row["chance@3"] < 1
    assert len(results["misses"]) == 1 and results["misses"][0].startswith("wrong-2")
