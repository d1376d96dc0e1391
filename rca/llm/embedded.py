"""The embedded default backend: llama.cpp running in this process through xllamacpp.

``xllamacpp.Server`` starts llama.cpp's OpenAI-compatible HTTP server on a random loopback
port; requests then go through ``OpenAIBackend`` exactly as for a remote endpoint, with the
``json_schema`` response format enforced by llama.cpp's grammar engine. Two model instances
on a 2-core machine slow each other down by an order of magnitude, so a module-level guard
allows at most one open ``EmbeddedBackend`` per process.

The prompt's static prefix (instructions and catalogue, ~1.7k tokens) costs ~50 s to evaluate on
2 cores, once per process: the server keeps it in its KV cache for the cases that follow, but a
fresh ``rca diagnose`` would pay it again. With ``prefix_cache_dir`` the backend saves the KV cache
of its first call to that directory (llama.cpp's slot save) and restores it into every slot at
the next start. llama.cpp reuses only the tokens a new prompt shares with the restored ones, so a
stale file (another prompt, another version of the catalogue) costs speed, never correctness.
"""
from __future__ import annotations

import gc
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import httpx

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
        prefix_cache_dir: Path | None = None,
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
        self.prefix_cache_dir = prefix_cache_dir
        # The cache file is the model's: a state saved by another model cannot be restored.
        self._prefix_file = f"{model_name}.prefix-kv"
        self._prefix_saved = threading.Event()  # set once this process has saved its prefix
        self.prefix_restored = 0  # tokens restored from disk at start (0: none)
        try:
            started = time.perf_counter()
            if prefix_cache_dir is not None:
                prefix_cache_dir.mkdir(parents=True, exist_ok=True)
            self._server = _start_server(
                model_path=model_path, model_name=model_name, n_ctx=n_ctx, threads=threads, llama_logs=llama_logs,
                parallel=self.parallel, slot_save_dir=prefix_cache_dir,
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
            if prefix_cache_dir is not None and (prefix_cache_dir / self._prefix_file).is_file():
                self._restore_prefix()
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
        reply = self._client.chat(
            messages,
            json_schema=json_schema,
            schema_name=schema_name,
            temperature=temperature,
            max_tokens=max_tokens,
            seed=seed,
        )
        if self.prefix_cache_dir is not None and not self._prefix_saved.is_set():
            self._save_prefix()
        return reply

    def _slot_action(self, slot: int, action: str, filename: str) -> dict[str, Any]:
        """llama.cpp's ``/slots/{slot}?action=save|restore`` on a file of ``prefix_cache_dir``."""
        root = self.base_url.removesuffix("/v1")
        response = httpx.post(f"{root}/slots/{slot}", params={"action": action}, json={"filename": filename},
                              timeout=60.0)
        if response.status_code != 200:
            raise LLMError(f"embedded model {self.model_name}: slot {action} of {filename} failed: "
                           f"HTTP {response.status_code} {response.text[:200]}")
        return response.json()

    def _restore_prefix(self) -> None:
        """Every slot starts from the prefix a previous run saved. A file this llama.cpp cannot read
        (another version) is reported and left for the next save to replace: the run goes on cold."""
        try:
            for slot in range(self.parallel):
                restored = self._slot_action(slot, "restore", self._prefix_file)
            self.prefix_restored = int(restored.get("n_restored", 0))
            log.info("embedded model %s: prompt prefix restored from %s (%d tokens)", self.model_name,
                     self.prefix_cache_dir, self.prefix_restored)
        except (LLMError, httpx.HTTPError) as exc:
            log.warning("embedded model %s: the saved prompt prefix was not restored, the first call "
                        "evaluates it again: %s", self.model_name, exc)

    def _save_prefix(self) -> None:
        """Save the KV cache of this process's first call (slot 0), atomically: llama.cpp writes a
        temporary file that replaces the previous one only once it is whole."""
        self._prefix_saved.set()
        directory = self.prefix_cache_dir
        if directory is None:
            return
        temporary = f"{self._prefix_file}.{os.getpid()}.tmp"
        try:
            saved = self._slot_action(0, "save", temporary)
            if int(saved.get("n_saved", 0)) > 0:
                os.replace(directory / temporary, directory / self._prefix_file)
                log.info("embedded model %s: prompt prefix saved (%d tokens)", self.model_name, saved["n_saved"])
        except (LLMError, httpx.HTTPError, OSError) as exc:
            log.warning("embedded model %s: the prompt prefix was not saved for the next run: %s",
                        self.model_name, exc)
        finally:
            (directory / temporary).unlink(missing_ok=True)

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
                  parallel: int = 1, slot_save_dir: Path | None = None) -> Any:
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
    if slot_save_dir is not None:
        params.endpoint_slots = True
        # llama.cpp joins this and the file name as strings: the separator must be there.
        params.slot_save_path = str(slot_save_dir) + os.sep
    params.warmup = False
    params.verbosity = _DEBUG_VERBOSITY if llama_logs else _QUIET_VERBOSITY
    try:
        return xllamacpp.Server(params)
    except Exception as exc:  # the native layer raises plain RuntimeError/ValueError
        raise LLMError(f"embedded model {model_name}: llama.cpp could not load {model_path}: {exc}") from exc
