"""bench.report.model_share: the model's answers scored beside the rules-only answers of the same cases."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from bench.pipeline import print_model_share
from bench.report import model_share
from diagnose.record import RunRecord
from rca.atomic import write_json_atomic
from rca.settings import load_settings

REAL_GT = Path(__file__).resolve().parents[1] / "data" / "reference" / "aiops2025" / "groundtruth.jsonl"


def _answer(uuid: str, component: str, fault_type: str) -> dict:
    return {"uuid": uuid, "component": component, "reason": f"{fault_type} on {component}", "time": "2025-06-05 16:10:02",
            "reasoning_trace": [{"step": 1, "action": "MetricCheck", "observation": f"{component} anomalous"}]}


def test_model_share_scores_both_and_lists_the_differing_cases(tmp_path: Path) -> None:
    truth = [json.loads(line) for line in REAL_GT.read_text().splitlines()[:3]]
    (tmp_path / "gt.jsonl").write_text("".join(json.dumps(t) + "\n" for t in truth))
    runs = tmp_path / "runs" / "result"
    lines = []
    for number, case in enumerate(truth):
        right = case["instance"] if isinstance(case["instance"], str) else case["instance"][-1]
        model = _answer(case["uuid"], right, case["fault_type"])
        # The rules agree with the model except on the first case, where they name a wrong component.
        rules_component = "not-a-component" if number == 0 else right
        rules = _answer(case["uuid"], rules_component, case["fault_type"])
        record = RunRecord(uuid=case["uuid"], window={"start": "", "end": ""}, answer=model,
                           decision={"component": right, "fault_type": case["fault_type"], "reason": ""},
                           rules_answer=rules, rules_fault_type=case["fault_type"],
                           confidence="low" if number == 2 else "high")
        write_json_atomic(runs / f"{case['uuid']}.json", record.model_dump(mode="json"))
        lines.append(json.dumps(model))
    result = tmp_path / "result.jsonl"
    result.write_text("".join(line + "\n" for line in lines))
    settings = load_settings(environ={})

    share = model_share(truth_file=tmp_path / "gt.jsonl", result_file=result, runs_dir=runs, settings=settings)

    assert share.model.overall.la == 1.0
    assert share.rules_only.overall.la < 1.0
    assert [row["uuid"] for row in share.differing] == [truth[0]["uuid"]]
    assert share.differing[0]["component_right"] == {"model": True, "rules": False}
    mean, low, high = share.difference
    assert mean > 0 and low <= mean <= high
    # the per-case gains behind the mean (scripts/bench_diagnose.py --pool pools them across runs)
    assert len(share.gains) == share.records and sum(share.gains.values()) / len(share.gains) == pytest.approx(mean)
    assert share.gains[truth[0]["uuid"]] > 0
    assert (tmp_path / "result.rules-only.jsonl").exists()
    # The model's answers by their recorded confidence: is "high" worth trusting on these cases?
    assert {level: cases for level, (cases, _) in share.by_confidence.items()} == {"high": 2, "low": 1}
    assert share.by_confidence["high"][1][0] == 1.0
    # Printed for an evaluation set, the differing cases are counted, not listed (protocol: its
    # cases are not looked at one by one); for a tuning set they are listed.
    console = Console(record=True, width=200)
    print_model_share(share, console, per_case=False)
    evaluation_text = console.export_text()
    assert "1 case(s) differ" in evaluation_text and truth[0]["uuid"] not in evaluation_text
    assert "by their confidence: high 2 case(s), LA 1.00" in evaluation_text
    print_model_share(share, console, per_case=True)
    assert truth[0]["uuid"] in console.export_text()
