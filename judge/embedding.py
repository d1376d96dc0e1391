"""The embedding interface the judge needs, and cosine similarity between rows.

The real embedder comes from ``knowledge.embedding.load_embedder``; the judge only
depends on this protocol so tests can inject a fake.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class TextEmbedder(Protocol):
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text, shape (n, dim)."""
        ...


def row_cosines(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Cosine similarity of ``left[i]`` with ``right[i]`` for every row ``i``."""
    if left.shape != right.shape:
        raise ValueError(f"embedding shapes differ: {left.shape} vs {right.shape}")
    left = np.asarray(left, dtype=np.float64)
    right = np.asarray(right, dtype=np.float64)
    norms = np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1)
    dots = np.einsum("ij,ij->i", left, right)
    # A zero vector (empty text) has no direction: similarity 0, not NaN.
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
