"""Benchmark reports: challenge score through ``judge/`` plus cost figures from run records."""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.intervals import bootstrap_interval, bootstrap_statistic, paired_difference_interval
from diagnose.record import RunRecord
from judge.challenge import CaseOutcome, ChallengeReport, aggregate, score_challenge
from judge.groundtruth import load_truth
from judge.validation import check_submission_file
from knowledge.embedding import load_embedder
from rca.atomic import write_text_atomic
from rca.challenge import RuleVersion, rule_version
from rca.settings import Settings


def score_file(*, truth_file: Path, result_file: Path, settings: Settings) -> ChallengeReport:
    rules = rule_version(settings.challenge.rules)
    truth = load_truth(truth_file)
    check = check_submission_file(result_file, truth_uuids=[c.uuid for c in truth], rules=rules)
    return score_challenge(truth, check, rules=rules, embedder=load_embedder(settings.embedding),
                           semantic_threshold=settings.judge.semantic_threshold)


def run_costs(runs_dir: Path) -> dict[str, Any]:
    """Per-case means over the run records in ``runs_dir``."""
    records = [r for r in RunRecord.load_dir(runs_dir) if r.status == "answered"]
    if not records:
        return {"cases": 0}

    def mean(values: list[float]) -> float:
        return round(statistics.fmean(values), 2) if values else 0.0

    return {
        "cases": len(records),
        "agreement_with_index": mean([1.0 if r.agreed_with_index else 0.0 for r in records]),
        "llm_calls_per_case": mean([r.usage.calls for r in records]),
        "prompt_tokens_per_case": mean([r.usage.prompt_tokens for r in records]),
        "max_prompt_tokens_per_call": max(r.usage.prompt_tokens // max(1, r.usage.calls) for r in records),
        "completion_tokens_per_case": mean([r.usage.completion_tokens for r in records]),
        "seconds_per_case": mean([r.timings_s["total_s"] for r in records]),
        "llm_seconds_per_case": mean([r.timings_s["llm_s"] for r in records]),
        "repaired_cases": sum(1 for r in records if r.repaired),
    }


@dataclass
class ModelShare:
    """The model's answers against the same cases answered by the rules alone (index top-1 +
    its best SOP fit): scores of both, the paired difference with its interval, and the cases
    where they differ with who was right."""

    model: ChallengeReport
    rules_only: ChallengeReport
    difference: tuple[float, float, float]  # mean per-case (LA + TA)/2 gain of the model, 95% interval
    differing: list[dict[str, Any]]
    records: int  # cases with a recorded rules-only answer (pipeline mode records them)
    gains: dict[str, float] = field(default_factory=dict)  # per case: model points - rules-only points
    # The model's answers by their confidence ("high", "low", "none"): cases and LA with its 95% interval.
    by_confidence: dict[str, tuple[int, tuple[float, float, float]]] = field(default_factory=dict)


def _case_points(report: ChallengeReport) -> dict[str, float]:
    return {c.uuid: (float(c.component_right) + float(c.reason_right)) / 2 for c in report.cases}


def model_share(*, truth_file: Path, result_file: Path, runs_dir: Path, settings: Settings) -> ModelShare:
    """Score ``result_file`` and, beside it, the rules-only answers recorded in the run records."""
    records = {r.uuid: r for r in RunRecord.load_dir(runs_dir) if r.status == "answered" and r.rules_answer}
    ablation_file = result_file.with_name(f"{result_file.stem}.rules-only.jsonl")
    lines = [json.dumps(r.rules_answer.to_submission(rules=rule_version(settings.challenge.rules)), ensure_ascii=False)
             for r in records.values() if r.rules_answer]
    write_text_atomic(ablation_file, "".join(line + "\n" for line in lines))
    model = score_file(truth_file=truth_file, result_file=result_file, settings=settings)
    rules = score_file(truth_file=truth_file, result_file=ablation_file, settings=settings)
    model_points, rule_points = _case_points(model), _case_points(rules)
    shared = sorted(set(model_points) & set(rule_points) & set(records))
    difference = paired_difference_interval([model_points[u] for u in shared], [rule_points[u] for u in shared])
    outcomes = {c.uuid: c for c in model.cases}
    rule_outcomes = {c.uuid: c for c in rules.cases}
    differing = []
    for uuid in shared:
        record = records[uuid]
        model_component = record.answer.component if record.answer else None
        rules_component = record.rules_answer.component if record.rules_answer else None
        model_type = record.decision.fault_type if record.decision else None
        rules_type = record.rules_fault_type
        if model_component == rules_component and model_type == rules_type:
            continue
        differing.append({
            "uuid": uuid, "fault_type": outcomes[uuid].fault_type,
            "model": f"{model_component} / {model_type}", "rules": f"{rules_component} / {rules_type}",
            "model_points": model_points[uuid], "rules_points": rule_points[uuid],
            "component_right": {"model": outcomes[uuid].component_right, "rules": rule_outcomes[uuid].component_right},
        })
    return ModelShare(model=model, rules_only=rules, difference=difference, differing=differing, records=len(shared),
                      gains={u: model_points[u] - rule_points[u] for u in shared},
                      by_confidence=_la_by_confidence(model, records=records))


def _la_by_confidence(report: ChallengeReport, *, records: dict[str, RunRecord]
                      ) -> dict[str, tuple[int, tuple[float, float, float]]]:
    """LA of the answers of each confidence (index.confidence; "none": no candidate), with its 95% interval."""
    groups: dict[str, list[float]] = {}
    for case in report.cases:
        record = records.get(case.uuid)
        if record is not None:
            groups.setdefault(record.confidence or "none", []).append(float(case.component_right))
    result: dict[str, tuple[int, tuple[float, float, float]]] = {}
    for level in ("high", "low", "none"):
        rights = groups.get(level, [])
        if rights:
            low, high = bootstrap_interval(rights)
            result[level] = (len(rights), (sum(rights) / len(rights), low, high))
    return result


@dataclass(frozen=True)
class ScoreInterval:
    """Final, LA and TA of a group of cases, each as (point, low, high) of a 95% case bootstrap."""

    group: str
    cases: int
    final: tuple[float, float, float]
    la: tuple[float, float, float]
    ta: tuple[float, float, float]


def score_interval(group: str, outcomes: list[CaseOutcome], *, rules: RuleVersion) -> ScoreInterval:
    """Resample whole cases and re-aggregate them as the judge does, so the final's interval
    carries its efficiency and explainability terms too."""
    def figure(pick: str) -> tuple[float, float, float]:
        def statistic(sample: list[CaseOutcome]) -> float:
            return float(getattr(aggregate(sample, rules=rules), pick))
        low, high = bootstrap_statistic(outcomes, statistic)
        return statistic(outcomes), low, high

    return ScoreInterval(group=group, cases=len(outcomes), final=figure("final"), la=figure("la"), ta=figure("ta"))


def score_intervals(outcomes: list[CaseOutcome], *, rules: RuleVersion) -> list[ScoreInterval]:
    """One row per fault type, then ``ALL``: the per-fault-type table with its 95% intervals."""
    by_type: dict[str, list[CaseOutcome]] = {}
    for outcome in outcomes:
        by_type.setdefault(outcome.fault_type, []).append(outcome)
    rows = [score_interval(fault_type, group, rules=rules) for fault_type, group in sorted(by_type.items())]
    return rows + [score_interval("ALL", outcomes, rules=rules)]


def interval_cell(value: tuple[float, float, float], *, scale: float = 1.0, digits: int = 2) -> str:
    point, low, high = (scale * v for v in value)
    return f"{point:.{digits}f} [{low:.{digits}f}-{high:.{digits}f}]"
