import numpy as np
import pytest

from bench.intervals import bootstrap_interval, paired_difference_interval


def test_interval_covers_the_true_mean_of_a_known_population() -> None:
    rng = np.random.default_rng(1)
    hits = 0
    for trial in range(40):
        sample = rng.random(60) < 0.7  # AC@1 of 0.7 on 60 cases
        low, high = bootstrap_interval(sample, seed=trial)
        hits += low <= 0.7 <= high
        assert 0.0 <= low <= sample.mean() <= high <= 1.0
    assert hits >= 34  # a 95% interval misses rarely (binomial: >= 34 of 40 with high probability)


def test_interval_narrows_with_more_cases() -> None:
    rng = np.random.default_rng(2)
    small = bootstrap_interval(rng.random(20) < 0.5)
    large = bootstrap_interval(rng.random(500) < 0.5)
    assert (large[1] - large[0]) < (small[1] - small[0]) / 3


def test_degenerate_samples() -> None:
    assert bootstrap_interval([1.0]) == (1.0, 1.0)
    low, high = bootstrap_interval([])
    assert np.isnan(low) and np.isnan(high)


def test_paired_difference_sees_a_consistent_gain() -> None:
    a = [1.0] * 30 + [0.0] * 10
    b = [0.0] * 10 + [1.0] * 20 + [0.0] * 10  # a wins 10 cases, never loses
    mean, low, high = paired_difference_interval(a, b)
    assert mean == pytest.approx(0.25) and low > 0.0
