"""Test-only doubles. Never used on a path a user runs."""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from diagnose.prompt import CatalogueLine, SopExcerpt
from index.models import Candidate, EvidenceItem, ModalityStatus, WindowQueryResult
from knowledge.signatures import Signal, SignatureMatch, rank_signatures
from rca.llm.base import LLMReply


class RecordedBackend:
    """Replays recorded model replies in order and remembers every request."""

    name = "recorded"

    def __init__(self, replies: Sequence[str]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    def chat(self, messages, *, json_schema=None, schema_name="answer", temperature=None, max_tokens=None, seed=None) -> LLMReply:
        self.requests.append({"messages": messages, "json_schema": json_schema, "temperature": temperature, "seed": seed})
        if not self.replies:
            raise AssertionError("RecordedBackend ran out of replies")
        text = self.replies.pop(0)
        return LLMReply(text=text, model="recorded", prompt_tokens=sum(len(m["content"]) // 4 for m in messages), completion_tokens=len(text) // 4, latency_s=0.01)

    def close(self) -> None:
        pass


class StaticEvidence:
    def __init__(self, candidates: list[Candidate], data_status: list[ModalityStatus] | None = None) -> None:
        self.candidates = candidates
        self.data_status = data_status or []
        self.queries: list[tuple[datetime, datetime]] = []

    def query(self, *, start: datetime, end: datetime, top_k: int) -> WindowQueryResult:
        self.queries.append((start, end))
        return WindowQueryResult(start=start, end=end, candidates=self.candidates[:top_k],
                                 data_status=self.data_status)


class StaticKnowledge:
    def __init__(self, key_metrics: dict[str, list[str]] | None = None) -> None:
        self._key_metrics = key_metrics or {"cpu stress": ["pod_cpu_usage"], "pod failure": ["pod_processes", "error_ratio"]}

    def catalogue(self) -> list[CatalogueLine]:
        return [CatalogueLine(ft, "service|pod", ", ".join(m), "sig") for ft, m in self._key_metrics.items()]

    def key_metrics(self, fault_type: str) -> list[str]:
        return self._key_metrics.get(fault_type, [])

    def retrieve(self, summary: str, *, hints: Sequence[str], k: int) -> list[SopExcerpt]:
        return [SopExcerpt(doc_id="cpu-stress", title="CPU stress", score=0.8, text="pod_cpu_usage rises on the stressed pods.", fault_type="cpu stress")][:k]

    def signature_matches(self, evidence: Sequence[EvidenceItem], *, fault_types: Sequence[str]) -> list[SignatureMatch]:
        signatures = {ft: [Signal.parse(f"metric:{m}:up") for m in metrics] for ft, metrics in self._key_metrics.items()}
        return rank_signatures(signatures, evidence, fault_types=fault_types)
