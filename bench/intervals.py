"""Confidence intervals for small samples: the percentile bootstrap over cases.

Benchmarks here have tens to a few hundred cases, so a point figure alone overstates what
is known. Every table that reports an accuracy reports this interval beside it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

Item = TypeVar("Item")


def bootstrap_interval(
    values: Sequence[float],
    *,
    statistic: Callable[[np.ndarray], float] = np.mean,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of ``statistic`` over ``values`` (one value per case).

    Returns ``(nan, nan)`` for an empty sample; a single case gives a zero-width interval.
    """
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, data.size, size=(resamples, data.size))
    stats = np.array([statistic(data[row]) for row in picks])
    tail = (1.0 - level) / 2.0
    return float(np.quantile(stats, tail)), float(np.quantile(stats, 1.0 - tail))


def paired_difference_interval(
    a: Sequence[float], b: Sequence[float], *, level: float = 0.95, resamples: int = 2000, seed: int = 0,
) -> tuple[float, float, float]:
    """Mean of ``a - b`` over paired cases and its bootstrap interval: (mean, low, high)."""
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    low, high = bootstrap_interval(diff, level=level, resamples=resamples, seed=seed)
    return float(diff.mean()) if diff.size else float("nan"), low, high


def bootstrap_statistic(
    items: Sequence[Item],
    statistic: Callable[[list[Item]], float],
    *,
    level: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of a statistic that needs whole cases, not one number each
    (e.g. the challenge's final score, whose efficiency and explainability are ratios over cases)."""
    if not items:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(items), size=(resamples, len(items)))
    stats = np.array([statistic([items[i] for i in row]) for row in picks])
    tail = (1.0 - level) / 2.0
    return float(np.quantile(stats, tail)), float(np.quantile(stats, 1.0 - tail))
