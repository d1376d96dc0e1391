"""The embedded default backend: llama.cpp running in this process through xllamacpp.

``xllamacpp.Server`` starts llama.cpp's OpenAI-compatible HTTP server on a random loopback
port; requests then go through ``OpenAIBackend`` exactly as for a remote endpoint, with the
``json_schema`` response format enforced by llama.cpp's grammar engine. Two model instances
on a 2-core machine slow each other down by an order of magnitude, so a module-level guard
allows at most one open ``EmbeddedBackend`` per process.
"""
from __future__ import annotations

import gc
import logging
import threading
import time
from pathlib import Path
from typing import Any

from rca.llm.base import LLMError, LLMReply
from rca.llm.openai_backend import OpenAIBackend

log = logging.getLogger(__name__)

# Held by the one open EmbeddedBackend of this process; released by close().
_ONE_MODEL_PER_PROCESS = threading.Lock()

# llama.cpp's own log level: -1 silent except errors it prints itself, 3 very chatty.
_QUIET_VERBOSITY = -1
_DEBUG_VERBOSITY = 3


class EmbeddedBackend:
    """A GGUF model served in-process; ``chat`` shares the OpenAI client code path."""

    def __init__(
        self,
        *,
        model_path: Path,
        model_name: str,
        n_ctx: int,
        threads: int,
        timeout_s: float = 300.0,
        temperature: float = 0.0,
        max_tokens: int = 400,
        llama_logs: bool = False,
        parallel: int = 1,
    ) -> None:
        if not model_path.is_file():
            raise LLMError(f"embedded model file {model_path} does not exist")
        if not _ONE_MODEL_PER_PROCESS.acquire(blocking=False):
            raise LLMError(
                "an embedded model is already loaded in this process; close it before opening "
                "another (two models on this machine slow each other down ~8x)"
            )
        self.name = "embedded"
        self.model_name = model_name
        self.model_path = model_path
        self._server: Any = None
        self._client: OpenAIBackend | None = None
        self.parallel = max(1, parallel)
        try:
            started = time.perf_counter()
            self._server = _start_server(
                model_path=model_path, model_name=model_name, n_ctx=n_ctx, threads=threads, llama_logs=llama_logs,
                parallel=self.parallel,
            )
            self.load_seconds = time.perf_counter() - started
            self.base_url = self._server.listening_address + "/v1"
            log.info("embedded model %s loaded in %.1f s (%d slot(s)), serving %s", model_name, self.load_seconds,
                     self.parallel, self.base_url)
            self._client = OpenAIBackend(
                base_url=self.base_url,
                api_key="EMPTY",
                model=model_name,
                response_format="json_schema",  # llama.cpp enforces the schema by grammar
                timeout_s=timeout_s,
                # Loopback to our own server: a failure is a bug or a crash, not a network blip.
                max_retries=0,
                temperature=temperature,
                max_tokens=max_tokens,
                name=self.name,
                compact_json=True,  # llama.cpp's own grammar field: no whitespace tokens in replies
            )
        except BaseException:
            self._stop_server()
            _ONE_MODEL_PER_PROCESS.release()
            raise

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
        if self._client is None:
            raise LLMError(f"embedded model {self.model_name} is closed")
        return self._client.chat(
            messages,
            json_schema=json_schema,
            schema_name=schema_name,
            temperature=temperature,
            max_tokens=max_tokens,
            seed=seed,
        )

    def next_token_logprobs(self, messages: list[dict[str, str]], *, top: int = 20) -> tuple[LLMReply, dict[str, float]]:
        """See ``OpenAIBackend.next_token_logprobs``; llama.cpp returns them on loopback."""
        if self._client is None:
            raise LLMError(f"embedded model {self.model_name} is closed")
        return self._client.next_token_logprobs(messages, top=top)

    def close(self) -> None:
        """Stop the server and free the model; safe to call twice."""
        if self._client is None:
            return
        self._client.close()
        self._client = None
        self._stop_server()
        _ONE_MODEL_PER_PROCESS.release()
        log.info("embedded model %s closed", self.model_name)

    def _stop_server(self) -> None:
        # xllamacpp has no stop(): the C++ destructor joins the server loop and frees
        # the model, so the last reference must go now rather than at interpreter exit.
        if self._server is not None:
            self._server = None
            gc.collect()


def _start_server(*, model_path: Path, model_name: str, n_ctx: int, threads: int, llama_logs: bool,
                  parallel: int = 1) -> Any:
    import xllamacpp  # imported here: loading the native library is not free

    params = xllamacpp.CommonParams()
    params.model.path = str(model_path)
    params.model_alias = {model_name}
    # Explicit (the default is the model's full 32k context), and per slot: llama.cpp splits
    # n_ctx among its slots, so each of ``parallel`` concurrent requests keeps n_ctx.
    params.n_ctx = n_ctx * parallel
    # Slots decode their requests in one batch: concurrent cases share the decode steps,
    # which are memory-bound on a CPU. Each slot keeps its own prompt cache.
    params.n_parallel = parallel
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.cache_prompt = True  # reuse the KV cache of a repeated prompt prefix
    params.warmup = False
    params.verbosity = _DEBUG_VERBOSITY if llama_logs else _QUIET_VERBOSITY
    try:
        return xllamacpp.Server(params)
    except Exception as exc:  # the native layer raises plain RuntimeError/ValueError
        raise LLMError(f"embedded model {model_name}: llama.cpp could not load {model_path}: {exc}") from exc
