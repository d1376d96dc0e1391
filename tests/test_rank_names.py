"""The ranker names components by the system it is given, not by the bundled HipsterShop.

A system whose nodes are named by IP address (tests/data/trainticket_system.toml, as
``rca system infer`` writes for the Nezha TrainTicket cluster) must get its node stress ranked
as a node: read with HipsterShop's naming rule, ``10.0.0.11`` was a "service", scored twice
(as a service without pods and as a node) and never capped by its pods' evidence.
"""
from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import networkx as nx
import polars as pl
import pytest

from index.confidence import first_rival
from index.models import Candidate
from index.rank import rank_candidates
from preprocess.detect_log import LOG_EVENT_SCHEMA
from preprocess.detect_metric import METRIC_EVENT_SCHEMA, PLACEMENT_SCHEMA
from preprocess.detect_trace import DROPPED_EVENT_SCHEMA, FANOUT_EVENT_SCHEMA, TRACE_EVENT_SCHEMA
from rca.system import SystemSpec, bundled_system, load_system

ONSET = datetime(2023, 1, 29, 10, 1, tzinfo=UTC)
NODE, OTHER_NODE = "10.0.0.11", "10.0.0.12"
PODS = {"ts-order-service-5b67c48447-mv5hb": NODE, "ts-route-service-7d9f4b8c6-x7k2q": NODE,
        "ts-basic-service-5dc8d4f9fd-46997": OTHER_NODE}


@pytest.fixture
def trainticket() -> SystemSpec:
    return load_system(Path(__file__).parent / "data" / "trainticket_system.toml")


def _metric(component: str, kind: str, kpi: str, z: float) -> dict:
    return {"component": component, "kind": kind, "kpi": kpi, "direction": "up", "z": z, "ratio": 3.0,
            "baseline": 1.0, "window_value": 3.0, "onset": ONSET, "reference": "before"}


def _ranked(system: SystemSpec) -> list[Candidate]:
    rows = [_metric(NODE, "infra_node", "node_cpu_usage_rate", 30.0),
            _metric(NODE, "infra_node", "node_load1", 20.0),
            _metric("ts-order-service-5b67c48447-mv5hb", "infra_pod", "pod_cpu_usage", 4.0)]
    events = {"metric": pl.DataFrame(rows, schema=METRIC_EVENT_SCHEMA),
              "log": pl.DataFrame(schema=LOG_EVENT_SCHEMA), "trace": pl.DataFrame(schema=TRACE_EVENT_SCHEMA),
              "fanout": pl.DataFrame(schema=FANOUT_EVENT_SCHEMA), "dropped": pl.DataFrame(schema=DROPPED_EVENT_SCHEMA),
              "stopped_after": pl.DataFrame(schema=DROPPED_EVENT_SCHEMA)}
    placement = pl.DataFrame([{"pod": pod, "node": node, "first": ONSET, "last": ONSET} for pod, node in PODS.items()],
                             schema=PLACEMENT_SCHEMA)
    return rank_candidates(events=events, graph=nx.DiGraph(), placement=placement, known_pods=set(PODS), top_k=10,
                           window_start=ONSET, system=system)


def test_a_node_named_by_its_address_is_ranked_as_a_node(trainticket: SystemSpec) -> None:
    ranked = _ranked(trainticket)
    assert ranked[0].component == NODE and ranked[0].level == "node"
    assert [c.level for c in ranked if c.component == NODE] == ["node"]  # once, and as a node


def test_under_another_systems_naming_the_address_is_no_node() -> None:
    """What the test above guards against: HipsterShop's rule reads the address as a service."""
    assert "service" in {c.level for c in _ranked(bundled_system()) if c.component == NODE}


def test_a_rival_is_told_by_the_systems_naming(trainticket: SystemSpec) -> None:
    ranked = [Candidate(component="ts-order-service", level="service", score=9.0),
              Candidate(component="ts-order-service-5b67c48447-mv5hb", level="pod", score=8.9),
              Candidate(component=NODE, level="node", score=8.0)]
    rival = first_rival(ranked, system=trainticket)
    assert rival is not None and rival.component == NODE
