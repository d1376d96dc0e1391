"""Topology discovered from the telemetry of a window or a day: who exists, where it runs, who calls whom.

Nothing here comes from a hard-coded list of components: services, pods and nodes are the
ones the frames mention; pod -> node placement is read per minute from infra_pod ``instance``;
call edges come from spans:

- a client span whose ``peer_service`` names another service is one call caller -> callee
  (the only witness of the client-only services adservice, currencyservice, paymentservice);
- a child span of another service than its parent is a call parent -> child, unless the
  parent is the client span of that same call (already counted above).

The stateful components (redis-cart, tidb-*) are taken from the metrics in which they appear.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import networkx as nx
import polars as pl

from preprocess.detect_trace import call_edges as per_call_edges
from preprocess.readers import read_apm, read_infra, read_traces
from rca.taxonomy import STATEFUL_SERVICES, is_node, service_of

log = logging.getLogger(__name__)

EDGE_SCHEMA: dict[str, pl.DataType] = {"caller": pl.Utf8, "callee": pl.Utf8, "calls": pl.Int64, "errors": pl.Int64}
PLACEMENT_SCHEMA: dict[str, pl.DataType] = {"time": pl.Datetime("us", "UTC"), "pod": pl.Utf8, "node": pl.Utf8}


@dataclass(frozen=True)
class Topology:
    """Components seen in the data, pod placement per minute and service call edges with counts."""

    services: tuple[str, ...]
    pods: tuple[str, ...]
    nodes: tuple[str, ...]
    stateful: tuple[str, ...]  # stateful components seen in metrics, e.g. redis-cart, tidb-tidb
    placement: pl.DataFrame  # PLACEMENT_SCHEMA: one row per (minute, pod)
    edges: pl.DataFrame  # EDGE_SCHEMA: one row per (caller, callee)

    def callees(self, service: str) -> list[str]:
        return sorted(self.edges.filter(pl.col("caller") == service)["callee"].to_list())

    def callers(self, service: str) -> list[str]:
        return sorted(self.edges.filter(pl.col("callee") == service)["caller"].to_list())

    def nodes_of(self, pod: str) -> list[str]:
        """Every node that hosted ``pod`` in the data, in order of first appearance."""
        rows = self.placement.filter(pl.col("pod") == pod).sort("time")
        return rows["node"].unique(maintain_order=True).to_list()

    def pods_on(self, node: str) -> list[str]:
        return sorted(self.placement.filter(pl.col("node") == node)["pod"].unique().to_list())

    def call_graph(self) -> nx.DiGraph:
        """Service call graph; edge attributes ``calls`` and ``errors``."""
        graph = nx.DiGraph()
        graph.add_nodes_from(self.services)
        for row in self.edges.iter_rows(named=True):
            graph.add_edge(row["caller"], row["callee"], calls=row["calls"], errors=row["errors"])
        return graph


def call_edges(spans: pl.DataFrame) -> pl.DataFrame:
    """Caller -> callee service edges with call and error counts, from spans in SPAN_SCHEMA.

    The calls are the trace detector's (``preprocess.detect_trace.call_edges``), counted.
    """
    if spans.is_empty():
        return pl.DataFrame(schema=EDGE_SCHEMA)
    return (
        per_call_edges(spans)
        .filter(pl.col("caller").is_not_null() & pl.col("callee").is_not_null())
        .group_by("caller", "callee")
        .agg(pl.len().cast(pl.Int64).alias("calls"), pl.col("is_error").sum().cast(pl.Int64).alias("errors"))
        .sort("caller", "callee")
    )


def pod_placement(infra: pl.DataFrame) -> pl.DataFrame:
    """(minute, pod, node) rows from infra_pod, whose ``node`` column is the raw ``instance``."""
    rows = infra.filter((pl.col("family") == "infra_pod") & pl.col("component").is_not_null() & pl.col("node").is_not_null())
    return (
        rows.select(pl.col("time").dt.truncate("1m"), pl.col("component").alias("pod"), "node")
        .unique()
        .sort("pod", "time")
    )


def _values(frame: pl.DataFrame | None, column: str, *, where: pl.Expr | None = None) -> set[str]:
    if frame is None or frame.is_empty() or column not in frame.columns:
        return set()
    selected = frame.filter(where) if where is not None else frame
    return {v for v in selected[column].unique().to_list() if v is not None}


def discover_topology(
    *,
    spans: pl.DataFrame | None = None,
    infra: pl.DataFrame | None = None,
    apm: pl.DataFrame | None = None,
    logs: pl.DataFrame | None = None,
) -> Topology:
    """Topology from canonical frames (any subset; each adds what it witnesses)."""
    if all(frame is None for frame in (spans, infra, apm, logs)):
        raise ValueError("discover_topology needs at least one of spans, infra, apm, logs")

    infra_pods = pl.col("family") == "infra_pod"
    pods = (
        _values(infra, "component", where=infra_pods)
        | _values(apm, "object_id", where=pl.col("object_type") == "pod")
        | _values(spans, "pod")
        | _values(logs, "pod")
    )
    nodes = (
        _values(infra, "component", where=pl.col("family") == "infra_node")
        | _values(infra, "node", where=infra_pods)
        | _values(spans, "node")
        | _values(logs, "node")
    )
    tidb = _values(infra, "component", where=pl.col("family").is_in(["infra_tidb", "infra_tikv", "infra_pd"]))
    services = (
        {service_of(p) for p in pods}
        | _values(apm, "object_id", where=pl.col("object_type") == "service")
        | _values(spans, "service")
        | _values(spans, "peer_service")
        | tidb
    )
    services = {s for s in services if not is_node(s)}
    # Stateful components count only when metrics show them (a TiDB family or an infra_pod pod).
    in_metrics = tidb | {service_of(p) for p in _values(infra, "component", where=infra_pods)}
    stateful = {s for s in in_metrics if s in STATEFUL_SERVICES}
    placement = pod_placement(infra) if infra is not None else pl.DataFrame(schema=PLACEMENT_SCHEMA)
    edges = call_edges(spans) if spans is not None else pl.DataFrame(schema=EDGE_SCHEMA)
    topology = Topology(
        services=tuple(sorted(services)),
        pods=tuple(sorted(pods)),
        nodes=tuple(sorted(nodes)),
        stateful=tuple(sorted(stateful)),
        placement=placement,
        edges=edges,
    )
    log.info(
        "topology: %d services, %d pods, %d nodes, %d call edges",
        len(topology.services), len(topology.pods), len(topology.nodes), topology.edges.height,
    )
    return topology


def read_topology(data_dir: Path, *, start: datetime, end: datetime) -> Topology:
    """Topology of a UTC window, read from traces, infra and APM (logs add nothing the others lack)."""
    spans = read_traces(data_dir, start=start, end=end).frame
    infra = read_infra(data_dir, start=start, end=end).frame
    apm = read_apm(data_dir, start=start, end=end).frame
    return discover_topology(spans=spans, infra=infra, apm=apm)
