"""Canonical frames -> a dataset in the tool's on-disk layout (the 2025 release layout).

The one writer every importer goes through (``rca import FORMAT``): a foreign format is read
into the canonical frames of ``preprocess/schema.py`` and written here, so the nightly job,
the index and the diagnoser read an imported dataset exactly as they read the challenge's
release. Reading a written file back with ``preprocess.readers`` gives the frame that was
written (a test holds the round trip), with one exception by design: a span frame may carry the
raw ``rpc.service`` / ``db.system`` values and the host a client span connected to
(``preprocess.schema.SPAN_PEER_TAGS``), written as tags (the host as ``server.address``), and
the reader names the peer of a client span that names none from them, with the system it is
given. The language its process's instrumentation states (``sdk_language``) is written as the
process tag it came from (``telemetry.sdk.language`` or ``jaeger.version``), where Jaeger puts it.

Rules:

- files are named by the CST day and hour of their rows (the layout's convention,
  ``rca.timeutil``), whatever zone the source used; every instant inside stays UTC;
- writing into an existing dataset merges: the rows already in a file are kept, the new rows
  are added and exact duplicates dropped, so several exports of one incident land in one
  dataset and re-running an import changes nothing;
- every file is written atomically.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from preprocess import layout
from preprocess.schema import (
    APM_KPIS,
    APM_SCHEMA,
    INFRA_SCHEMA,
    LOG_SCHEMA,
    SPAN_PEER_TAG_KEYS,
    SPAN_RAW_TAGS,
    SPAN_SCHEMA,
    language_key,
)
from rca.atomic import atomic_path
from rca.errors import InputError

log = logging.getLogger(__name__)

_FILE_ZONE = "Asia/Shanghai"  # file names of the layout are CST (docs/data-contract.md section 1)
_KV = pa.struct([("key", pa.string()), ("type", pa.string()), ("value", pa.string())])
_REF = pa.struct([("refType", pa.string()), ("spanID", pa.string()), ("traceID", pa.string())])
_PROCESS = pa.struct([("serviceName", pa.string()), ("tags", pa.list_(_KV))])


class DatasetWriteError(InputError):
    """Frames that cannot be written as a dataset (a wrong schema, rows without a time)."""


def _check(frame: pl.DataFrame, schema: dict[str, pl.DataType], *, what: str,
           optional: dict[str, pl.DataType] | None = None) -> pl.DataFrame:
    """``frame`` in ``schema``, then the ``optional`` columns (null where the frame lacks one)."""
    absent = [name for name in schema if name not in frame.columns]
    if absent:
        raise DatasetWriteError(f"{what} frame lacks column(s) {absent}; expected {list(schema)}")
    frame = frame.select([pl.col(name).cast(dtype) for name, dtype in schema.items()]
                         + [(pl.col(name) if name in frame.columns else pl.lit(None)).cast(dtype).alias(name)
                            for name, dtype in (optional or {}).items()])
    timed = "start" if what == "spans" else "time"
    if frame[timed].null_count():
        raise DatasetWriteError(f"{what}: {frame[timed].null_count()} row(s) without {timed!r}")
    return frame


def _with_slot(frame: pl.DataFrame, time_column: str) -> pl.DataFrame:
    local = pl.col(time_column).dt.convert_time_zone(_FILE_ZONE)
    return frame.with_columns(local.dt.strftime("%Y-%m-%d").alias("_day"), local.dt.hour().alias("_hour"))


def _merge_write(path: Path, table: pa.Table, *, key: list[str] | None) -> Path:
    """Write ``table`` to ``path``, keeping the rows a file already there holds (deduplicated)."""
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    if path.exists():
        old = pl.read_parquet(path)
        if old.columns == frame.columns:
            frame = pl.concat([old, frame.cast(old.schema)], how="vertical_relaxed")
        else:  # an older export with other columns: keep its rows as they were
            frame = pl.concat([old, frame], how="diagonal_relaxed")
    frame = frame.unique(subset=key, keep="first", maintain_order=True)
    with atomic_path(path) as tmp:
        pq.write_table(frame.to_arrow(), tmp, compression="zstd")
    return path


def _hour_file(out: Path, family: str, *, day: str, hour: int) -> Path:
    """Where ``family`` ("log" or "trace") writes a CST day's hour: ``<prefix>_<day>_<HH>-00-00.parquet``
    in its directory, the name ``layout.hour_files`` looks the hour up by."""
    sub, prefix = layout.HOURLY_DIRS[family]
    return out / day / sub / f"{prefix}_{day}_{hour:02d}-00-00.parquet"


def _iso(column: str) -> pl.Expr:
    return pl.col(column).dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ")


# --------------------------------------------------------------------------- traces


def _kv(entries: Iterable[tuple[str, str, str | None]]) -> list[dict[str, str]]:
    return [{"key": k, "type": t, "value": v} for k, t, v in entries if v is not None]


def _span_table(spans: pl.DataFrame) -> pa.Table:
    rows = spans.to_dicts()
    references, tags, process = [], [], []
    for row in rows:
        parent = row["parent_span_id"]
        references.append([{"refType": "CHILD_OF", "spanID": parent, "traceID": row["trace_id"]}] if parent else [])
        tags.append(_kv([
            ("span.kind", "string", row["span_kind"]),
            ("status.code", "int64", None if row["status_code"] is None else str(row["status_code"])),
            ("error", "bool", "true" if row["is_error"] else None),
            ("peer.service", "string", row["peer_service"]),
            # The raw tags the reader names a peer from with the system's [traces] rules.
            *((key, "string", row[column]) for column, key in SPAN_PEER_TAG_KEYS.items()),
        ]))
        language = row["sdk_language"]
        process.append({"serviceName": row["service"],
                        "tags": _kv([("name", "string", row["pod"]), ("node_name", "string", row["node"]),
                                     *(((language_key(language), "string", language),) if language else ())])})
    start_us = spans["start"].dt.epoch("us")
    return pa.table({
        "traceID": pa.array(spans["trace_id"].to_list(), pa.string()),
        "spanID": pa.array(spans["span_id"].to_list(), pa.string()),
        "operationName": pa.array(spans["operation"].to_list(), pa.string()),
        "references": pa.array(references, pa.list_(_REF)),
        "startTime": pa.array(start_us.to_list(), pa.int64()),
        "duration": pa.array(spans["duration_us"].to_list(), pa.int64()),
        "tags": pa.array(tags, pa.list_(_KV)),
        "process": pa.array(process, _PROCESS),
    })


def _write_spans(out: Path, spans: pl.DataFrame) -> list[Path]:
    written = []
    for (day, hour), part in _with_slot(spans, "start").sort("start").group_by(["_day", "_hour"], maintain_order=True):
        path = _hour_file(out, "trace", day=day, hour=hour)
        written.append(_merge_write(path, _span_table(part.drop("_day", "_hour")), key=["traceID", "spanID"]))
    return written


# --------------------------------------------------------------------------- logs


def _write_logs(out: Path, logs: pl.DataFrame) -> list[Path]:
    written = []
    for (day, hour), part in _with_slot(logs, "time").sort("time").group_by(["_day", "_hour"], maintain_order=True):
        table = part.select(
            pl.col("namespace").alias("k8_namespace"),
            _iso("time").alias("@timestamp"),
            pl.lit(None, pl.Utf8).alias("agent_name"),
            pl.col("pod").alias("k8_pod"),
            pl.col("node").alias("k8_node_name"),
            pl.col("message"),
        ).to_arrow()
        path = _hour_file(out, "log", day=day, hour=hour)
        written.append(_merge_write(path, table, key=None))
    return written


# --------------------------------------------------------------------------- metrics


def _safe_name(text: str) -> str:
    if "/" in text or not text.strip():
        raise DatasetWriteError(f"cannot name a file after {text!r}")
    return text


def _write_apm(out: Path, apm: pl.DataFrame) -> list[Path]:
    written = []
    frame = _with_slot(apm, "time").sort("time")
    for (day, level, object_id), part in frame.group_by(["_day", "object_type", "object_id"], maintain_order=True):
        if level not in layout.APM_DIRS:
            raise DatasetWriteError(f"apm: object_type {level!r} of {object_id!r} is not one of {list(layout.APM_DIRS)}")
        sub, prefix = layout.APM_DIRS[str(level)]
        table = part.select(_iso("time").alias("time"), "object_id", "object_type", *APM_KPIS).to_arrow()
        path = out / str(day) / layout.METRIC_DIR / "apm" / sub / f"{prefix}{_safe_name(str(object_id))}_{day}.parquet"
        written.append(_merge_write(path, table, key=["time", "object_id"]))
    return written


def _write_infra(out: Path, infra: pl.DataFrame) -> list[Path]:
    written = []
    frame = _with_slot(infra, "time").sort("time")
    for (day, family, kpi), part in frame.group_by(["_day", "family", "kpi_key"], maintain_order=True):
        if family not in layout.INFRA_DIRS:
            raise DatasetWriteError(f"infra: unknown family {family!r}; expected one of {list(layout.INFRA_DIRS)}")
        sub, prefix = layout.INFRA_DIRS[str(family)]
        # The release's long format: the component sits in `pod` (infra_pod) or `kubernetes_node`
        # (infra_node); a storage family's rows name no component (the family says which it is).
        pod = pl.col("component") if family == "infra_pod" else pl.lit(None, pl.Utf8)
        node = pl.col("component") if family == "infra_node" else pl.col("node")
        table = part.select(
            _iso("time").alias("time"),
            pl.col("kpi_key"),
            pod.alias("pod"),
            pl.coalesce(pl.col("node"), pl.col("instance")).alias("instance") if family == "infra_pod" else pl.col("instance"),
            node.alias("kubernetes_node"),
            "device", "mountpoint", "namespace", "type", "sql_type",
            pl.col("value").alias(str(kpi)),
        ).to_arrow()
        path = out / str(day) / layout.METRIC_DIR / sub / f"{prefix}{_safe_name(str(kpi))}_{day}.parquet"
        written.append(_merge_write(path, table, key=["time", "pod", "kubernetes_node", "device", "type", "sql_type"]))
    return written


def write_frames(
    out: Path,
    *,
    spans: pl.DataFrame | None = None,
    logs: pl.DataFrame | None = None,
    apm: pl.DataFrame | None = None,
    infra: pl.DataFrame | None = None,
) -> list[Path]:
    """Write (merge) canonical frames into the dataset at ``out``; returns the files written.

    ``spans`` is in ``SPAN_SCHEMA``, with the ``SPAN_RAW_TAGS`` columns too where the source had them.
    """
    out = Path(out)
    written: list[Path] = []
    if spans is not None and spans.height:
        written += _write_spans(out, _check(spans, SPAN_SCHEMA, what="spans", optional=SPAN_RAW_TAGS))
    if logs is not None and logs.height:
        written += _write_logs(out, _check(logs, LOG_SCHEMA, what="logs"))
    if apm is not None and apm.height:
        written += _write_apm(out, _check(apm, APM_SCHEMA, what="apm"))
    if infra is not None and infra.height:
        written += _write_infra(out, _check(infra, INFRA_SCHEMA, what="infra"))
    log.debug("wrote %d file(s) under %s", len(written), out)
    return written
