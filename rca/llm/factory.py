"""Choosing and opening the LLM backend from Settings.

Usage::

    with open_backend(settings) as llm:
        reply = llm.chat(messages, json_schema=schema)

``settings.llm.backend`` picks the backend; there is no fallback from one to the other, so a
broken configuration fails loudly instead of silently answering with a different model.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rca.llm.base import LLMBackend, LLMError
from rca.llm.models import ensure_model, model_spec
from rca.llm.openai_backend import OpenAIBackend
from rca.settings import Settings

log = logging.getLogger(__name__)


def model_cache_dir(settings: Settings) -> Path:
    """Where assembled embedded model files live."""
    return settings.paths.cache_dir / "models"


def prefix_cache_dir(settings: Settings) -> Path:
    """Where the embedded model keeps the KV cache of the prompt's static prefix between runs."""
    return settings.paths.cache_dir / "prefix-cache"


def build_backend(settings: Settings) -> LLMBackend:
    """Create the configured backend; the caller must ``close()`` it (prefer ``open_backend``)."""
    llm = settings.llm
    if llm.backend == "openai":
        return OpenAIBackend.from_settings(llm)
    if llm.backend == "embedded":
        from rca.llm.embedded import EmbeddedBackend  # keeps xllamacpp out of remote-only runs

        spec = model_spec(llm.embedded_model)
        model_path = ensure_model(spec, cache_dir=model_cache_dir(settings))
        return EmbeddedBackend(
            model_path=model_path,
            model_name=spec.name,
            n_ctx=llm.n_ctx,
            threads=llm.threads,
            timeout_s=llm.timeout_s,
            temperature=llm.temperature,
            max_tokens=llm.max_tokens,
            parallel=max(1, llm.concurrency),  # one server slot per concurrent case of a batch
            prefix_cache_dir=prefix_cache_dir(settings) if llm.prefix_cache else None,
        )
    raise LLMError(f"setting 'llm.backend' is {llm.backend!r}; expected 'embedded' or 'openai'")


@contextmanager
def open_backend(settings: Settings) -> Iterator[LLMBackend]:
    """The configured backend for the duration of a ``with`` block, closed afterwards."""
    backend = build_backend(settings)
    try:
        yield backend
    finally:
        backend.close()
