"""Nezha's public fault datasets (ESEC/FSE 2023, github.com/IntelligentDDS/Nezha, MIT) -> canonical frames.

Reads the repository as published, from a clone (a work tree) or a bare git snapshot, and
turns one system's days into the canonical frames of ``preprocess/schema.py`` plus the cases
(``input.json`` sentences) and a ground truth in the 2025 format. The source's habits, and
what this reader does with each, are in docs/datasets/nezha.md:

- ``rca_data/<day>/metric/<pod>_metric.csv``: one row a minute per pod for the whole day
  (CPU, memory, network, syscalls, server/client latency percentiles, workload, success
  rate); ``Time`` is Go's ``time.Time`` string (UTC) and is what we trust: ``TimeStamp`` is
  off by 200,000,000 s in some files;
- ``rca_data/<day>/trace/<HH>_<MM>_trace.csv`` and ``log/<HH>_<MM>_log.csv``: only the
  minutes around each injection; spans have no kind and no status, so the kind is inferred
  from the parent/child service change (a child in another service is the server side of
  its parent's client call), and the peer of an unanswered client span from a gRPC
  operation name (``package.Service/Method``) naming a known service;
- ``construct_data/<day>/trace/`` and ``log/``: one fault-free minute of the day (Nezha's
  reference for its event patterns), read like the others: a clean minute in a day whose
  other trace and log minutes all follow an injection (its ``metric/`` files repeat
  ``rca_data``'s, so they are not read again);
- ``<day>-fault_list.json``: the injections (time, pod, ChaosBlade type), grouped by hour;
- files named in the tree but absent from a snapshot (large blobs) are listed as missing,
  never fatal; a malformed file is an issue naming the file, and costs that file only.

TraStrainer (github.com/IntelligentDDS/TraStrainer, by Nezha's authors; its repository has no licence
file, so nothing of it is vendored here: the importer reads a user's snapshot) publishes trace
minutes of the same experiments in the same file format, and more of them: every minute of a
batch (``data/dataset/<hipster|train_ticket>/batches/<batch>/trace/`` and ``.../test/trace/``), not
only the minutes after an injection. A batch names its day only in its ``label.json`` (Nezha's
fault list format). ``trastrainer_trace_folders`` finds a day's folders; ``read_day``'s
``more_traces`` adds their spans to the day's (a span in both counts once).
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
import re
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from preprocess.schema import (
    APM_SCHEMA,
    INFRA_SCHEMA,
    LOG_SCHEMA,
    MESH_CALLER_WAIT_RATIO,
    MESH_CLIENT_LATENCY,
    MESH_SERVER_LATENCY,
    POD_CLIENT_LATENCY_PREFIX,
    SPAN_SCHEMA,
    empty_frame,
)
from rca.errors import DataError
from rca.pods import service_of_pod
from rca.taxonomy import FAULT_TYPES as FAULT_CATEGORIES

log = logging.getLogger(__name__)

# The systems the repository holds, told apart by their pods' names.
SYSTEMS: dict[str, str] = {"onlineboutique": "OnlineBoutique", "trainticket": "TrainTicket"}
# How long Nezha records traces and logs after an injection: a case's window.
CASE_MINUTES = 3
# Nezha's ChaosBlade injection types -> the 2025 challenge's fault types. A thrown exception is a
# JVM exception on a Java service (TrainTicket) and a code error elsewhere.
FAULT_TYPES: dict[str, str] = {
    "cpu_contention": "cpu stress",
    "cpu_consumed": "cpu stress",
    "network_delay": "network delay",
    "return": "code error",
    "exception": "code error",
}
_JAVA_EXCEPTION = "jvm exception"
# Systems whose every service runs on the JVM (TrainTicket is Spring Boot); OnlineBoutique's only
# Java service is adservice. The ground truth's exception type and a reviewed system
# description (`rca system infer --runtime '*=java'`) both follow from this.
JVM_SYSTEMS = frozenset({"trainticket"})


def java_services(day: NezhaDay, *, system: str) -> frozenset[str]:
    """The services of ``day`` that run on the JVM."""
    if system in JVM_SYSTEMS:  # every service the day shows, whichever telemetry was read
        seen = (day.apm["object_id"], day.spans["service"])
        # Log frames carry pods only: their services by the rule the spans are named with (Deployment pods).
        logged = {service_of_pod(pod) for pod in day.logs["pod"].drop_nulls().unique().to_list()}
        return frozenset(name for column in seen for name in column.drop_nulls().unique().to_list()) | logged
    return frozenset({"adservice"})
# What a reason must name for the challenge's keyword check (the truth's key_metrics): the
# canonical KPI each fault type moves in Nezha's telemetry.
_KEY_METRICS: dict[str, list[str]] = {
    "cpu stress": ["pod_cpu_usage"],
    "network delay": ["rrt", "latency"],
    "code error": ["error"],
    "jvm exception": ["exception"],
}
# Per-pod metric columns -> canonical infra_pod KPI (value scaled to the release's unit).
_INFRA_COLUMNS: dict[str, tuple[str, float]] = {
    "CpuUsageRate(%)": ("pod_cpu_usage", 1.0),
    "MemoryUsage(Mi)": ("pod_memory_working_set_bytes", 1024.0 * 1024.0),
    "NetworkReceiveBytes": ("pod_network_receive_bytes", 1.0),
    "NetworkTransmitBytes": ("pod_network_transmit_bytes", 1.0),
    "SyscallRead": ("pod_syscall_read", 1.0),
    "SyscallWrite": ("pod_syscall_write", 1.0),
    "PodClientLatencyP90(s)": (f"{POD_CLIENT_LATENCY_PREFIX}_p90", 1e6),
    "PodClientLatencyP99(s)": (f"{POD_CLIENT_LATENCY_PREFIX}_p99", 1e6),
}
# The service mesh's median latency of each caller -> callee pair, a minute at a time over the
# whole day (OnlineBoutique's metric/source_50.csv, destination_50.csv), as measured on the
# caller's side and on the callee's: infra_pod KPIs of every pod of the callee (the mesh
# measures a workload): the callee's latency as its slowest caller sees it, one value a minute.
# The KPI names are the canonical layout's (preprocess.schema); the ratio is the caller's side over
# the callee's side of one pair and minute.
EDGE_CLIENT_KPI, EDGE_SERVER_KPI, EDGE_RATIO_KPI = MESH_CLIENT_LATENCY, MESH_SERVER_LATENCY, MESH_CALLER_WAIT_RATIO
_EDGE_FILES: dict[str, str] = {"source_50.csv": EDGE_CLIENT_KPI, "destination_50.csv": EDGE_SERVER_KPI}
_GO_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})")
_GRPC_SERVICE = re.compile(r"(?:^|[./])([A-Za-z0-9]+)/[A-Za-z0-9_]+$")


class NezhaError(DataError):
    """The source is not a Nezha repository, or a system/day it does not hold was asked for."""


@dataclass(frozen=True)
class Issue:
    """A source file that was absent from the snapshot (``lost=False``) or unreadable (``lost=True``)."""

    path: str
    reason: str
    lost: bool


@dataclass
class NezhaDay:
    """One day of one system as canonical frames, its injections and what could not be read."""

    day: str
    spans: pl.DataFrame
    logs: pl.DataFrame
    apm: pl.DataFrame
    infra: pl.DataFrame
    faults: list[dict[str, str]]
    issues: list[Issue] = field(default_factory=list)


# --------------------------------------------------------------------------- the source tree


class Source:
    """Files of the repository, from a work tree or a bare git snapshot; absent blobs read as None."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        if (self.root / "rca_data").is_dir() or (self.root / "data" / "dataset").is_dir():
            self.git_dir: Path | None = None  # a Nezha or a TraStrainer work tree
        elif (self.root / "HEAD").is_file() and (self.root / "objects").is_dir():
            self.git_dir = self.root
        elif (self.root / ".git").is_dir():
            self.git_dir = self.root / ".git"
        else:
            raise NezhaError(f"{self.root}: neither a Nezha clone (no rca_data/), a TraStrainer clone (no "
                             "data/dataset/) nor a git snapshot")
        self._tree: dict[str, list[str]] | None = None

    def _git(self, *args: str) -> bytes:
        assert self.git_dir is not None
        done = subprocess.run(["git", f"--git-dir={self.git_dir}", *args], capture_output=True, check=False)
        if done.returncode != 0:
            raise OSError(done.stderr.decode("utf-8", "replace").strip())
        return done.stdout

    def listdir(self, folder: str) -> list[str]:
        """Names of the files directly in ``folder`` (as the tree names them, present or not)."""
        if self.git_dir is None:
            path = self.root / folder
            return sorted(p.name for p in path.iterdir() if p.is_file()) if path.is_dir() else []
        if self._tree is None:
            self._tree = {}
            for line in self._git("ls-tree", "-r", "--name-only", "HEAD").decode().splitlines():
                head, _, name = line.rpartition("/")
                self._tree.setdefault(head, []).append(name)
        return sorted(self._tree.get(folder.rstrip("/"), []))

    def read(self, path: str) -> bytes | None:
        """The file's bytes, or None when the tree names it but its content is not in the snapshot."""
        if self.git_dir is None:
            target = self.root / path
            return target.read_bytes() if target.is_file() else None
        try:
            return self._git("cat-file", "blob", f"HEAD:{path}")
        except OSError:
            return None


# --------------------------------------------------------------------------- helpers


def system_of_pod(pod: str) -> str:
    return "trainticket" if pod.startswith("ts-") else "onlineboutique"


def _go_time(text: str) -> datetime | None:
    match = _GO_TIME.match(text.strip())
    if not match:
        return None
    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)


def _case_uuid(system: str, day: str, index: int) -> str:
    digest = hashlib.sha1(f"nezha/{system}/{day}/{index}".encode()).hexdigest()[:8]
    return f"{digest}-{index}"


# --------------------------------------------------------------------------- metrics


def _read_metric_file(raw: bytes, *, name: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One pod's metric CSV -> (infra_pod rows, APM pod rows)."""
    rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8"))))
    if not rows or "Time" not in rows[0] or "PodName" not in rows[0]:
        raise ValueError("no Time/PodName header")
    infra: dict[str, list[object]] = {k: [] for k in ("time", "component", "kpi_key", "value")}
    apm: dict[str, list[object]] = {k: [] for k in ("time", "object_id", "request", "rrt", "rrt_max", "error_ratio")}
    seen: set[datetime] = set()
    for line, row in enumerate(rows, start=2):
        stamp = _go_time(row["Time"])
        if stamp is None:
            raise ValueError(f"line {line}: field Time {row['Time']!r} is not a time")
        minute = stamp.replace(second=0)
        if minute in seen:  # two samples in one minute (the collector's period drifts): keep the first
            continue
        seen.add(minute)
        pod = row["PodName"]
        for column, (kpi, scale) in _INFRA_COLUMNS.items():
            value = _number(row.get(column))
            if value is None:
                continue
            infra["time"].append(minute)
            infra["component"].append(pod)
            infra["kpi_key"].append(kpi)
            infra["value"].append(value * scale)
        workload, success = _number(row.get("PodWorkload(Ops)")), _number(row.get("PodSuccessRate(%)"))
        latency, latency_max = _number(row.get("PodServerLatencyP90(s)")), _number(row.get("PodServerLatencyP99(s)"))
        apm["time"].append(minute)
        apm["object_id"].append(pod)
        apm["request"].append(None if workload is None else workload * 60.0)
        apm["rrt"].append(None if latency is None else latency * 1e6)
        apm["rrt_max"].append(None if latency_max is None else latency_max * 1e6)
        # A pod that serves nothing reports 0 % success: that is no traffic, not all errors.
        apm["error_ratio"].append(None if success is None or not workload else max(0.0, 100.0 - success))
    if all(rate == 100.0 for rate in apm["error_ratio"] if rate is not None):
        # A success rate of 0 % in every minute is a pod the mesh never measured (adservice's gRPC), not all errors.
        apm["error_ratio"] = [None] * len(apm["error_ratio"])
    infra_frame = _infra_rows(pl.DataFrame(infra))
    apm_frame = pl.DataFrame(apm, schema={"time": APM_SCHEMA["time"], "object_id": pl.Utf8, "request": pl.Float64,
                                          "rrt": pl.Float64, "rrt_max": pl.Float64, "error_ratio": pl.Float64})
    apm_frame = apm_frame.with_columns(
        pl.lit("pod").alias("object_type"), pl.col("request").alias("response"),
        (pl.col("request") * pl.col("error_ratio") / 100.0).alias("error"),
        *(pl.lit(None, pl.Float64).alias(c) for c in ("client_error", "server_error", "timeout", "client_error_ratio",
                                                       "server_error_ratio")),
    ).select(list(APM_SCHEMA))
    return infra_frame, apm_frame


def _read_edge_file(raw: bytes, *, pods: dict[str, list[str]], dropped: list[str]) -> pl.DataFrame:
    """One edge latency CSV (``time``, ``timestamp``, then a ``caller_callee`` column a pair, seconds)
    -> one row per minute and pair whose callee has pods in ``pods`` (service -> its pods):
    ``time``, ``pair``, ``callee``, ``value`` (µs). An empty cell (no such calls) gives no row.

    A pair whose callee has no pod in ``pods`` carries no KPI: its column is added to ``dropped``."""
    reader = csv.reader(io.StringIO(raw.decode("utf-8")))
    header = next(reader, None)
    if not header or header[:2] != ["time", "timestamp"]:
        raise ValueError("no time,timestamp header")
    callees: list[str | None] = []
    for column in header[2:]:
        # Service names may hold "_" too: the split is the one whose callee the day has pods of.
        splits = [column[i + 1:] for i, char in enumerate(column) if char == "_"]
        callee = next((name for name in splits if name in pods), None)
        if not splits:
            raise ValueError(f"column {column!r} is not caller_callee")
        if callee is None:
            dropped.append(column)
        callees.append(callee)
    rows: dict[str, list[object]] = {k: [] for k in ("time", "pair", "callee", "value")}
    seen: set[datetime] = set()
    for line, row in enumerate(reader, start=2):
        if len(row) != len(header):
            raise ValueError(f"line {line}: {len(row)} fields, the header has {len(header)}")
        stamp = _go_time(row[0])
        if stamp is None:
            raise ValueError(f"line {line}: field time {row[0]!r} is not a time")
        minute = stamp.replace(second=0)
        if minute in seen:
            continue
        seen.add(minute)
        for column, pair_callee, cell in zip(header[2:], callees, row[2:], strict=True):
            if pair_callee is None or cell == "":
                continue  # an empty cell: no such calls that minute
            value = _number(cell)
            if value is None:
                raise ValueError(f"line {line}: field {column} {cell!r} is not a number")
            for key, item in (("time", minute), ("pair", column), ("callee", pair_callee), ("value", value * 1e6)):
                rows[key].append(item)
    return pl.DataFrame(rows, schema={"time": INFRA_SCHEMA["time"], "pair": pl.Utf8, "callee": pl.Utf8,
                                      "value": pl.Float64})


def _edge_kpis(sides: dict[str, pl.DataFrame], *, pods: dict[str, list[str]]) -> pl.DataFrame:
    """Edge latency per pair and minute, by the side that measured it -> infra_pod KPIs of every pod
    of the callee: each side's slowest caller in µs (``_EDGE_FILES``) and, where both sides measured
    a pair, how many times the callee's own time the callers wait (``EDGE_RATIO_KPI``: the caller's
    median over the callee's, the largest over callers). A delayed network raises the callers' side
    only; a CPU-starved callee raises both alike and leaves the ratio where it was. A ratio, not a
    difference: the two medians are over different calls, so their difference wanders around 0 and
    changes sign, which no level test reads well (a difference floored at 0 turned a code error's
    small positive minutes into a rise "from 0")."""
    parts = [frame.group_by("time", "callee").agg(pl.col("value").max()).with_columns(pl.lit(kpi).alias("kpi_key"))
             for kpi, frame in sides.items()]
    client, server = sides.get(EDGE_CLIENT_KPI), sides.get(EDGE_SERVER_KPI)
    if client is not None and server is not None:
        ratio = (client.join(server, on=["time", "pair", "callee"], suffix="_server")
               .filter(pl.col("value_server") > 0)
               .group_by("time", "callee").agg((pl.col("value") / pl.col("value_server")).max().alias("value")))
        parts.append(ratio.with_columns(pl.lit(EDGE_RATIO_KPI).alias("kpi_key")))
    if not parts:
        return empty_frame(INFRA_SCHEMA)
    per_callee = pl.concat([p.select("time", "callee", "kpi_key", "value") for p in parts])
    owners = pl.DataFrame([(service, pod) for service, names in pods.items() for pod in names],
                          schema={"callee": pl.Utf8, "component": pl.Utf8}, orient="row")
    return _infra_rows(per_callee.join(owners, on="callee").sort("kpi_key", "time", "component"))


def _infra_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """Columns time, component, kpi_key, value -> infra_pod rows of the canonical schema."""
    schema = pl.Schema({"time": INFRA_SCHEMA["time"], "component": pl.Utf8(), "kpi_key": pl.Utf8(),
                        "value": pl.Float64()})
    return rows.select(list(schema)).cast(schema).with_columns(
        pl.lit("infra_pod").alias("family"), pl.lit(None, pl.Utf8).alias("node"),
        *(pl.lit(None, pl.Utf8).alias(c) for c in ("instance", "device", "mountpoint", "type", "sql_type")),
        pl.lit("nezha").alias("namespace"),
    ).select(list(INFRA_SCHEMA))


def _number(text: str | None) -> float | None:
    """A finite number, or None (an empty, null, NaN or infinite cell, or no number)."""
    if text is None or text.strip() in ("", "null", "NaN", "nan"):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _service_level(apm_pods: pl.DataFrame) -> pl.DataFrame:
    """Service APM rows: the pods of a service summed (requests) and averaged (latency, error ratio)."""
    if apm_pods.height == 0:
        return empty_frame(APM_SCHEMA)
    kpis = [c for c in APM_SCHEMA if c not in ("time", "object_type", "object_id")]
    summed = {"request", "response", "error"}
    return (
        apm_pods.with_columns(pl.col("object_id").map_elements(service_of_pod, return_dtype=pl.Utf8))
        .group_by("time", "object_id")
        .agg([(pl.col(k).sum() if k in summed else pl.col(k).mean()).alias(k) for k in kpis])
        .with_columns(pl.lit("service").alias("object_type"))
        .select(list(APM_SCHEMA))
        .sort("object_id", "time")
    )


# --------------------------------------------------------------------------- traces


def _read_trace_file(raw: bytes) -> pl.DataFrame:
    frame = pl.read_csv(io.BytesIO(raw), schema_overrides={"TraceID": pl.Utf8, "SpanID": pl.Utf8, "ParentID": pl.Utf8,
                                                            "PodName": pl.Utf8, "OperationName": pl.Utf8,
                                                            "StartTimeUnixNano": pl.Int64, "EndTimeUnixNano": pl.Int64,
                                                            "Duration": pl.Int64})
    needed = ["TraceID", "SpanID", "ParentID", "PodName", "OperationName", "StartTimeUnixNano", "Duration"]
    absent = [c for c in needed if c not in frame.columns]
    if absent:
        raise ValueError(f"missing column(s) {absent}")
    return frame.select(needed)


def _spans(raw_spans: pl.DataFrame) -> pl.DataFrame:
    """Nezha's flat spans -> SPAN_SCHEMA, with the kind and the peer inferred (see the module doc)."""
    if raw_spans.height == 0:
        return empty_frame(SPAN_SCHEMA)
    spans = (
        raw_spans.unique(subset=["TraceID", "SpanID"], keep="first", maintain_order=True)  # minute-file borders repeat spans
        .select(
            pl.col("TraceID").alias("trace_id"),
            pl.col("SpanID").alias("span_id"),
            pl.when(pl.col("ParentID").is_in(["root", ""])).then(None).otherwise(pl.col("ParentID")).alias("parent_span_id"),
            pl.col("OperationName").alias("operation"),
            pl.col("PodName").map_elements(service_of_pod, return_dtype=pl.Utf8).alias("service"),
            pl.col("PodName").alias("pod"),
            pl.lit(None, pl.Utf8).alias("node"),
            (pl.col("StartTimeUnixNano") // 1000).cast(pl.Datetime("us", "UTC")).alias("start"),
            pl.col("Duration").alias("duration_us"),
        )
    )
    spans = spans.filter(pl.col("start") > pl.datetime(2000, 1, 1, time_zone="UTC"))  # a start of 0 is no time
    parents = spans.select("trace_id", pl.col("span_id").alias("parent_span_id"), pl.col("service").alias("parent_service"))
    linked = spans.join(parents, on=["trace_id", "parent_span_id"], how="left")
    crossing = linked.filter(pl.col("parent_service").is_not_null() & (pl.col("parent_service") != pl.col("service")))
    # A parent with a child in another service is the client side of that call.
    callers = crossing.group_by("trace_id", "parent_span_id").agg(pl.col("service").first().alias("callee")).rename(
        {"parent_span_id": "span_id"})
    known = {s.lower(): s for s in spans["service"].unique().to_list() if s}
    named = pl.col("operation").str.extract(_GRPC_SERVICE.pattern, 1).str.to_lowercase()
    out = (
        linked.join(callers, on=["trace_id", "span_id"], how="left")
        .with_columns(named.replace_strict(known, default=None, return_dtype=pl.Utf8).alias("_named"))
        .with_columns(
            pl.when(pl.col("callee").is_not_null()).then(pl.lit("client"))
            .when(pl.col("parent_span_id").is_null() | (pl.col("parent_service") != pl.col("service"))).then(pl.lit("server"))
            .when(pl.col("_named").is_not_null() & (pl.col("_named") != pl.col("service"))).then(pl.lit("client"))
            .otherwise(pl.lit("internal")).alias("span_kind"),
        )
        .with_columns(
            pl.when(pl.col("span_kind") == "client").then(pl.coalesce("callee", "_named")).alias("peer_service"),
            pl.lit(None, pl.Int64).alias("status_code"),
            pl.lit(False).alias("is_error"),
        )
    )
    return out.select(list(SPAN_SCHEMA)).cast(pl.Schema(SPAN_SCHEMA))


# --------------------------------------------------------------------------- logs


def _ragged_csv(raw: bytes) -> tuple[pl.DataFrame, int]:
    """A CSV whose last column holds unquoted commas: the extra fields are that column's text."""
    reader = csv.reader(io.StringIO(raw.decode("utf-8", errors="replace")))
    header = next(reader)
    rows, repaired = [], 0
    for row in reader:
        if len(row) > len(header):
            row = [*row[:len(header) - 1], ",".join(row[len(header) - 1:])]
            repaired += 1
        if len(row) == len(header):
            rows.append(row)
    return pl.DataFrame(rows, schema=header, orient="row"), repaired


def _read_log_file(raw: bytes) -> pl.DataFrame:
    try:
        frame = pl.read_csv(io.BytesIO(raw), infer_schema=False)
    except pl.exceptions.ComputeError:
        # Some minute files hold lines whose Log field was written without quotes around its commas.
        frame, repaired = _ragged_csv(raw)
        log.info("repaired %d log row(s) whose unquoted Log field held commas", repaired)
    needed = ["TimeUnixNano", "PodName", "Log"]
    absent = [c for c in needed if c not in frame.columns]
    if absent:
        raise ValueError(f"missing column(s) {absent}")
    node = pl.col("Node") if "Node" in frame.columns else pl.lit(None, pl.Utf8)
    # Timestamp (ISO, UTC, with or without its Z) is what we trust: TimeUnixNano holds garbage
    # (negative numbers) on some lines of a multi-line stack trace.
    from_iso = (pl.col("Timestamp").str.replace(r"Z$", "").str.to_datetime("%Y-%m-%dT%H:%M:%S%.f", time_unit="us",
                                                                          strict=False).dt.replace_time_zone("UTC")
                if "Timestamp" in frame.columns else pl.lit(None, pl.Datetime("us", "UTC")))
    from_nanos = (pl.col("TimeUnixNano").cast(pl.Int64, strict=False) // 1000).cast(pl.Datetime("us", "UTC"))
    sane = pl.datetime(2000, 1, 1, time_zone="UTC")
    # Log holds the container runtime's JSON ({"log": "<line>\n", "stream", "time"}); the line is what was written.
    message = pl.col("Log").str.json_path_match("$.log").str.strip_chars_end("\n")
    return frame.select(
        pl.coalesce(from_iso, pl.when(from_nanos > sane).then(from_nanos)).alias("time"),
        pl.lit("nezha").alias("namespace"),
        pl.col("PodName").alias("pod"),
        node.alias("node"),
        pl.coalesce(message, pl.col("Log")).alias("message"),
    ).filter(pl.col("time").is_not_null()).unique(keep="first", maintain_order=True)


# --------------------------------------------------------------------------- days and cases


def days_of(source: Source, *, system: str) -> list[str]:
    """The days of ``system`` the repository holds (told apart by the pods in their fault lists)."""
    days = []
    for day in source.listdir("rca_data") or sorted({n for n in _subdirs(source, "rca_data")}):
        raw = source.read(f"rca_data/{day}/{day}-fault_list.json")
        if raw is None:
            continue
        faults = _faults(raw, path=f"rca_data/{day}/{day}-fault_list.json")
        if faults and system_of_pod(faults[0]["inject_pod"]) == system:
            days.append(day)
    return days


# TraStrainer's folder of each system Nezha holds.
TRASTRAINER_SYSTEMS: dict[str, str] = {"onlineboutique": "hipster", "trainticket": "train_ticket"}


def trastrainer_trace_folders(source: Source, *, system: str, day: str) -> list[str]:
    """The trace folders of TraStrainer's batches of ``system`` whose injections fall on ``day``."""
    base = f"data/dataset/{TRASTRAINER_SYSTEMS[system]}"
    folders = []
    for batch in [f"{base}/batches/{name}" for name in _subdirs(source, f"{base}/batches")] + [f"{base}/test"]:
        raw = source.read(f"{batch}/label.json")
        if raw is None:
            continue
        faults = _faults(raw, path=f"{batch}/label.json")
        if faults and faults[0]["inject_time"][:10] == day:
            folders.append(f"{batch}/trace")
    return folders


def _subdirs(source: Source, folder: str) -> list[str]:
    if source.git_dir is None:
        path = source.root / folder
        return sorted(p.name for p in path.iterdir() if p.is_dir()) if path.is_dir() else []
    source.listdir(folder)  # fills the tree
    assert source._tree is not None
    prefix = folder.rstrip("/") + "/"
    return sorted({key[len(prefix):].split("/")[0] for key in source._tree if key.startswith(prefix)})


def _faults(raw: bytes, *, path: str) -> list[dict[str, str]]:
    try:
        grouped = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise NezhaError(f"{path}: not JSON: {exc}") from exc
    faults = []
    for hour in sorted(grouped):
        for entry in grouped[hour]:
            absent = [k for k in ("inject_time", "inject_pod", "inject_type") if k not in entry]
            if absent:
                raise NezhaError(f"{path}: hour {hour}: injection lacks field(s) {absent}")
            faults.append({k: str(entry[k]) for k in ("inject_time", "inject_pod", "inject_type")})
    return sorted(faults, key=lambda f: f["inject_time"])


def _each_file(source: Source, folder: str, issues: list[Issue]) -> Iterator[tuple[str, bytes]]:
    for name in source.listdir(folder):
        path = f"{folder}/{name}"
        raw = source.read(path)
        if raw is None:
            issues.append(Issue(path=path, reason="named in the repository but absent from this snapshot", lost=False))
            continue
        yield path, raw


def _read_each(source: Source, folder: str, read: Callable[[bytes], pl.DataFrame],
               issues: list[Issue]) -> list[pl.DataFrame]:
    """Every file of ``folder`` read by ``read``; a file that fails is an issue and costs itself only."""
    parts = []
    for path, raw in _each_file(source, folder, issues):
        try:
            parts.append(read(raw))
        except (ValueError, pl.exceptions.PolarsError) as exc:
            issues.append(Issue(path=path, reason=str(exc), lost=True))
    return parts


def read_day(source: Source, *, day: str, mesh: bool = True, traces: bool = True, metrics: bool = True,
             more_traces: Sequence[tuple[Source, str]] = ()) -> NezhaDay:
    """Every telemetry file of one day, as canonical frames; absent and bad files become issues.

    Ablations, the day as a system with less telemetry would show it: ``mesh=False`` leaves
    the service mesh's edge latency files out (TrainTicket's days have none); ``traces=False``
    leaves the spans out (metrics and logs only, as from Prometheus and Loki); ``metrics=False``
    leaves every metric file out, the mesh's included (traces and logs only, as from an
    OpenTelemetry collector with no metrics pipeline). ``more_traces``: (source, folder) pairs of
    trace minutes of the same day from elsewhere (``trastrainer_trace_folders``), read as the day's own.
    """
    issues: list[Issue] = []
    fault_path = f"rca_data/{day}/{day}-fault_list.json"
    raw_faults = source.read(fault_path)
    if raw_faults is None:
        raise NezhaError(f"{source.root}: {fault_path} is absent: not a Nezha day")
    faults = _faults(raw_faults, path=fault_path)

    infra_parts, apm_parts = [], []
    edge_files: list[tuple[str, bytes, str]] = []
    for path, raw in _each_file(source, f"rca_data/{day}/metric", issues) if metrics else ():
        if not path.endswith("_metric.csv"):
            kpi = _EDGE_FILES.get(path.rsplit("/", 1)[-1])
            if kpi is not None and mesh:
                edge_files.append((path, raw, kpi))
            continue  # dependency.csv, front_service.csv: the call graph (the traces give it), the entry's latency
        try:
            infra_part, apm_part = _read_metric_file(raw, name=path)
        except (ValueError, UnicodeDecodeError, csv.Error) as exc:
            issues.append(Issue(path=path, reason=str(exc), lost=True))
            continue
        infra_parts.append(infra_part)
        apm_parts.append(apm_part)

    pods: dict[str, list[str]] = {}
    for pod in sorted({p for part in apm_parts for p in part.get_column("object_id").unique().to_list()}):
        pods.setdefault(service_of_pod(pod), []).append(pod)
    sides: dict[str, pl.DataFrame] = {}
    for path, raw, kpi in edge_files:
        dropped: list[str] = []
        try:
            sides[kpi] = _read_edge_file(raw, pods=pods, dropped=dropped)
        except (ValueError, UnicodeDecodeError, csv.Error) as exc:
            issues.append(Issue(path=path, reason=str(exc), lost=True))
            continue
        if dropped:  # the pod files' own issues say why they are missing
            log.warning("%s: columns %s not imported: no pod file of their callee", path, ", ".join(dropped))
    if sides:
        infra_parts.append(_edge_kpis(sides, pods=pods))

    # The fault-free minute joins the others: spans and lines repeated across files count once.
    span_parts, log_parts = [], []
    for folder in (f"rca_data/{day}", f"construct_data/{day}"):
        if traces:
            span_parts += _read_each(source, f"{folder}/trace", _read_trace_file, issues)
        log_parts += _read_each(source, f"{folder}/log", _read_log_file, issues)
    for extra, folder in more_traces if traces else ():
        span_parts += _read_each(extra, folder, _read_trace_file, issues)

    apm_pods = pl.concat(apm_parts) if apm_parts else empty_frame(APM_SCHEMA)
    return NezhaDay(
        day=day,
        spans=_spans(pl.concat(span_parts)) if span_parts else empty_frame(SPAN_SCHEMA),
        logs=pl.concat(log_parts).cast(pl.Schema(LOG_SCHEMA)) if log_parts else empty_frame(LOG_SCHEMA),
        apm=pl.concat([apm_pods, _service_level(apm_pods)]),
        infra=pl.concat(infra_parts) if infra_parts else empty_frame(INFRA_SCHEMA),
        faults=faults,
        issues=issues,
    )


def cases_of(day: NezhaDay, *, system: str, java_services: frozenset[str]) -> tuple[list[dict], list[dict]]:
    """``input.json`` entries and ground-truth records (2025 format) for the injections of a day."""
    cases, truths = [], []
    for index, fault in enumerate(day.faults):
        start = datetime.strptime(fault["inject_time"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        end = start + timedelta(minutes=CASE_MINUTES)
        kind = fault["inject_type"]
        if kind not in FAULT_TYPES:
            raise NezhaError(f"rca_data/{day.day}/{day.day}-fault_list.json: unknown inject_type {kind!r}")
        pod = fault["inject_pod"]
        service = service_of_pod(pod)
        fault_type = _JAVA_EXCEPTION if kind == "exception" and service in java_services else FAULT_TYPES[kind]
        uuid = _case_uuid(system, day.day, index)
        stamp = (start.strftime("%Y-%m-%dT%H:%M:%SZ"), end.strftime("%Y-%m-%dT%H:%M:%SZ"))
        cases.append({"Anomaly Description": f"The system experienced an anomaly from {stamp[0]} to {stamp[1]}. "
                                             "Please infer the possible cause.", "uuid": uuid})
        truths.append({
            "fault_category": FAULT_CATEGORIES[fault_type], "fault_type": fault_type, "instance_type": "service",
            # One replica a service: the pod and its service name the same fault.
            "service": service, "instance": [service, pod], "source": "", "destination": "",
            "start_time": stamp[0], "end_time": stamp[1], "uuid": uuid,
            "key_observations": [], "key_metrics": _KEY_METRICS[fault_type], "fault_description": [fault_type],
            "nezha_inject_type": kind,
        })
    return cases, truths
