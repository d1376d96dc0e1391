"""Every registered detector honours the contract of ``preprocess.detect`` (ruptures style).

Parametrised over ``DETECTORS``: a new modality gets these checks by registering.
Each detector is driven through its public halves only: raw chunks -> ``build`` ->
feature tables -> ``score`` -> event frames.
"""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import polars as pl
import pytest

from preprocess.detect import DETECTORS, Detector, make_detectors
from preprocess.schema import INFRA_SCHEMA
from rca.system import bundled_system
from tests.test_detect_log import _day
from tests.test_detect_trace import BASELINE_START, T0, WINDOW_END, WINDOW_START, synthetic_spans

SYSTEM = bundled_system()

STEP_AT = T0 + timedelta(minutes=35)  # WINDOW_START: every synthetic fault below starts here


def _infra(*, step: bool, seed: int) -> pl.DataFrame:
    values = 10.0 + np.random.default_rng(seed).normal(0, 0.5, 60)
    if step:
        values[35:51] *= 4.0
    rows = [(T0 + timedelta(minutes=m), "infra_pod", "pod_cpu_usage", "emailservice-1", "aiops-k8s-01",
             None, None, None, "hipstershop", None, None, float(v)) for m, v in enumerate(values)]
    return pl.DataFrame(rows, schema=INFRA_SCHEMA, orient="row")


def raw_chunks(name: str, *, step: bool, seed: int) -> list[dict[str, pl.DataFrame | None]]:
    """One hour of raw input a detector reads, quiet or with a step at ``STEP_AT``."""
    if name == "metric":
        return [{"apm": None, "infra": _infra(step=step, seed=seed)}]
    if name == "log":
        return [{"log": _day(fault="burst" if step else None, seed=seed)}]
    if name == "trace":
        return [{"trace": synthetic_spans(fault="ad_latency" if step else None, seed=seed)}]
    raise AssertionError(f"no synthetic raw input for detector {name!r}: add one here")


def _events(detector: Detector, chunks) -> dict[str, pl.DataFrame]:
    features = detector.build(chunks, state_dir=None)
    return detector.score(features, system=SYSTEM, start=WINDOW_START, end=WINDOW_END, baseline_start=BASELINE_START)


@pytest.fixture(params=sorted(DETECTORS))
def detector(request) -> Detector:
    return make_detectors()[request.param]


def test_registry_names_match_detectors():
    assert all(cls.name == name for name, cls in DETECTORS.items())
    assert all(isinstance(make_detectors()[name].params, cls.Params) for name, cls in DETECTORS.items())


def test_empty_input_gives_empty_frames_of_the_declared_schemas(detector):
    features = detector.build([], state_dir=None)
    assert {t.name for t in detector.feature_tables} == set(features)
    for table in detector.feature_tables:
        assert features[table.name].height == 0
        assert dict(features[table.name].schema) == table.schema, table.name
    events = detector.score(features, system=SYSTEM, start=WINDOW_START, end=WINDOW_END, baseline_start=BASELINE_START)
    assert set(events) == set(detector.event_schemas)
    for kind, frame in events.items():
        assert frame.height == 0 and dict(frame.schema) == detector.event_schemas[kind], kind


@pytest.mark.parametrize("seed", [0, 1])
def test_quiet_window_gives_no_event(detector, seed):
    events = _events(detector, raw_chunks(detector.name, step=False, seed=seed))
    assert {kind: frame.height for kind, frame in events.items()} == dict.fromkeys(detector.event_schemas, 0)


@pytest.mark.parametrize("seed", [0, 1])
def test_injected_step_gives_one_event_with_its_onset(detector, seed):
    events = _events(detector, raw_chunks(detector.name, step=True, seed=seed))
    found = [frame.row(i, named=True) for frame in events.values() for i in range(frame.height)]
    assert len(found) == 1, found
    assert abs((found[0]["onset"] - STEP_AT).total_seconds()) <= 120, found[0]["onset"]
    for kind, frame in events.items():
        assert dict(frame.schema) == detector.event_schemas[kind], kind
