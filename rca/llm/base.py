"""The one interface every LLM backend implements.

Backends: ``rca.llm.openai_backend`` (any OpenAI-compatible endpoint) and
``rca.llm.embedded`` (llama.cpp in-process via xllamacpp, which itself serves the
OpenAI protocol on loopback, so both share one client code path).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rca.errors import BackendError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerTimings:
    """Where a call's seconds went, as llama.cpp's server reports them (``timings`` of a reply).

    ``prompt_evaluated`` is the prompt tokens the server actually ran (``prompt_n``);
    ``prompt_cached`` the tokens it reused from the KV cache of an earlier request with the
    same prefix (``cache_n``). A static system prefix that really stays cached shows as a
    ``prompt_cached`` near its length on every call after the first.
    """

    prompt_evaluated: int = 0
    prompt_cached: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    generated: int = 0

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> ServerTimings | None:
        """The ``timings`` object of a llama.cpp reply; None when the server sent none (remote APIs)."""
        if not raw:
            return None
        try:
            return cls(
                prompt_evaluated=int(raw.get("prompt_n", 0)),
                prompt_cached=int(raw.get("cache_n", 0)),
                prefill_s=float(raw.get("prompt_ms", 0.0)) / 1000.0,
                decode_s=float(raw.get("predicted_ms", 0.0)) / 1000.0,
                generated=int(raw.get("predicted_n", 0)),
            )
        except (TypeError, ValueError) as exc:
            # Figures for benchmarks only: a server that words them differently must not fail a case.
            log.warning("unreadable server timings %r: %s", raw, exc)
            return None

    @staticmethod
    def total(timings: Iterable[ServerTimings | None]) -> dict[str, float]:
        """Sums over calls, as the run record's ``timings_s`` keeps them (empty when no call had timings)."""
        known = [t for t in timings if t is not None]
        if not known:
            return {}
        return {
            "prefill_s": round(sum(t.prefill_s for t in known), 3),
            "decode_s": round(sum(t.decode_s for t in known), 3),
            "prompt_evaluated": float(sum(t.prompt_evaluated for t in known)),
            "prompt_cached": float(sum(t.prompt_cached for t in known)),
        }


@dataclass(frozen=True)
class LLMReply:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    server_timings: ServerTimings | None = None  # llama.cpp servers only (embedded or remote)


class LLMError(BackendError):
    """A backend failed (unreachable, timed out after retries, bad model files ...)."""


class LLMBackend(Protocol):
    name: str

    def chat(
        self,
        messages: list[dict[str, str]],
        *,
        json_schema: dict[str, Any] | None = None,
        schema_name: str = "answer",
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> LLMReply:
        """One chat completion. With ``json_schema`` the reply is constrained to it
        (``json_schema`` response format) or asked for as a JSON object with the schema
        in the prompt (``json_object`` providers such as DeepSeek)."""
        ...

    def close(self) -> None: ...
