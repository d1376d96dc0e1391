"""Properties of the challenge scorer on the real ground truth and on small synthetic cases."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

from judge.challenge import aggregate, efficiency_of, score_cases, score_challenge
from judge.groundtruth import TruthCase, load_truth
from judge.validation import Answer, Step, check_submission
from rca.challenge import EARLY, LATE, RuleVersion

REAL_GT = Path(__file__).resolve().parents[1] / "data" / "reference" / "aiops2025" / "groundtruth.jsonl"


class HashEmbedder:
    """Fake embedder: a random unit vector per distinct text (same text -> cosine 1, others ~0)."""

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            vector = np.random.default_rng(seed).standard_normal(384)
            rows.append(vector / np.linalg.norm(vector))
        return np.asarray(rows, dtype=np.float32)


def _perfect_line(case: dict, rules: RuleVersion) -> dict:
    steps = []
    for point in case["key_observations"]:
        keyword = point["keyword"][0]
        if point["type"] == "log":
            steps.append({"action": "LogSearch", "observation": f"log search finds {keyword}"})
        elif point["type"] == "trace":
            steps.append({"action": "TraceAnalysis", "observation": f"slow spans at {keyword}"})
        else:
            steps.append({"action": "MetricCheck", "observation": f"{keyword} is anomalous"})
    steps = steps or [{"action": "Summary", "observation": "nothing"}]
    instance = case["instance"] if isinstance(case["instance"], str) else case["instance"][-1]
    line = {
        "uuid": case["uuid"], "component": instance, "reason": case["fault_type"],
        "reasoning_trace": [{"step": i, **s} for i, s in enumerate(steps, start=1)],
    }
    if rules is EARLY:
        line["time"] = "2025-06-05 16:10:02"
    return line


def _real_rows() -> list[dict]:
    return [json.loads(line) for line in REAL_GT.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("rules", [EARLY, LATE], ids=["early", "late"])
def test_perfect_submission_scores_one(rules: RuleVersion) -> None:
    truth = load_truth(REAL_GT)
    lines = [json.dumps(_perfect_line(row, rules)) for row in _real_rows()]
    check = check_submission(lines, truth_uuids=[c.uuid for c in truth], rules=rules)
    assert check.valid, check.errors[:3]
    report = score_challenge(truth, check, rules=rules, embedder=HashEmbedder(), semantic_threshold=0.6)
    overall = report.overall
    assert (overall.la, overall.ta, overall.explainability) == (1.0, 1.0, 1.0)
    assert overall.ta_keyword < 1.0  # the fault type name alone is not always a key metric
    assert all(score.la == 1.0 for score in report.by_fault_type.values())
    assert set(report.by_level) == {"service", "pod", "node"}


@pytest.mark.parametrize("rules", [EARLY, LATE], ids=["early", "late"])
def test_all_wrong_submission_scores_zero(rules: RuleVersion) -> None:
    truth = load_truth(REAL_GT)
    lines = []
    for row in _real_rows():
        line = _perfect_line(row, rules)
        line.update(component="no-such-component", reason="zzzz qqqq")
        lines.append(json.dumps(line))
    check = check_submission(lines, truth_uuids=[c.uuid for c in truth], rules=rules)
    report = score_challenge(truth, check, rules=rules, embedder=HashEmbedder(), semantic_threshold=0.6)
    assert (report.overall.la, report.overall.ta, report.overall.efficiency) == (0.0, 0.0, 0.0)
    assert report.overall.final == pytest.approx(10.0 * report.overall.explainability)


def _truth(**fields) -> TruthCase:
    base = {"uuid": "c1", "fault_type": "cpu stress", "instance_type": "service", "instance": "emailservice",
            "key_observations": [], "key_metrics": ["pod_cpu_usage"], "fault_description": ["high CPU"]}
    base.update(fields)
    return TruthCase.model_validate(base)


def _answer(component="emailservice", reason="pod_cpu_usage high", observations=(), uuid="c1") -> Answer:
    steps = tuple(Step(i, "MetricCheck", text) for i, text in enumerate(observations, start=1))
    return Answer(uuid=uuid, component=component, reason=reason, steps=steps)


@pytest.mark.parametrize("component, right", [
    ("checkoutservice", True), ("shippingservice", True), ("frontend", False), ("checkoutservice-0", False),
])
def test_list_instance_any_element_counts(component: str, right: bool) -> None:
    truth = [_truth(instance=["checkoutservice", "shippingservice"])]
    (outcome,) = score_cases(truth, {"c1": _answer(component=component)}, rules=EARLY, embedder=None,
                             semantic_threshold=0.6)
    assert outcome.component_right is right


def _one(truth: TruthCase, answer: Answer, rules: RuleVersion, embedder=None):
    (outcome,) = score_cases([truth], {truth.uuid: answer}, rules=rules, embedder=embedder, semantic_threshold=0.6)
    return outcome


LONG_PREFIX = " ".join(["word"] * 20)


@pytest.mark.parametrize("reason, early_hit, late_hit", [
    (f"{LONG_PREFIX} pod_cpu_usage", True, False),  # late: first 20 words only
    ("memory leak; pod_cpu_usage", False, True),  # early: first reason only
    ("POD_CPU_USAGE saturated", True, True),  # case-insensitive keyword
])
def test_reason_truncation_per_rules(reason: str, early_hit: bool, late_hit: bool) -> None:
    truth = _truth()
    assert _one(truth, _answer(reason=reason), EARLY).reason_keyword_right is early_hit
    assert _one(truth, _answer(reason=reason), LATE).reason_keyword_right is late_hit


@pytest.mark.parametrize("observation, early_hit, late_hit", [
    ("x" * 101 + " pod_cpu_usage", False, True),  # early scores the first 100 characters
    (" ".join(["a"] * 20) + " pod_cpu_usage", True, False),  # late scores the first 20 words
    ("Pod CPU usage went up", True, False),  # fuzzy KPI name only under early rules
    ("pod_cpu_usage went up", True, True),
])
def test_metric_evidence_per_rules(observation: str, early_hit: bool, late_hit: bool) -> None:
    truth = _truth(key_observations=[{"type": "metric", "keyword": ["pod_cpu_usage"]}])
    answer = _answer(observations=[observation])
    assert _one(truth, answer, EARLY).hits["metric"] == int(early_hit)
    assert _one(truth, answer, LATE).hits["metric"] == int(late_hit)


@pytest.mark.parametrize("action, observation, hit", [
    ("LogSearch", "found Connection refused", True),
    ("MetricCheck", "logs show Connection refused", True),
    ("MetricCheck", "Connection refused", False),  # no log search mentioned
    ("LogSearch", "nothing relevant", False),
])
def test_log_evidence_needs_log_search_and_keyword(action: str, observation: str, hit: bool) -> None:
    truth = _truth(key_observations=[{"type": "log", "keyword": ["Connection", "refused"]}])
    answer = Answer(uuid="c1", component="emailservice", reason="x", steps=(Step(1, action, observation),))
    assert _one(truth, answer, EARLY).hits["log"] == int(hit)


def test_trace_evidence_names_component() -> None:
    truth = _truth(key_observations=[{"type": "trace", "subtype": "latency_anomalies", "keyword": ["frontend"]}])
    assert _one(truth, _answer(observations=["Frontend spans slow"]), LATE).hits["trace"] == 1
    assert _one(truth, _answer(observations=["cartservice spans slow"]), LATE).hits["trace"] == 0


def test_efficiency_population_differs_between_rules() -> None:
    truth = [_truth(uuid="a"), _truth(uuid="b")]
    answers = {
        "a": _answer(uuid="a", reason="wrong guess", observations=["o"] * 20),  # component right, reason wrong
        "b": _answer(uuid="b", reason="pod_cpu_usage", observations=["o"] * 5),  # both right
    }
    for rules, expected_apl in ((EARLY, 5.0), (LATE, 12.5)):
        outcomes = score_cases(truth, answers, rules=rules, embedder=None, semantic_threshold=0.6)
        score = aggregate(outcomes, rules=rules)
        assert score.apl == expected_apl
        assert score.efficiency == pytest.approx(min(1.0, math.exp(-(expected_apl - 5) / 5)))


@pytest.mark.parametrize("apl, expected", [(None, 0.0), (3.0, 1.0), (5.0, 1.0), (10.0, math.exp(-1))])
def test_efficiency_formula(apl, expected) -> None:
    assert efficiency_of(apl) == pytest.approx(expected)


def test_semantic_step_and_threshold() -> None:
    truth = _truth(key_metrics=[], fault_description=["high CPU utilization"])
    embedder = HashEmbedder()
    same = _one(truth, _answer(reason="high CPU utilization"), EARLY, embedder)
    other = _one(truth, _answer(reason="disk is full"), EARLY, embedder)
    assert (same.reason_keyword_right, same.reason_semantic_right) == (False, True)
    assert same.reason_similarity == pytest.approx(1.0, abs=1e-5)
    assert other.reason_semantic_right is False


def test_older_ground_truth_variant(tmp_path: Path) -> None:
    row = {"uuid": "old-1", "fault_category": "node fault", "fault_type": "node cpu", "instance_type": "node",
           "service": "", "instance": "aiops-k8s-03", "source": "", "destination": "",
           "start_time": "2025-06-05T16:10:02Z", "end_time": "2025-06-05T16:31:02Z",
           "key_observations": [{"type": "metric", "keyword": ["node_cpu_usage_rate"]}]}
    path = tmp_path / "gt.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (case,) = load_truth(path)
    assert case.fault_type == "node cpu stress"
    assert case.key_metrics == [] and case.fault_description == []
    outcome = _one(case, _answer(uuid="old-1", component="aiops-k8s-03", reason="node cpu stress"), EARLY, HashEmbedder())
    assert outcome.component_right and outcome.reason_semantic_right
