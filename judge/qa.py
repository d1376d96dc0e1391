"""The keyword + similarity QA judge.

Per question: an evaluation LLM extracts the keywords of the reference answer (cached
per reference text and model); keyword score = keywords found in the candidate answer /
all keywords (case-insensitive); similarity = cosine of the two answers' embeddings;
``score = keyword_weight * keyword + similarity_weight * similarity`` (0.6 / 0.4 by
default). A submission scores the mean over all reference questions; a question
without an answer scores 0. With human 0/1 labels the report adds their agreement.
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from judge.agreement import Agreement, agreement
from judge.embedding import TextEmbedder, row_cosines
from judge.groundtruth import read_unique_jsonl
from rca.atomic import write_json_atomic
from rca.errors import InputError
from rca.llm.base import LLMBackend
from rca.settings import LLMSettings

log = logging.getLogger(__name__)

KEYWORD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "keywords": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 10},
    },
    "required": ["keywords"],
    "additionalProperties": False,
}
_SYSTEM_PROMPT = (
    "You grade answers about microservice incidents. From the reference answer, list the 3 to 8 "
    "key terms a correct answer must contain: component names, metric names, fault types, numbers, "
    "short technical phrases. Copy each term exactly as it is written in the reference answer. "
    'Reply with JSON: {"keywords": ["...", "..."]}.'
)


class QAError(InputError):
    """The QA judge cannot proceed; the message names the file, line or question."""


class QARecord(BaseModel):
    """One line of ground_truth.jsonl or result.jsonl."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    query: str
    answer: str
    label: int | None = Field(default=None, ge=0, le=1)

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_text(cls, value: object) -> object:
        # Ids are numbers in some files and strings in others; they are compared as text.
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class KeywordReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keywords: list[str]


def load_qa_file(path: Path) -> list[QARecord]:
    """Records of a QA JSONL file; ids must be unique."""
    return read_unique_jsonl(path, QARecord, key="id", what="QA")


def evaluation_model_id(llm: LLMSettings) -> str:
    """The name that keys the keyword cache: a different model gives different keywords."""
    model = llm.llm_model if llm.backend == "openai" else llm.embedded_model
    return f"{llm.backend}:{model}"


class KeywordCache:
    """Keywords per (reference text, model), one JSON file, rewritten atomically after each addition."""

    def __init__(self, path: Path, *, model_id: str) -> None:
        self.path = path
        self.model_id = model_id
        self._entries: dict[str, dict[str, Any]] = {}
        if path.exists():
            try:
                self._entries = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise QAError(f"{path}: keyword cache is not valid JSON ({exc.msg}); delete it to rebuild") from exc

    def key(self, reference: str) -> str:
        return hashlib.sha256(f"{self.model_id}\n{reference}".encode()).hexdigest()

    def get(self, reference: str) -> list[str] | None:
        entry = self._entries.get(self.key(reference))
        return None if entry is None else list(entry["keywords"])

    def put(self, reference: str, keywords: list[str], *, dropped: list[str]) -> None:
        self._entries[self.key(reference)] = {"model": self.model_id, "keywords": keywords, "dropped": dropped}
        write_json_atomic(self.path, self._entries)


def _clean_keywords(raw: list[str], reference: str) -> tuple[list[str], list[str]]:
    """Deduplicated keywords that occur in the reference; terms the model invented are dropped."""
    kept: list[str] = []
    dropped: list[str] = []
    lowered_reference = reference.lower()
    for keyword in raw:
        term = " ".join(keyword.split())
        if not term or term.lower() in (k.lower() for k in kept):
            continue
        (kept if term.lower() in lowered_reference else dropped).append(term)
    return kept, dropped


def extract_keywords(query: str, reference: str, *, llm: LLMBackend) -> tuple[list[str], list[str]]:
    """Ask the evaluation LLM for the reference's keywords: (kept, dropped as not in the reference)."""
    messages = [
        {"role": "system", "content": _SYSTEM_PROMPT},
        {"role": "user", "content": f"Question: {query}\nReference answer: {reference}"},
    ]
    reply = llm.chat(messages, json_schema=KEYWORD_SCHEMA, schema_name="keywords")
    try:
        parsed = KeywordReply.model_validate_json(reply.text)
    except ValidationError as exc:
        raise QAError(f"evaluation LLM returned no valid keyword list: {reply.text[:200]!r}") from exc
    return _clean_keywords(parsed.keywords, reference)


def uncached_references(references: list[QARecord], cache: KeywordCache) -> list[QARecord]:
    return [r for r in references if cache.get(r.answer) is None]


def fill_keyword_cache(references: list[QARecord], *, cache: KeywordCache, llm: LLMBackend) -> int:
    """Extract and cache keywords of every reference not yet cached; returns how many were new."""
    todo = uncached_references(references, cache)
    for done, record in enumerate(todo, start=1):
        try:
            kept, dropped = extract_keywords(record.query, record.answer, llm=llm)
        except QAError as exc:
            raise QAError(f"question {record.id}: {exc}") from exc
        if dropped:
            log.info("question %s: dropped keywords not found in the reference: %s", record.id, dropped)
        if not kept:
            log.warning("question %s: no usable keyword; its keyword score will be 0", record.id)
        cache.put(record.answer, kept, dropped=dropped)
        log.info("keywords %d/%d (question %s): %s", done, len(todo), record.id, kept)
    return len(todo)


@dataclass(frozen=True)
class QuestionScore:
    id: str
    answered: bool
    keywords: list[str]
    keywords_found: list[str]
    keyword_score: float
    similarity: float
    score: float
    label: int | None


@dataclass
class QAReport:
    questions: int
    answered: int
    score: float
    keyword_score: float
    similarity: float
    keyword_weight: float
    similarity_weight: float
    evaluation_model: str
    agreement: Agreement | None
    unknown_answer_ids: list[str] = field(default_factory=list)
    per_question: list[QuestionScore] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def keyword_score(answer: str, keywords: list[str]) -> tuple[float, list[str]]:
    lowered = answer.lower()
    found = [k for k in keywords if k.lower() in lowered]
    return (len(found) / len(keywords) if keywords else 0.0), found


def score_qa(
    references: list[QARecord],
    answers: list[QARecord],
    *,
    cache: KeywordCache,
    embedder: TextEmbedder,
    keyword_weight: float,
    similarity_weight: float,
) -> QAReport:
    """Score answers against references; every reference's keywords must already be cached."""
    missing = uncached_references(references, cache)
    if missing:
        raise QAError(f"keywords not extracted for question(s) {[r.id for r in missing]}")
    by_id = {a.id: a for a in answers}
    reference_ids = {r.id for r in references}
    unknown = [a.id for a in answers if a.id not in reference_ids]
    if unknown:
        log.warning("answers for unknown question id(s) ignored: %s", unknown)
    answered = [r for r in references if r.id in by_id]
    similarities: dict[str, float] = {}
    if answered:
        left = embedder.embed([r.answer for r in answered])
        right = embedder.embed([by_id[r.id].answer for r in answered])
        similarities = dict(zip((r.id for r in answered), row_cosines(left, right).tolist()))

    rows: list[QuestionScore] = []
    for reference in references:
        keywords = cache.get(reference.answer) or []
        candidate = by_id.get(reference.id)
        if candidate is None:
            rows.append(QuestionScore(reference.id, False, keywords, [], 0.0, 0.0, 0.0, None))
            continue
        kw_score, found = keyword_score(candidate.answer, keywords)
        similarity = similarities[reference.id]
        rows.append(QuestionScore(
            id=reference.id, answered=True, keywords=keywords, keywords_found=found,
            keyword_score=kw_score, similarity=similarity,
            score=keyword_weight * kw_score + similarity_weight * similarity, label=candidate.label,
        ))
    labelled = [row for row in rows if row.label is not None]
    n = len(rows)
    return QAReport(
        questions=n,
        answered=len(answered),
        score=sum(r.score for r in rows) / n,
        keyword_score=sum(r.keyword_score for r in rows) / n,
        similarity=sum(r.similarity for r in rows) / n,
        keyword_weight=keyword_weight,
        similarity_weight=similarity_weight,
        evaluation_model=cache.model_id,
        agreement=agreement([r.score for r in labelled], [int(r.label) for r in labelled if r.label is not None]) if labelled else None,
        unknown_answer_ids=unknown,
        per_question=rows,
    )
