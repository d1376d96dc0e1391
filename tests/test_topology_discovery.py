"""Topology discovery on synthetic spans/metrics with known structure."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from preprocess.readers import read_day
from preprocess.schema import INFRA_SCHEMA, SPAN_SCHEMA
from preprocess.topology import call_edges, discover_topology, read_topology
from tests import layout_fixtures as fx

UTC = UTC
T0 = datetime(2025, 6, 5, 16, 0, tzinfo=UTC)


def span(trace: str, sid: str, parent: str | None, service: str, kind: str | None, peer: str | None = None,
         error: bool = False, pod: str | None = None) -> dict:
    return {
        "trace_id": trace, "span_id": sid, "parent_span_id": parent, "operation": "op", "service": service,
        "pod": pod, "node": None, "span_kind": kind, "peer_service": peer, "start": T0, "duration_us": 1,
        "status_code": 0, "is_error": error,
    }


def spans_frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=SPAN_SCHEMA)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        # client span + server child of the same call: one call, not two
        ([span("t", "1", None, "frontend", "server"), span("t", "2", "1", "frontend", "client", "cartservice"),
          span("t", "3", "2", "cartservice", "server")], {("frontend", "cartservice"): (1, 0)}),
        # client-only callee: only the client span witnesses it
        ([span("t", "1", None, "frontend", "server"), span("t", "2", "1", "frontend", "client", "adservice", error=True)],
         {("frontend", "adservice"): (1, 1)}),
        # nesting without a client span (server -> server of another service)
        ([span("t", "1", None, "checkoutservice", "server"), span("t", "2", "1", "shippingservice", "server")],
         {("checkoutservice", "shippingservice"): (1, 0)}),
        # redis span under its own service, child of cartservice's server span; its self peer is ignored
        ([span("t", "1", None, "cartservice", "server"), span("t", "2", "1", "redis-cart", "client", "redis-cart")],
         {("cartservice", "redis-cart"): (1, 0)}),
        # same-service nesting is not an edge; counts add up over traces
        ([span(t, "1", None, "recommendationservice", "server") for t in "abc"]
         + [span(t, "2", "1", "recommendationservice", "client", "productcatalogservice") for t in "abc"],
         {("recommendationservice", "productcatalogservice"): (3, 0)}),
        # parent in another trace with the same span id must not join
        ([span("t1", "1", None, "frontend", "server"), span("t2", "2", "1", "emailservice", "server")], {}),
    ],
)
def test_call_edges(rows: list[dict], expected: dict) -> None:
    edges = call_edges(spans_frame(rows))
    got = {(r["caller"], r["callee"]): (r["calls"], r["errors"]) for r in edges.iter_rows(named=True)}
    assert got == expected


def test_empty_inputs() -> None:
    assert call_edges(spans_frame([])).is_empty()
    with pytest.raises(ValueError, match="at least one"):
        discover_topology()


def infra_rows(rows: list[tuple[str, str, int, str | None]]) -> pl.DataFrame:
    """(family, component, minute, node) rows."""
    records = [
        {"time": T0 + timedelta(minutes=m, seconds=5), "family": fam, "kpi_key": "k", "component": comp, "node": node,
         "instance": None, "device": None, "mountpoint": None, "namespace": None, "type": None, "sql_type": None,
         "value": 1.0}
        for fam, comp, m, node in rows
    ]
    return pl.DataFrame(records, schema=INFRA_SCHEMA)


def test_components_and_placement_from_metrics() -> None:
    infra = infra_rows([
        ("infra_pod", "emailservice-0", 0, "aiops-k8s-01"),
        ("infra_pod", "emailservice-0", 1, "aiops-k8s-04"),
        ("infra_pod", "redis-cart-0", 0, "aiops-k8s-02"),
        ("infra_node", "aiops-k8s-07", 0, "aiops-k8s-07"),
        ("infra_tidb", "tidb-tidb", 0, None),
        ("infra_pd", "tidb-pd", 0, None),
    ])
    spans = spans_frame([span("t", "1", None, "frontend", "server", pod="frontend-1"),
                         span("t", "2", "1", "frontend", "client", "currencyservice")])
    topo = discover_topology(spans=spans, infra=infra)
    assert topo.services == ("currencyservice", "emailservice", "frontend", "redis-cart", "tidb-pd", "tidb-tidb")
    assert topo.pods == ("emailservice-0", "frontend-1", "redis-cart-0")
    assert topo.nodes == ("aiops-k8s-01", "aiops-k8s-02", "aiops-k8s-04", "aiops-k8s-07")
    assert topo.stateful == ("redis-cart", "tidb-pd", "tidb-tidb")  # tidb-tikv absent from the data: absent here
    assert topo.nodes_of("emailservice-0") == ["aiops-k8s-01", "aiops-k8s-04"]
    assert topo.placement["time"].dt.second().max() == 0  # truncated to the minute
    assert topo.pods_on("aiops-k8s-02") == ["redis-cart-0"]
    assert topo.callees("frontend") == ["currencyservice"] and topo.callers("currencyservice") == ["frontend"]
    graph = topo.call_graph()
    assert graph.edges["frontend", "currencyservice"]["calls"] == 1
    assert set(graph.nodes) == set(topo.services)


def test_topology_from_layout(tmp_path: Path) -> None:
    day = "2025-06-06"
    fx.write_day(tmp_path, day)
    start = datetime(2025, 6, 5, 17, 0, tzinfo=UTC)
    topo = read_topology(tmp_path, start=start, end=start + timedelta(hours=1) - timedelta(microseconds=1))
    got = {(r["caller"], r["callee"]): r["calls"] for r in topo.edges.iter_rows(named=True)}
    traces = 60 // fx.TRACE_EVERY_MIN
    assert got == {edge: traces for edge in fx.TRACE_EDGES}
    assert topo.stateful == ("redis-cart", "tidb-pd", "tidb-tidb", "tidb-tikv")
    assert "k8s-master1" in topo.nodes
    assert {"adservice", "paymentservice", "productcatalogservice"} <= set(topo.services)
    # The whole day through read_day gives the same edges, with 24 times the counts.
    spans = read_day(tmp_path / day, "trace").frame
    day_edges = {(r["caller"], r["callee"]): r["calls"] for r in call_edges(spans).iter_rows(named=True)}
    assert day_edges == {edge: traces * 24 for edge in fx.TRACE_EDGES}
