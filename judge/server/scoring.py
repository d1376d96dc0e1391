"""Scoring a stored submission with the judge library, exactly as ``rca judge rca`` / ``rca judge qa`` do.

A contest row becomes a ``ContestSpec`` once (ground truth parsed); a submission's answers go
through ``judge.validation.check_submission`` and ``judge.challenge.score_challenge`` (RCA kind) or
``judge.qa.score_qa`` (QA kind). The stored summary keeps aggregates only: overall figures and the
per-fault-type / per-level breakdown, never a per-case outcome (that would reveal the truth).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from judge.challenge import score_challenge
from judge.embedding import TextEmbedder
from judge.groundtruth import TruthCase, parse_truth, parse_unique_jsonl
from judge.qa import QARecord, score_qa
from judge.server.models import Contest
from judge.validation import check_submission
from rca.challenge import RuleVersion, rule_version
from rca.errors import BackendError

KINDS = ("rca", "qa")


@dataclass(frozen=True)
class ContestSpec:
    id: int
    name: str
    kind: str
    rules: RuleVersion | None  # None for the QA kind
    truth: tuple[TruthCase, ...]
    questions: tuple[QARecord, ...]
    keywords: dict[str, list[str]]
    keyword_model: str

    @property
    def case_ids(self) -> list[str]:
        if self.kind == "qa":
            return [q.id for q in self.questions]
        return [c.uuid for c in self.truth]


def contest_spec(contest: Contest) -> ContestSpec:
    source = f"contest {contest.name} ground truth"
    if contest.kind == "qa":
        return ContestSpec(
            id=contest.id, name=contest.name, kind="qa", rules=None, truth=(),
            questions=tuple(parse_unique_jsonl(contest.truth, QARecord, key="id", what="QA", source=source)),
            keywords=json.loads(contest.qa_keywords or "{}"), keyword_model=contest.qa_model or "",
        )
    return ContestSpec(
        id=contest.id, name=contest.name, kind="rca", rules=rule_version(contest.rules),
        truth=tuple(parse_truth(contest.truth, source=source)), questions=(), keywords={}, keyword_model="",
    )


@dataclass(frozen=True)
class ScoreOutcome:
    score: float
    summary: dict[str, Any]


class ScoringUnavailable(BackendError):
    """A submission cannot be scored with what this server has (e.g. no embedding model)."""


class StoredKeywords:
    """The keyword lookup ``score_qa`` needs, from the keywords stored with the contest (no LLM, no file)."""

    def __init__(self, keywords: dict[str, list[str]], *, model_id: str) -> None:
        self._keywords = keywords
        self.model_id = model_id

    def get(self, reference: str) -> list[str] | None:
        found = self._keywords.get(reference)
        return None if found is None else list(found)


def score_answers(
    spec: ContestSpec, answers: list[dict[str, Any]], *, embedder: TextEmbedder | None, semantic_threshold: float,
    keyword_weight: float, similarity_weight: float,
) -> ScoreOutcome:
    if spec.kind == "qa":
        if embedder is None:
            raise ScoringUnavailable("QA scoring needs the embedding model (similarity), which is not loaded")
        candidates = [QARecord.model_validate(answer) for answer in answers]
        qa = score_qa(list(spec.questions), candidates,
                      cache=StoredKeywords(spec.keywords, model_id=spec.keyword_model),  # type: ignore[arg-type]
                      embedder=embedder, keyword_weight=keyword_weight, similarity_weight=similarity_weight)
        summary = qa.to_json()
        # Per-question rows carry the reference keywords: never shown to teams.
        summary.pop("per_question", None)
        return ScoreOutcome(score=qa.score, summary=summary)
    assert spec.rules is not None
    lines = [json.dumps(answer, ensure_ascii=False) for answer in answers]
    check = check_submission(lines, truth_uuids=spec.case_ids, rules=spec.rules)
    report = score_challenge(list(spec.truth), check, rules=spec.rules, embedder=embedder,
                             semantic_threshold=semantic_threshold)
    # Per-case outcomes stay out (they reveal the truth); dropping them first also skips converting them.
    summary = replace(report, cases=[]).to_json()
    del summary["cases"]
    return ScoreOutcome(score=report.overall.final, summary=summary)
