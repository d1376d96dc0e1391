"""Canonical in-memory form of every telemetry family, as returned by the readers.

All times are ``pl.Datetime("us", "UTC")``; the string ``"null"`` of the raw files
becomes a real null; trace times are converted from µs integers. Detectors, the
index and tests rely on exactly these columns.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import polars as pl

TIME = pl.Datetime("us", "UTC")

# APM, wide: one row per (object, minute). object_type is "pod" or "service".
APM_SCHEMA: dict[str, pl.DataType] = {
    "time": TIME,
    "object_type": pl.Utf8(),
    "object_id": pl.Utf8(),
    "request": pl.Float64(),
    "response": pl.Float64(),
    "rrt": pl.Float64(),
    "rrt_max": pl.Float64(),
    "error": pl.Float64(),
    "client_error": pl.Float64(),
    "server_error": pl.Float64(),
    "timeout": pl.Float64(),
    "error_ratio": pl.Float64(),
    "client_error_ratio": pl.Float64(),
    "server_error_ratio": pl.Float64(),
}
APM_KPIS: tuple[str, ...] = tuple(k for k in APM_SCHEMA if k not in ("time", "object_type", "object_id"))

# Service-mesh edge KPIs, carried as infra_pod series of every pod of the callee (a mesh measures
# a workload) by importers whose source has them (Nezha's OnlineBoutique): the median latency of
# the calls into a service as its callers measure it and as the service itself does, and the
# first over the second (how many times the callee's own time its callers wait). The ratio is not
# an ``rrt*`` name on purpose: the runbooks' latency clue (``metric:rrt*:up``) would count it twice.
MESH_CLIENT_PREFIX, MESH_SERVER_PREFIX = "rrt_client", "rrt_server"  # any quantile of the two sides
MESH_CLIENT_LATENCY = f"{MESH_CLIENT_PREFIX}_p50"
MESH_SERVER_LATENCY = f"{MESH_SERVER_PREFIX}_p50"
MESH_CALLER_WAIT_RATIO = "caller_wait_ratio_p50"

# A pod's latency of the calls it makes (any quantile), as its own client measures it (Nezha's
# PodClientLatency): the time of its callees and of the network between, not of the pod's own work.
POD_CLIENT_LATENCY_PREFIX = "pod_client_latency"

# Infra and TiDB, long: one row per (series, minute).
# family: infra_pod | infra_node | infra_tidb | infra_tikv | infra_pd
# component: the answerable component the series belongs to: pod name for infra_pod,
#   node name for infra_node, "tidb-tidb" / "tidb-tikv" / "tidb-pd" for the TiDB families.
# node: hosting node for infra_pod (raw `instance`), the node itself for infra_node.
INFRA_SCHEMA: dict[str, pl.DataType] = {
    "time": TIME,
    "family": pl.Utf8(),
    "kpi_key": pl.Utf8(),
    "component": pl.Utf8(),
    "node": pl.Utf8(),
    "instance": pl.Utf8(),
    "device": pl.Utf8(),
    "mountpoint": pl.Utf8(),
    "namespace": pl.Utf8(),
    "type": pl.Utf8(),
    "sql_type": pl.Utf8(),
    "value": pl.Float64(),
}

LOG_SCHEMA: dict[str, pl.DataType] = {
    "time": TIME,
    "namespace": pl.Utf8(),
    "pod": pl.Utf8(),
    "node": pl.Utf8(),
    "message": pl.Utf8(),
}

# One row per span, flattened from the Jaeger nesting.
SPAN_SCHEMA: dict[str, pl.DataType] = {
    "trace_id": pl.Utf8(),
    "span_id": pl.Utf8(),
    "parent_span_id": pl.Utf8(),  # from the CHILD_OF reference; null for roots
    "operation": pl.Utf8(),
    "service": pl.Utf8(),  # process.serviceName, renamed by the system's traces.service_aliases
    "pod": pl.Utf8(),  # process tag `name` or `podName`
    "node": pl.Utf8(),  # process tag `node_name` or `nodeName`
    "span_kind": pl.Utf8(),  # "server" / "client" / null
    # Callee a client span targets, else null: its peer.service tag, else the system's [traces]
    # rules (rca.system.TraceNaming) on rpc.service, db.system and the operation name, else the
    # first DNS label of the host it connected to (server.address, net.peer.name, the URL's host).
    "peer_service": pl.Utf8(),
    "start": TIME,
    "duration_us": pl.Int64(),
    "status_code": pl.Int64(),  # gRPC status code, 0 = OK
    "is_error": pl.Boolean(),  # error tag, non-zero status or http status >= 500
}

# The raw span tags a system's [traces] rules name a client span's peer from, as columns: an
# importer of a foreign trace format adds them to its span frame (optional for the dataset
# writer, which writes them back as tags), so that the peer is named when the dataset is read,
# with the user's system rather than at import. ``read_traces(..., peer_tags=True)`` returns
# them too (``rca system infer`` lists the values no rule names). ``peer_host`` is the host a
# client span connected to, as written (``orders-db:5432``): OpenTelemetry's ``server.address``,
# else the older ``net.peer.name``, else the host of ``url.full`` / ``http.url``; written back as
# ``server.address``.
SPAN_PEER_TAGS: dict[str, pl.DataType] = {"rpc_service": pl.Utf8(), "db_system": pl.Utf8(), "peer_host": pl.Utf8()}
SPAN_PEER_TAG_KEYS: dict[str, str] = {  # column -> tag
    "rpc_service": "rpc.service", "db_system": "db.system", "peer_host": "server.address",
}
# The language the instrumentation of a span's process states, as written (``sdk_language``):
# OpenTelemetry's resource attribute ``telemetry.sdk.language`` (the semantic conventions' values:
# ``java``, ``dotnet``, ``nodejs`` ...), else a Jaeger client's process tag ``jaeger.version``
# (``Java-1.8.1``, ``Go-2.30.0``); first found wins. A trace importer carries it from the
# resource / process tags, the dataset keeps it as a process tag (where Jaeger puts it), and
# ``rca system infer`` drafts a service's runtime from it: what it means is infer's to say.
SPAN_LANGUAGE_KEYS: tuple[str, ...] = ("telemetry.sdk.language", "jaeger.version")
# A Jaeger client's version: its language, a dash, the version (``Java-1.8.1``, ``C++-0.4.2``).
# No OpenTelemetry language value has that shape, so the value tells which key stated it.
_JAEGER_CLIENT_VERSION = re.compile(r"^[A-Za-z][A-Za-z+#]*-\d")
# Every raw tag column a span frame may carry besides ``SPAN_SCHEMA``: the peer tags and the
# stated language. ``read_traces(..., peer_tags=True)`` returns them all.
SPAN_RAW_TAGS: dict[str, pl.DataType] = {**SPAN_PEER_TAGS, "sdk_language": pl.Utf8()}
# What a foreign-format importer returns for spans.
SPAN_IMPORT_SCHEMA: dict[str, pl.DataType] = {**SPAN_SCHEMA, **SPAN_RAW_TAGS}

FAMILIES: tuple[str, ...] = ("apm", "infra", "log", "trace")


def language_key(value: str) -> str:
    """The key of ``SPAN_LANGUAGE_KEYS`` that stated ``value``: ``jaeger.version`` for a Jaeger client's
    version (``Java-1.8.1``), else ``telemetry.sdk.language``; where a writer puts an ``sdk_language``
    back, and how infer names where a runtime came from."""
    return SPAN_LANGUAGE_KEYS[1] if _JAEGER_CLIENT_VERSION.match(value) else SPAN_LANGUAGE_KEYS[0]


def empty_frame(schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def strongest_first(events: pl.DataFrame, *ties: str) -> pl.DataFrame:
    """Events by descending ``z``, ties broken by the ``ties`` columns.

    Why: z is capped (many events share the cap), and the rows come out of group-bys whose
    order polars does not fix; sorting on z alone let equal events swap places from run to
    run, and with them the evidence lines a case quotes.
    """
    return events.sort(["z", *ties], descending=[True] + [False] * len(ties), nulls_last=True)


# --- What a detector declares (the contract of ``preprocess.detect``) -------------------

# Plain dicts of dtype instances (``==`` ignores key order, ``{**a, **b}`` stays a dict):
# ``DataFrame.cast`` is typed for polars' own ``pl.Schema``, so a cast wraps one in it.
Schema = dict[str, pl.DataType]


@dataclass(frozen=True)
class FeatureTable:
    """One table a detector writes at build time and reads back at score time.

    ``scope`` says how the index stores and loads it:

    * ``minute``: per-minute rows with a ``time`` column, one file per day; a query loads
      the minutes of [baseline start, window end];
    * ``interval``: rows valid from ``first`` to ``last``, one file per day; a query loads
      the rows overlapping the window;
    * ``index``: one file for the whole index (e.g. the log templates of every day).
    """

    name: str
    schema: Schema
    scope: Literal["minute", "interval", "index"] = "minute"


@dataclass(frozen=True)
class RawInput:
    """The raw telemetry a detector's build reads for one CST day.

    ``sources`` are reader families (``apm``, ``infra``: whole-day files; ``log``,
    ``trace``: hour files). With ``per_hour`` the day is read and handed over hour by
    hour, which bounds memory on a full-scale day. ``rows_read`` names the manifest
    counter of raw rows read (None: not counted). With ``ordered`` the whole-day sources
    come sorted as ``read_apm`` / ``read_infra`` sort them; a build whose tables do not
    depend on the rows' order sets it False and gets them in file order, unsorted.
    """

    sources: tuple[str, ...]
    per_hour: bool = False
    rows_read: str | None = None
    ordered: bool = True
