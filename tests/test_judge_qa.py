"""QA judge: keyword cache, score formula, label agreement metrics."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from judge.agreement import agreement
from judge.groundtruth import InputFileError
from judge.qa import KeywordCache, QAError, QARecord, fill_keyword_cache, load_qa_file, score_qa
from rca.llm.base import LLMReply


class FakeLLM:
    name = "fake"

    def __init__(self, replies: dict[str, list[str]]) -> None:
        self.replies = replies
        self.calls = 0

    def chat(self, messages, *, json_schema=None, schema_name="answer", temperature=None, max_tokens=None, seed=None):
        assert json_schema is not None and "keywords" in json_schema["properties"]
        self.calls += 1
        prompt = messages[-1]["content"]
        keywords = next(v for k, v in self.replies.items() if k in prompt)
        return LLMReply(text=json.dumps({"keywords": keywords}), model="fake", prompt_tokens=1,
                        completion_tokens=1, latency_s=0.0)

    def close(self) -> None:
        pass


class TableEmbedder:
    """Fake embedder with chosen vectors per text."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def embed(self, texts):
        return np.asarray([self.table[t] for t in texts], dtype=np.float32)


REFS = [
    QARecord(id="1", query="q1", answer="network delay on checkoutservice raises rrt"),
    QARecord(id="2", query="q2", answer="pod failure of cartservice"),
]
LLM_REPLIES = {
    "checkoutservice raises": ["network delay", "checkoutservice", "rrt", "invented term"],
    "pod failure": ["pod failure", "cartservice"],
}


def test_keywords_are_cached_across_runs(tmp_path: Path) -> None:
    llm = FakeLLM(LLM_REPLIES)
    for _ in range(2):  # second run: a new cache object reading the same file
        cache = KeywordCache(tmp_path / "kw.json", model_id="fake:m")
        fill_keyword_cache(REFS, cache=cache, llm=llm)
    assert llm.calls == len(REFS)
    assert cache.get(REFS[0].answer) == ["network delay", "checkoutservice", "rrt"]  # invented term dropped
    assert KeywordCache(tmp_path / "kw.json", model_id="other:m").get(REFS[0].answer) is None


def test_score_formula(tmp_path: Path) -> None:
    cache = KeywordCache(tmp_path / "kw.json", model_id="fake:m")
    fill_keyword_cache(REFS, cache=cache, llm=FakeLLM(LLM_REPLIES))
    answers = [QARecord(id="1", query="q1", answer="Network Delay at checkoutservice", label=1)]
    embedder = TableEmbedder({REFS[0].answer: [1.0, 0.0], answers[0].answer: [0.6, 0.8]})
    report = score_qa(REFS, answers, cache=cache, embedder=embedder, keyword_weight=0.6, similarity_weight=0.4)
    first, second = report.per_question
    assert first.keyword_score == pytest.approx(2 / 3)
    assert first.similarity == pytest.approx(0.6)
    assert first.score == pytest.approx(0.6 * 2 / 3 + 0.4 * 0.6)
    assert (second.answered, second.score) == (False, 0.0)
    assert report.score == pytest.approx(first.score / 2)


def test_scoring_requires_cached_keywords(tmp_path: Path) -> None:
    cache = KeywordCache(tmp_path / "kw.json", model_id="fake:m")
    with pytest.raises(QAError, match="keywords not extracted"):
        score_qa(REFS, [], cache=cache, embedder=TableEmbedder({}), keyword_weight=0.6, similarity_weight=0.4)


def test_agreement_hand_computed() -> None:
    scores, labels = [0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]
    result = agreement(scores, labels)
    # AUC: positive/negative pairs (0.35>0.1, 0.8>0.1, 0.8>0.4) = 3 of 4.
    assert result.auc == pytest.approx(0.75)
    # Best F1 at threshold 0.35: predicted {0.4, 0.35, 0.8}, precision 2/3, recall 1.
    assert result.best_f1 == pytest.approx(0.8) and result.best_threshold == pytest.approx(0.35)
    # Pearson: sum(dx*dy) = 0.325, sum(dx^2) = 0.251875, sum(dy^2) = 1.
    assert result.pearson == pytest.approx(0.325 / math.sqrt(0.251875))


def test_agreement_degenerate_cases() -> None:
    result = agreement([0.5, 0.7], [1, 1])
    assert result.auc is None and result.pearson is None and result.best_f1 == pytest.approx(1.0)


def test_load_qa_file_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "gt.jsonl"
    path.write_text('{"id": 1, "query": "q", "answer": "a"}\n{"id": 2, "query": "q"}\n')
    with pytest.raises(InputFileError, match=r"gt.jsonl:2: field 'answer'"):
        load_qa_file(path)
    path.write_text('{"id": 1, "query": "q", "answer": "a", "label": 3}\n')
    with pytest.raises(InputFileError, match=r":1: field 'label'"):
        load_qa_file(path)
