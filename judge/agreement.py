"""Agreement between machine scores and human 0/1 labels: Pearson r, ROC AUC, best F1.

Plain numpy so every figure can be checked by hand on a few numbers.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Agreement:
    n: int
    positives: int
    pearson: float | None  # None when scores or labels are constant
    auc: float | None  # None when only one class is present
    best_f1: float
    best_threshold: float | None  # predict 1 when score >= threshold


def pearson(scores: np.ndarray, labels: np.ndarray) -> float | None:
    x = scores - scores.mean()
    y = labels - labels.mean()
    denominator = float(np.sqrt((x * x).sum() * (y * y).sum()))
    return float((x * y).sum()) / denominator if denominator > 0 else None


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    """Probability that a random positive outscores a random negative; ties count one half."""
    positive, negative = scores[labels == 1], scores[labels == 0]
    if positive.size == 0 or negative.size == 0:
        return None
    greater = (positive[:, None] > negative[None, :]).sum()
    ties = (positive[:, None] == negative[None, :]).sum()
    return float(greater + 0.5 * ties) / (positive.size * negative.size)


def best_f1(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float | None]:
    """Highest F1 over thresholds at every observed score (predict 1 when score >= threshold)."""
    best, best_at = 0.0, None
    for threshold in np.unique(scores):
        predicted = scores >= threshold
        true_pos = int((predicted & (labels == 1)).sum())
        if true_pos == 0:
            continue
        precision = true_pos / int(predicted.sum())
        recall = true_pos / int((labels == 1).sum())
        f1 = 2 * precision * recall / (precision + recall)
        if f1 > best:
            best, best_at = f1, float(threshold)
    return best, best_at


def agreement(scores: Sequence[float], labels: Sequence[int]) -> Agreement:
    if len(scores) != len(labels):
        raise ValueError(f"{len(scores)} scores for {len(labels)} labels")
    if not scores:
        raise ValueError("no labelled answers")
    x = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    if not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be 0 or 1")
    f1, threshold = best_f1(x, y)
    return Agreement(
        n=len(x), positives=int(y.sum()), pearson=pearson(x, y.astype(np.float64)),
        auc=roc_auc(x, y), best_f1=f1, best_threshold=threshold,
    )
