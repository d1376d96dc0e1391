"""The metric scorer's robust-trend check (MetricParams.trend_check) on synthetic series with known truth."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from preprocess.detect_metric import SERIES_SCHEMA, MetricParams, score_metric_window
from rca.system import bundled_system

SYSTEM = bundled_system()

START = datetime(2025, 6, 5, 12, 0, tzinfo=UTC)
BASELINE_START = START - timedelta(minutes=30)


def _series(values: np.ndarray) -> pl.DataFrame:
    times = [BASELINE_START + timedelta(minutes=i) for i in range(len(values))]
    return pl.DataFrame({"time": times, "component": ["cartservice-0"] * len(values), "kind": ["infra_pod"] * len(values),
                         "kpi": ["pod_memory_working_set_bytes"] * len(values), "value": values}, schema=SERIES_SCHEMA)


def _events(values: np.ndarray, *, trend_check: bool) -> pl.DataFrame:
    return score_metric_window(_series(values), system=SYSTEM, start=START, end=START + timedelta(minutes=4),
                               baseline_start=BASELINE_START, params=MetricParams(trend_check=trend_check))


rng = np.random.default_rng(7)
RAMP = 100.0 + 4.0 * np.arange(35) + rng.normal(0.0, 0.5, 35)  # a steady drift, the window on the same line
STEP = np.concatenate([100.0 + rng.normal(0.0, 0.5, 30), 200.0 + rng.normal(0.0, 0.5, 5)])  # a flat line, then a jump
DRIFT_THEN_JUMP = np.concatenate([100.0 + 4.0 * np.arange(30), 400.0 + 4.0 * np.arange(5)])  # the window leaves the line


@pytest.mark.parametrize(("values", "with_trend", "without_trend"), [
    (RAMP, False, True),  # following the baseline's own slope: an event only without the trend check
    (STEP, True, True),  # a flat baseline has no trend: the check changes nothing
    (DRIFT_THEN_JUMP, True, True),  # departing from the carried-forward trend stands either way
])
def test_a_level_reached_by_the_baselines_own_drift_is_not_an_event(values, with_trend, without_trend):
    assert (_events(values, trend_check=True).height > 0) is with_trend
    assert (_events(values, trend_check=False).height > 0) is without_trend
