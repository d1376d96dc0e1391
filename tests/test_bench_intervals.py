import numpy as np
import pytest

from bench.intervals import bootstrap_interval, paired_difference_interval
from bench.report import score_intervals
from judge.challenge import CaseOutcome
from rca.challenge import rule_version


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


def _outcome(fault_type: str, *, located: bool, reasoned: bool) -> CaseOutcome:
    return CaseOutcome(uuid=f"{fault_type}-{located}-{reasoned}", fault_type=fault_type, level="service", answered=True,
                       component_right=located, reason_keyword_right=reasoned, reason_similarity=None,
                       reason_semantic_right=False, steps=4, points={"metric": 1}, hits={"metric": 1})


def test_score_intervals_resample_whole_cases_per_fault_type():
    outcomes = ([_outcome("cpu stress", located=True, reasoned=True)] * 6
                + [_outcome("network loss", located=i < 3, reasoned=True) for i in range(6)])
    rows = score_intervals(outcomes, rules=rule_version("early"))
    assert [r.group for r in rows] == ["cpu stress", "network loss", "ALL"]
    cpu, loss, every = rows
    assert cpu.final == (100.0, 100.0, 100.0)  # all right: nothing to resample away
    assert loss.la[0] == 0.5 and loss.la[1] < 0.5 < loss.la[2]
    assert every.cases == 12 and every.la[0] == 0.75
    # The final carries LA and TA at weight 0.4 each and full efficiency and explainability.
    assert every.final[0] == pytest.approx(100 * (0.4 * 0.75 + 0.4 * 1.0 + 0.1 + 0.1))
    assert every.final[1] < every.final[0] < every.final[2]
