"""The OpenAI-compatible chat backend: the one client code path for every model.

Remote endpoints (vLLM, DeepSeek, OpenAI) and the embedded llama.cpp server all speak the
OpenAI protocol, so this module owns the request: response format (``json_schema`` enforced
by the server, or ``json_object`` with the schema written into the prompt), timeouts,
retries with exponential backoff on transient failures, and token usage / latency in
``LLMReply``.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Literal

import openai
from openai.types.chat import ChatCompletion

from rca.llm.base import LLMError, LLMReply, ServerTimings
from rca.settings import LLMSettings

log = logging.getLogger(__name__)

ResponseFormat = Literal["json_schema", "json_object"]

# Errors worth another attempt: the endpoint is down, slow, overloaded or rate-limiting.
# openai.APITimeoutError is a subclass of APIConnectionError.
_TRANSIENT_ERRORS = (openai.APIConnectionError, openai.InternalServerError, openai.RateLimitError)


def schema_instruction(json_schema: dict[str, Any]) -> str:
    """The prompt text that asks a ``json_object`` provider for a reply matching the schema."""
    return (
        "Reply with a single JSON object and nothing else. The JSON object must conform to "
        "this JSON Schema:\n" + json.dumps(json_schema, ensure_ascii=False, indent=1)
    )


def compact_json_grammar(json_schema: dict[str, Any]) -> str:
    """An llguidance grammar (llama.cpp's ``grammar`` field) for ``json_schema`` with no optional
    whitespace: ``{"a":1,"b":2}``. A small model otherwise indents its reply, a decode step per
    newline and indent (about a third of a 40-token answer)."""
    compact = {**json_schema, "x-guidance": {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}}
    return "%llguidance {}\nstart: %json " + json.dumps(compact, ensure_ascii=False)


class OpenAIBackend:
    """Chat completions against one OpenAI-compatible endpoint."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        response_format: ResponseFormat = "json_schema",
        timeout_s: float = 300.0,
        max_retries: int = 3,
        temperature: float = 0.0,
        max_tokens: int = 400,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 30.0,
        name: str = "openai",
        compact_json: bool = False,
    ) -> None:
        if not base_url:
            raise LLMError("OpenAI-compatible backend: base URL is empty")
        if not model:
            raise LLMError("OpenAI-compatible backend: model name is empty")
        self.name = name
        self.base_url = base_url
        self.model = model
        self.response_format: ResponseFormat = response_format
        self.max_retries = max_retries
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        # llama.cpp servers only: the schema goes as an llguidance grammar that allows no
        # whitespace between JSON tokens, so the reply spends no decode steps on indentation.
        self.compact_json = compact_json
        # The client's own retries are off: this class retries, logs and reports attempts.
        self._client = openai.OpenAI(
            base_url=base_url,
            # The client refuses an empty key; local servers (vLLM, llama.cpp) ignore it.
            api_key=api_key or "EMPTY",
            timeout=timeout_s,
            max_retries=0,
        )

    @classmethod
    def from_settings(cls, llm: LLMSettings) -> OpenAIBackend:
        """Build from ``settings.llm``; a missing base URL or model names the setting."""
        if not llm.openai_api_base:
            raise LLMError("llm.backend is 'openai' but setting 'llm.openai_api_base' is empty")
        if not llm.llm_model:
            raise LLMError("llm.backend is 'openai' but setting 'llm.llm_model' is empty")
        return cls(
            base_url=llm.openai_api_base,
            api_key=llm.openai_api_key,
            model=llm.llm_model,
            response_format=llm.response_format,
            timeout_s=llm.timeout_s,
            max_retries=llm.max_retries,
            temperature=llm.temperature,
            max_tokens=llm.max_tokens,
        )

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
        request: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "temperature": self.temperature if temperature is None else temperature,
            "max_tokens": self.max_tokens if max_tokens is None else max_tokens,
        }
        if seed is not None:
            request["seed"] = seed
        if json_schema is not None:
            self._add_response_format(request, json_schema=json_schema, schema_name=schema_name)

        started = time.perf_counter()
        response, attempts = self._create_with_retries(request)
        latency_s = time.perf_counter() - started
        return self._reply_from(response, latency_s=latency_s, attempts=attempts)

    def next_token_logprobs(self, messages: list[dict[str, str]], *, top: int = 20) -> tuple[LLMReply, dict[str, float]]:
        """The ``top`` most likely first tokens of the reply and their log-probabilities.

        One greedy token, no response format: a scoring question ("answer with the letter
        of ...") is read off this distribution instead of the sampled text, so every option
        gets a number. Needs an endpoint that returns ``logprobs`` (OpenAI, vLLM, llama.cpp).
        """
        request: dict[str, Any] = {
            "model": self.model, "messages": list(messages), "temperature": 0.0, "max_tokens": 1,
            "logprobs": True, "top_logprobs": top,
        }
        started = time.perf_counter()
        response, attempts = self._create_with_retries(request)
        reply = self._reply_from(response, latency_s=time.perf_counter() - started, attempts=attempts,
                                 one_token=True)
        logprobs = response.choices[0].logprobs
        if logprobs is None or not logprobs.content:
            raise LLMError(f"endpoint {self.base_url} (model {self.model}) returned no logprobs; "
                           "it cannot score options")
        found: dict[str, float] = {}
        for candidate in logprobs.content[0].top_logprobs:
            found.setdefault(candidate.token, candidate.logprob)  # the first is the likeliest
        return reply, found

    def close(self) -> None:
        self._client.close()

    def _add_response_format(self, request: dict[str, Any], *, json_schema: dict[str, Any], schema_name: str) -> None:
        if self.compact_json:
            request["extra_body"] = {"grammar": compact_json_grammar(json_schema)}
            return
        if self.response_format == "json_schema":
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": json_schema, "strict": True},
            }
            return
        # json_object providers (DeepSeek) only guarantee valid JSON, so the schema goes
        # into the prompt: appended to the system message, or as a new one.
        request["response_format"] = {"type": "json_object"}
        instruction = schema_instruction(json_schema)
        messages = request["messages"]
        if messages and messages[0].get("role") == "system":
            messages[0] = {**messages[0], "content": messages[0]["content"] + "\n\n" + instruction}
        else:
            messages.insert(0, {"role": "system", "content": instruction})

    def _create(self, request: dict[str, Any]) -> ChatCompletion:
        """One request; a 200 whose body is not a chat completion (a proxy's HTML page, torn JSON) is an LLMError."""
        raw = self._client.chat.completions.with_raw_response.create(**request)
        try:
            parsed = raw.parse()
        except ValueError as exc:  # json.JSONDecodeError: the body is cut or not JSON at all
            raise LLMError(f"endpoint {self.base_url} (model {self.model}) answered HTTP {raw.status_code} with "
                           f"invalid JSON ({exc}): {_body_start(raw.text)}") from exc
        if not isinstance(parsed, ChatCompletion):
            raise LLMError(f"endpoint {self.base_url} (model {self.model}) answered HTTP {raw.status_code} with "
                           f"{raw.headers.get('content-type', 'no content type')}, not a chat completion: "
                           f"{_body_start(raw.text)}; is the base URL right?")
        return parsed

    def _create_with_retries(self, request: dict[str, Any]) -> tuple[Any, int]:
        attempts_allowed = self.max_retries + 1
        for attempt in range(1, attempts_allowed + 1):
            try:
                return self._create(request), attempt
            except _TRANSIENT_ERRORS as exc:
                reason = _describe(exc)
                if attempt == attempts_allowed:
                    raise LLMError(
                        f"endpoint {self.base_url} (model {self.model}) failed after {attempt} attempts: {reason}"
                    ) from exc
                delay = min(self.backoff_initial_s * 2 ** (attempt - 1), self.backoff_max_s)
                log.warning(
                    "endpoint %s attempt %d/%d failed (%s); retrying in %.2f s",
                    self.base_url, attempt, attempts_allowed, reason, delay,
                )
                _wait(delay)
            except openai.APIStatusError as exc:
                # 400/401/404 ...: repeating the same request cannot help.
                raise LLMError(f"endpoint {self.base_url} (model {self.model}) rejected the request: {_describe(exc)}") from exc
            except openai.OpenAIError as exc:
                raise LLMError(f"endpoint {self.base_url} (model {self.model}): {exc}") from exc
        raise AssertionError("unreachable")  # the loop always returns or raises

    def _reply_from(self, response: Any, *, latency_s: float, attempts: int, one_token: bool = False) -> LLMReply:
        if not response.choices:
            raise LLMError(f"endpoint {self.base_url} (model {self.model}) returned no choices")
        choice = response.choices[0]
        text = choice.message.content or ""
        if choice.finish_reason == "length" and not one_token:  # one token asked for: stopping there is the point
            log.warning("endpoint %s: reply truncated at max_tokens (%d chars)", self.base_url, len(text))
        usage = response.usage
        extra: dict[str, Any] = {"attempts": attempts, "usage_reported": usage is not None}
        # llama.cpp reports its own prefill/generation timings and how much of the prompt came
        # from its KV cache; kept raw and parsed, for the run record and the benchmarks.
        server_timings = (response.model_extra or {}).get("timings")
        if server_timings is not None:
            extra["server_timings"] = server_timings
        timings = ServerTimings.parse(server_timings)
        if timings is not None:
            log.debug("endpoint %s: %d prompt tokens evaluated, %d from cache, prefill %.2f s, decode %.2f s "
                      "(%d tokens)", self.base_url, timings.prompt_evaluated, timings.prompt_cached,
                      timings.prefill_s, timings.decode_s, timings.generated)
        if usage is None:
            log.warning("endpoint %s returned no token usage; recording 0 tokens", self.base_url)
        return LLMReply(
            text=text,
            model=response.model or self.model,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            latency_s=latency_s,
            finish_reason=choice.finish_reason,
            extra=extra,
            server_timings=timings,
        )


def _wait(seconds: float) -> None:
    """Backoff pause; a function of its own so tests can record delays instead of waiting."""
    time.sleep(seconds)


def _body_start(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return repr(flat[:limit] + ("..." if len(flat) > limit else ""))


def _describe(exc: openai.OpenAIError) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "timed out"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return f"unreachable ({type(cause).__name__}: {cause})"
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {exc.message}"
    return str(exc)
