"""Test-only doubles. Never used on a path a user runs."""
from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from index.confidence import answer_confidence
from index.models import Candidate, ModalityStatus, WindowQueryResult
from index.params import IndexParams
from index.query import ScoredWindow
from knowledge.retrieval import CatalogueEntry, RetrievedDoc
from knowledge.signatures import Observation, Signal, SignatureMatch, rank_signatures
from preprocess.baseline import window_first_minute
from preprocess.detect_log import LogDetector
from preprocess.detect_metric import SERIES_SCHEMA, score_metric_window
from preprocess.schema import LOG_SCHEMA, SPAN_SCHEMA
from rca.llm.base import LLMReply
from rca.system import SystemSpec, bundled_system
from rca.taxonomy import FAULT_TYPES


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
    """Fixed candidates; ``score`` runs the index's metric scorer over ``telemetry``'s series and its
    log detector's build over its logs (what the evidence index would have stored and scored for
    the window; ``MemoryTelemetry`` when none is given)."""

    def __init__(self, candidates: list[Candidate], data_status: list[ModalityStatus] | None = None,
                 params: IndexParams | None = None, telemetry: MemoryTelemetry | None = None) -> None:
        self.candidates = candidates
        self.data_status = data_status or []
        self.params = params or IndexParams()
        self.telemetry = telemetry
        self.queries: list[tuple[datetime, datetime]] = []
        self.scorings: list[tuple[datetime, datetime]] = []

    def score(self, *, start: datetime, end: datetime) -> ScoredWindow:
        self.scorings.append((start, end))
        baseline_start = window_first_minute(start) - timedelta(minutes=self.params.baseline_minutes)
        telemetry = self.telemetry or MemoryTelemetry()
        series = telemetry.metric_series(start=baseline_start, end=end)
        events = {"metric": score_metric_window(series, start=start, end=end, baseline_start=baseline_start,
                                                system=self.params.system, params=self.params.metric)}
        logs = LogDetector(self.params.log).build([{"log": telemetry.logs(start=baseline_start, end=end)}])
        return ScoredWindow(start=start, end=end, scored_end=end, baseline_start=baseline_start, excluded=[],
                            params=self.params, features=logs, core={"metric": series, "log": logs["log_counts"]},
                            events=events, history={}, missing={}, manifest=None)

    def query(self, *, start: datetime, end: datetime, top_k: int) -> WindowQueryResult:
        self.queries.append((start, end))
        candidates = self.candidates[:top_k]
        return WindowQueryResult(start=start, end=end, candidates=candidates, data_status=self.data_status,
                                 confidence=answer_confidence(candidates, relaxed=False, weights=self.params.rank,
                                                              system=self.params.system))


class StaticKnowledge:
    def __init__(self, key_metrics: dict[str, list[str]] | None = None,
                 notes: dict[tuple[str, str], str] | None = None) -> None:
        self._key_metrics = key_metrics or {"cpu stress": ["pod_cpu_usage"], "pod failure": ["pod_processes", "error_ratio"]}
        self._notes = notes or {}  # (fault type, look-alike) -> how the look-alike differs

    def catalogue(self) -> list[CatalogueEntry]:
        return [CatalogueEntry(fault_type=ft, fault_category=FAULT_TYPES[ft], levels=["service", "pod"], key_metrics=m,
                               reason_template="sig") for ft, m in self._key_metrics.items()]

    def key_metrics(self, fault_type: str) -> list[str]:
        return self._key_metrics.get(fault_type, [])

    def retrieve(self, summary: str, *, hints: Sequence[str] = (), k: int = 3) -> list[RetrievedDoc]:
        text = "pod_cpu_usage rises on the stressed pods."
        return [RetrievedDoc(id="cpu-stress", title="CPU stress", kind="fault", fault_type="cpu stress", score=0.8,
                             best_section="Metrics", text=f"## Metrics\n{text}", excerpt=text,
                             key_metrics=["pod_cpu_usage"], reason_template="sig")][:k]

    def signature_matches(self, observations: Sequence[Observation], *, fault_types: Sequence[str]) -> list[SignatureMatch]:
        signatures = {ft: [Signal.parse(f"metric:{m}:up") for m in metrics] for ft, metrics in self._key_metrics.items()}
        return rank_signatures(signatures, observations, fault_types=fault_types)

    def distinctions(self, fault_types: Sequence[str]) -> list[str]:
        return [f"{b} rather than {a}: {self._notes[a, b]}" for a in fault_types for b in fault_types
                if (a, b) in self._notes]


# A ten-minute incident window starting at START, with 30 minutes of baseline before it.
START = datetime(2025, 6, 6, 10, 0, tzinfo=UTC)
MINUTES = [START - timedelta(minutes=30) + timedelta(minutes=i) for i in range(41)]


class MemoryTelemetry:
    """Frames built in memory: cartservice-0 CPU and latency rise in the window, redis-cart logs errors."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def metric_series(self, *, start, end) -> pl.DataFrame:
        self.reads.append("metrics")
        rows = []
        for i, t in enumerate(MINUTES):
            hot = t >= START
            noise = 0.01 * (i % 3)
            rows.append((t, "cartservice-0", "infra_pod", "pod_cpu_usage", (5.0 if hot else 1.0) + noise))
            rows.append((t, "frontend-0", "infra_pod", "pod_cpu_usage", 1.0 + noise))
            rows.append((t, "aiops-k8s-01", "infra_node", "node_cpu_usage_rate", 30.0 + noise))
        return pl.DataFrame(rows, schema=SERIES_SCHEMA, orient="row")

    def logs(self, *, start, end) -> pl.DataFrame:
        self.reads.append("logs")
        rows = []
        for t in MINUTES:
            rows.append((t, "hipstershop", "frontend-0", "aiops-k8s-01", "GET /product 200 in 12ms"))
            if t >= START:
                rows.append((t, "hipstershop", "redis-cart-0", "aiops-k8s-02",
                             "Connection refused to 10.0.0.7:6379 after 3 retries"))
        return pl.DataFrame(rows, schema=LOG_SCHEMA, orient="row")

    def spans(self, *, start, end) -> pl.DataFrame:
        self.reads.append("spans")
        rows = []
        for i, t in enumerate(MINUTES):
            latency = 100_000 if t >= START else 10_000
            rows.append((f"t{i}", "a", None, "/cart", "frontend", "frontend-0", "aiops-k8s-01", "server", None, t, latency + 5000, 0, False))
            rows.append((f"t{i}", "b", "a", "hipstershop.CartService/GetCart", "cartservice", "cartservice-0", "aiops-k8s-02",
                         "server", None, t, latency, 0, False))
        return pl.DataFrame(rows, schema=SPAN_SCHEMA, orient="row")


def external_agent_package(home: Path, *, package: str, module: str, source: str) -> Path:
    """A user's agent written outside the repository (``home/package/module.py``), as
    ``rca bench run --agent package.module:Class`` finds it; returns ``home`` for ``sys.path``."""
    (home / package).mkdir(parents=True)
    (home / package / "__init__.py").write_text("")
    (home / package / f"{module}.py").write_text(source)
    return home


def undeclared_system(*, calls: tuple[tuple[str, str], ...] = ()) -> SystemSpec:
    """The bundled system declaring only ``calls`` (no storage calls): a ranking test's call graph is its own."""
    return bundled_system().model_copy(update={"calls": calls, "storage_calls": ()})
