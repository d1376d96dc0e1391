"""The one interface every LLM backend implements.

Backends: ``rca.llm.openai_backend`` (any OpenAI-compatible endpoint) and
``rca.llm.embedded`` (llama.cpp in-process via xllamacpp, which itself serves the
OpenAI protocol on loopback, so both share one client code path).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from rca.errors import BackendError


@dataclass(frozen=True)
class LLMReply:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


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
