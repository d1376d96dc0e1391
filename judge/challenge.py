"""Scoring of a challenge submission against the ground truth (2025 rules, both versions).

Per case we decide location (LA), reason (TA: keyword, then semantic), path length and
evidence hits (``CaseOutcome``); ``aggregate`` turns any set of outcomes into the
challenge figures, so the overall score and every breakdown use one formula:
``Final = 100 * (0.4 LA + 0.4 TA + 0.1 Efficiency + 0.1 Explainability)``.
"""
from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from judge.embedding import TextEmbedder
from judge.groundtruth import KeyObservation, TruthCase
from judge.rules import names_kpi, scored_observation, scored_reason
from judge.validation import Answer, Step, SubmissionCheck
from rca.challenge import RuleVersion

log = logging.getLogger(__name__)

WEIGHTS = {"la": 0.4, "ta": 0.4, "efficiency": 0.1, "explainability": 0.1}
OBSERVATION_TYPES = ("metric", "log", "trace")
# "an observation mentions a log search": the word log/logs/LogSearch in the action or observation.
_MENTIONS_LOGS = re.compile(r"\blog", re.IGNORECASE)


@dataclass(frozen=True)
class CaseOutcome:
    uuid: str
    fault_type: str
    level: str
    answered: bool
    component_right: bool
    reason_keyword_right: bool
    # None where the semantic step did not run (keyword already hit, no answer, or semantic off).
    reason_similarity: float | None
    reason_semantic_right: bool
    steps: int
    points: dict[str, int]
    hits: dict[str, int]

    @property
    def reason_right(self) -> bool:
        return self.reason_keyword_right or self.reason_semantic_right


@dataclass(frozen=True)
class ChallengeScore:
    cases: int
    answered: int
    la: float
    ta_keyword: float
    ta: float  # keyword + semantic (equals ta_keyword when the semantic step is off)
    efficiency: float
    apl: float | None
    efficiency_population: int
    explainability: float
    evidence_points: int
    evidence_hits: int
    explainability_by_type: dict[str, float | None]
    final: float
    final_keyword_only: float


@dataclass
class ChallengeReport:
    rules: str
    semantic: bool
    semantic_threshold: float | None
    valid: bool
    errors: list[str]
    warnings: list[str]
    overall: ChallengeScore
    by_fault_type: dict[str, ChallengeScore]
    by_level: dict[str, ChallengeScore]
    cases: list[CaseOutcome] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for outcome in data["cases"]:
            outcome["reason_right"] = outcome["reason_keyword_right"] or outcome["reason_semantic_right"]
        return data


def _final(la: float, ta: float, efficiency: float, explainability: float) -> float:
    return 100.0 * (
        WEIGHTS["la"] * la + WEIGHTS["ta"] * ta + WEIGHTS["efficiency"] * efficiency
        + WEIGHTS["explainability"] * explainability
    )


def efficiency_of(apl: float | None) -> float:
    """``min(1, exp(-(APL - 5) / 5))``; 0 when nobody qualified (``apl`` is None)."""
    return 0.0 if apl is None else min(1.0, math.exp(-(apl - 5.0) / 5.0))


def aggregate(outcomes: list[CaseOutcome], *, rules: RuleVersion) -> ChallengeScore:
    n = len(outcomes)
    if n == 0:
        raise ValueError("cannot aggregate zero cases")
    la = sum(o.component_right for o in outcomes) / n
    ta_keyword = sum(o.reason_keyword_right for o in outcomes) / n
    ta = sum(o.reason_right for o in outcomes) / n
    population = [
        o for o in outcomes if o.component_right and (o.reason_right or not rules.efficiency_needs_reason)
    ]
    apl = sum(o.steps for o in population) / len(population) if population else None
    efficiency = efficiency_of(apl)
    points = sum(sum(o.points.values()) for o in outcomes)
    hits = sum(sum(o.hits.values()) for o in outcomes)
    explainability = hits / points if points else 0.0
    by_type: dict[str, float | None] = {}
    for kind in OBSERVATION_TYPES:
        kind_points = sum(o.points.get(kind, 0) for o in outcomes)
        by_type[kind] = sum(o.hits.get(kind, 0) for o in outcomes) / kind_points if kind_points else None
    return ChallengeScore(
        cases=n,
        answered=sum(o.answered for o in outcomes),
        la=la,
        ta_keyword=ta_keyword,
        ta=ta,
        efficiency=efficiency,
        apl=apl,
        efficiency_population=len(population),
        explainability=explainability,
        evidence_points=points,
        evidence_hits=hits,
        explainability_by_type=by_type,
        final=_final(la, ta, efficiency, explainability),
        final_keyword_only=_final(la, ta_keyword, efficiency, explainability),
    )


def component_right(answer: Answer, truth: TruthCase) -> bool:
    """Exact string match; where the truth lists several instances, any of them counts."""
    return answer.component in truth.instance


def reason_keyword_hit(reason: str, truth: TruthCase) -> bool:
    lowered = reason.lower()
    return any(keyword.strip() and keyword.strip().lower() in lowered for keyword in truth.key_metrics)


def observation_hit(point: KeyObservation, steps: Iterable[Step], rules: RuleVersion) -> bool:
    """Whether any step's scored observation supports one evidence point."""
    keywords = [k for k in point.keyword if k.strip()]
    for step in steps:
        text = scored_observation(step.observation, rules)
        lowered = text.lower()
        if point.type == "metric":
            if any(names_kpi(text, kpi, rules) for kpi in keywords):
                return True
        elif point.type == "log":
            mentions_logs = bool(_MENTIONS_LOGS.search(step.action) or _MENTIONS_LOGS.search(text))
            if mentions_logs and any(k.lower() in lowered for k in keywords):
                return True
        elif any(k.lower() in lowered for k in keywords):  # trace: names one of its components
            return True
    return False


class _SemanticMatcher:
    """Max cosine between a reason and the truth's fault type and descriptions; texts embedded once."""

    def __init__(self, embedder: TextEmbedder) -> None:
        self._embedder = embedder
        self._vectors: dict[str, np.ndarray] = {}

    def prepare(self, texts: Iterable[str]) -> None:
        todo = sorted({t for t in texts if t not in self._vectors})
        if not todo:
            return
        matrix = np.asarray(self._embedder.embed(todo), dtype=np.float64)
        if matrix.shape[0] != len(todo):
            raise ValueError(f"embedder returned {matrix.shape[0]} vectors for {len(todo)} texts")
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
        self._vectors.update(zip(todo, matrix))

    def similarity(self, reason: str, references: list[str]) -> float:
        return max(float(self._vectors[reason] @ self._vectors[ref]) for ref in references)


def _references(truth: TruthCase) -> list[str]:
    return [truth.fault_type, *[d for d in truth.fault_description if d.strip()]]


def score_cases(
    truth: list[TruthCase],
    answers: dict[str, Answer],
    *,
    rules: RuleVersion,
    embedder: TextEmbedder | None,
    semantic_threshold: float,
) -> list[CaseOutcome]:
    """One outcome per truth case; a case without a (valid) answer scores zero everywhere."""
    reasons = {c.uuid: scored_reason(answers[c.uuid].reason, rules) for c in truth if c.uuid in answers}
    keyword_hits = {c.uuid: reason_keyword_hit(reasons[c.uuid], c) for c in truth if c.uuid in reasons}
    matcher = _SemanticMatcher(embedder) if embedder is not None else None
    needs_semantic = [c for c in truth if c.uuid in reasons and not keyword_hits[c.uuid]]
    if matcher is not None and needs_semantic:
        log.info("semantic reason check for %d case(s) without a keyword hit", len(needs_semantic))
        matcher.prepare([reasons[c.uuid] for c in needs_semantic])
        matcher.prepare([ref for c in needs_semantic for ref in _references(c)])

    outcomes: list[CaseOutcome] = []
    for case in truth:
        points = {kind: sum(p.type == kind for p in case.key_observations) for kind in OBSERVATION_TYPES}
        answer = answers.get(case.uuid)
        if answer is None:
            outcomes.append(CaseOutcome(
                uuid=case.uuid, fault_type=case.fault_type, level=case.instance_type or "unknown",
                answered=False, component_right=False, reason_keyword_right=False, reason_similarity=None,
                reason_semantic_right=False, steps=0, points=points, hits=dict.fromkeys(OBSERVATION_TYPES, 0),
            ))
            continue
        similarity = None
        if matcher is not None and not keyword_hits[case.uuid]:
            similarity = matcher.similarity(reasons[case.uuid], _references(case))
        hits = {kind: 0 for kind in OBSERVATION_TYPES}
        for point in case.key_observations:
            hits[point.type] += observation_hit(point, answer.steps, rules)
        outcomes.append(CaseOutcome(
            uuid=case.uuid,
            fault_type=case.fault_type,
            level=case.instance_type or "unknown",
            answered=True,
            component_right=component_right(answer, case),
            reason_keyword_right=keyword_hits[case.uuid],
            reason_similarity=similarity,
            reason_semantic_right=similarity is not None and similarity >= semantic_threshold,
            steps=len(answer.steps),
            points=points,
            hits=hits,
        ))
    return outcomes


def _breakdown(outcomes: list[CaseOutcome], key: Callable[[CaseOutcome], str], rules: RuleVersion) -> dict[str, ChallengeScore]:
    groups: dict[str, list[CaseOutcome]] = {}
    for outcome in outcomes:
        groups.setdefault(key(outcome), []).append(outcome)
    return {name: aggregate(groups[name], rules=rules) for name in sorted(groups)}


def score_challenge(
    truth: list[TruthCase],
    check: SubmissionCheck,
    *,
    rules: RuleVersion,
    embedder: TextEmbedder | None,
    semantic_threshold: float,
) -> ChallengeReport:
    """Full report: validation issues, overall figures, per fault type and per level.

    ``embedder=None`` switches the semantic reason step off (keyword-only TA); the
    report says so in ``semantic``.
    """
    outcomes = score_cases(truth, check.answers, rules=rules, embedder=embedder,
                           semantic_threshold=semantic_threshold)
    return ChallengeReport(
        rules=rules.name,
        semantic=embedder is not None,
        semantic_threshold=semantic_threshold if embedder is not None else None,
        valid=check.valid,
        errors=[str(issue) for issue in check.errors],
        warnings=[str(issue) for issue in check.warnings],
        overall=aggregate(outcomes, rules=rules),
        by_fault_type=_breakdown(outcomes, lambda o: o.fault_type, rules),
        by_level=_breakdown(outcomes, lambda o: o.level, rules),
        cases=outcomes,
    )
