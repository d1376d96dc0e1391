"""The index gives the same answer every run: ties in z (capped, so common) are broken by a
fixed key, not by the row order a polars group-by happens to produce."""
from __future__ import annotations

import itertools
from datetime import UTC, datetime

import networkx as nx
import polars as pl

from index.rank import rank_candidates
from preprocess.detect_log import LOG_EVENT_SCHEMA
from preprocess.detect_metric import METRIC_EVENT_SCHEMA, PLACEMENT_SCHEMA
from preprocess.detect_trace import DROPPED_EVENT_SCHEMA, FANOUT_EVENT_SCHEMA, TRACE_EVENT_SCHEMA, Z_CAP
from preprocess.schema import strongest_first
from tests.fakes import undeclared_system

ONSET = datetime(2025, 6, 6, 10, 1, tzinfo=UTC)


def _metric(component: str, kpi: str, z: float) -> dict:
    return {"component": component, "kind": "infra_pod", "kpi": kpi, "direction": "up", "z": z, "ratio": 3.0,
            "baseline": 1.0, "window_value": 3.0, "onset": ONSET, "reference": "before"}


ROWS = [_metric("cartservice-0", "pod_cpu_usage", Z_CAP), _metric("cartservice-0", "pod_memory_working_set_bytes", Z_CAP),
        _metric("cartservice-0", "pod_processes", Z_CAP), _metric("cartservice-1", "pod_cpu_usage", 9.0)]


def test_strongest_first_orders_equal_z_the_same_way_whatever_the_input_order() -> None:
    orders = {tuple(strongest_first(pl.DataFrame(list(rows), schema=METRIC_EVENT_SCHEMA), "component", "kpi")
                    .get_column("kpi").to_list()) for rows in itertools.permutations(ROWS)}
    assert orders == {("pod_cpu_usage", "pod_memory_working_set_bytes", "pod_processes", "pod_cpu_usage")}


def test_candidates_and_their_evidence_do_not_depend_on_event_row_order() -> None:
    answers = set()
    for rows in itertools.permutations(ROWS):
        events = {"metric": pl.DataFrame(list(rows), schema=METRIC_EVENT_SCHEMA),
                  "log": pl.DataFrame(schema=LOG_EVENT_SCHEMA), "trace": pl.DataFrame(schema=TRACE_EVENT_SCHEMA),
                  "fanout": pl.DataFrame(schema=FANOUT_EVENT_SCHEMA),
                  "dropped": pl.DataFrame(schema=DROPPED_EVENT_SCHEMA),
                  "stopped_after": pl.DataFrame(schema=DROPPED_EVENT_SCHEMA)}
        candidates = rank_candidates(events=events, graph=nx.DiGraph(), placement=pl.DataFrame(schema=PLACEMENT_SCHEMA),
                                     known_pods={"cartservice-0", "cartservice-1"}, top_k=3, max_evidence=2,
                                     system=undeclared_system())
        answers.add(tuple((c.component, tuple(i.text for i in c.evidence)) for c in candidates))
    assert len(answers) == 1
    (first, *_), = answers
    assert first[0].startswith("cartservice")
