"""Benchmark reports: challenge score through ``judge/`` plus cost figures from run records."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from diagnose.record import RunRecord
from judge.challenge import ChallengeReport, score_challenge
from judge.groundtruth import load_truth
from judge.rules import rule_version
from judge.validation import check_submission_file
from knowledge.embedding import load_embedder
from rca.settings import Settings


def score_file(*, truth_file: Path, result_file: Path, settings: Settings) -> ChallengeReport:
    rules = rule_version(settings.judge.rules)
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
