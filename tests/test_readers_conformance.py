"""Every family of a day directory reads into the canonical schema with times inside the CST day.

Runs on the fixture day and on a one-case release written by the simulator (simulate/).
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from diagnose.cases import load_cases
from preprocess import layout
from preprocess.detect_trace import call_graph, edge_stats
from preprocess.readers import read_day, read_logs, read_traces
from preprocess.schema import APM_SCHEMA, INFRA_SCHEMA, LOG_SCHEMA, SPAN_SCHEMA
from rca.system import bundled_system
from rca.timeutil import cst_day_bounds_utc
from tests import layout_fixtures as fx

# HipsterShop's [traces] (the bundled system): the simulated and released spans' peer rules.
NAMING = bundled_system().trace

SCHEMAS = {"apm": APM_SCHEMA, "infra": INFRA_SCHEMA, "log": LOG_SCHEMA, "trace": SPAN_SCHEMA}
TIME_COLUMN = {"apm": "time", "infra": "time", "log": "time", "trace": "start"}


def check_day(day_dir: Path) -> dict[str, pl.DataFrame]:
    """Assert the conformance rules on one day directory and return the frames."""
    start, end = cst_day_bounds_utc(day_dir.name)
    frames: dict[str, pl.DataFrame] = {}
    for family, schema in SCHEMAS.items():
        result = read_day(day_dir, family, naming=NAMING)
        frame = result.frame
        assert dict(frame.schema) == schema, family
        assert frame.height > 0, f"{family}: no rows ({result.missing})"
        times = frame[TIME_COLUMN[family]]
        assert times.null_count() == 0, family
        # Contents are UTC: they lie in the CST day's UTC span (metrics allow a minute of slack).
        assert times.min() >= start - timedelta(minutes=1) and times.max() < end + timedelta(minutes=1), family
        frames[family] = frame
    assert frames["infra"]["component"].null_count() == 0
    for column in ("service", "span_kind"):
        assert frames["trace"][column].null_count() < frames["trace"].height
    return frames


def test_fixture_day_conforms(tmp_path: Path) -> None:
    day = fx.write_day(tmp_path, "2025-06-06")
    frames = check_day(day)
    assert set(call_graph(edge_stats(frames["trace"])).edges) == fx.TRACE_EDGES


@pytest.mark.slow
def test_simulated_day_conforms(tmp_path: Path) -> None:
    """A one-case simulated release: every family conforms and the case window reads back."""
    simulator = pytest.importorskip("simulate.simulator")
    simulator.simulate(simulator.SimulationOptions(out_dir=tmp_path, cases=1, seed=0))
    days = sorted(p for p in tmp_path.iterdir() if layout.is_day_dir(p))
    assert days, f"simulator wrote no day directory under {tmp_path}"
    frames = check_day(days[0])
    # The simulator's call graph is the contract's: every caller/callee is a service it emitted.
    graph = call_graph(edge_stats(frames["trace"]))
    assert {"frontend", "checkoutservice"} <= {caller for caller, _ in graph.edges}
    assert {"adservice", "currencyservice", "paymentservice", "redis-cart"} <= {callee for _, callee in graph.edges}
    (case,) = load_cases(tmp_path / "input.json")
    logs = read_logs(tmp_path, start=case.start, end=case.end)
    spans = read_traces(tmp_path, naming=NAMING, start=case.start, end=case.end)
    assert logs.missing == [] and spans.missing == []
    assert logs.frame.height > 0 and spans.frame.height > 0
    assert logs.frame["time"].min() >= case.start and spans.frame["start"].max() <= case.end
