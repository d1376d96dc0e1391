"""On-disk evidence index: layout, manifest, atomic writes and window loads.

Layout (schema version ``SCHEMA_VERSION``)::

    <index_dir>/
      manifest.json                      schema version + one entry per finished partition
      log_templates.parquet              template_id, template (Drain3 clusters, all days)
      log_miner_state.bin                Drain3 miner state (Drain3's own format: zlib + base64 jsonpickle)
      day=<YYYY-MM-DD>/                  CST day, like the raw data directories
        metric_series.parquet            time, component, kind, kpi, value         (per minute)
        metric_placement.parquet         pod, node, first, last                    (pod -> node)
        log_counts.parquet               time, pod, node, template_id, count, example (per minute)
        trace_edges.parquet              time, caller, caller_pod, callee, callee_pod, callee_node,
                                         operation, count, errors, p50_us, p95_us, mean_us

The tables are the ``feature_tables`` the detectors of ``preprocess.detect`` declare (their
schemas live there); ``scope`` says which are per day and which index-wide.
A partition is one (day, family) pair, family being a detector name (``metric``, ``log``,
``trace``). Its
manifest entry records the input fingerprint (name, size and mtime of every raw file),
so the nightly job skips partitions whose inputs did not change. Every file is written
to a temporary file in the same directory and moved into place with ``os.replace``;
the manifest is rewritten last, so a kill never leaves a half partition marked done.
"""
from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
from pydantic import BaseModel, Field

from index.models import LostFile
from preprocess.detect import DETECTORS, FeatureTable
from rca.atomic import atomic_path, write_bytes_atomic
from rca.errors import DataError
from rca.timeutil import as_utc, cst_day_and_hour

log = logging.getLogger(__name__)

# 2: log_counts.example; 3: metric_change_points dropped (nothing read it); 4: trace_edges.wait_mean_us;
# 5: trace_edges.followed; 6: log_counts count a multi-line entry (a stack trace) once, by its head lines.
SCHEMA_VERSION = 6
MANIFEST_NAME = "manifest.json"
PARTITION_FAMILIES: tuple[str, ...] = tuple(DETECTORS)
# Family -> tables it writes into the day directory (index-wide tables are not per day).
FAMILY_TABLES: dict[str, tuple[str, ...]] = {
    name: tuple(t.name for t in detector.feature_tables if t.scope != "index") for name, detector in DETECTORS.items()
}


class IndexStoreError(DataError):
    """The index directory is unusable (wrong schema version, corrupt manifest)."""


class PartitionEntry(BaseModel):
    fingerprint: str
    input_files: int
    rows: dict[str, int] = Field(default_factory=dict)
    missing_inputs: list[str] = Field(default_factory=list)
    lost_files: list[LostFile] = Field(default_factory=list)  # unreadable inputs: their rows are absent
    table_sizes: dict[str, int] = Field(default_factory=dict)  # bytes of each table as written
    written_at: datetime


class Manifest(BaseModel):
    schema_version: int = SCHEMA_VERSION
    partitions: dict[str, PartitionEntry] = Field(default_factory=dict)  # "<day>/<family>"


def partition_key(day: str, family: str) -> str:
    return f"{day}/{family}"


def day_path(index_dir: Path, day: str) -> Path:
    return Path(index_dir) / f"day={day}"


def table_path(index_dir: Path, day: str, table: str) -> Path:
    return day_path(index_dir, day) / f"{table}.parquet"


def index_table_path(index_dir: Path, table: str) -> Path:
    """Path of an index-wide table (scope ``index``), e.g. ``log_templates.parquet``."""
    return Path(index_dir) / f"{table}.parquet"


def input_fingerprint(files: Iterable[Path], *, reading: str = "") -> str:
    """Hash of (name, size, mtime) of every input file, and of ``reading``: cheap, and changes when a file does.

    ``reading`` is what else decides the tables built from the files (the detector's knobs, the
    system's ``[traces]`` for spans): a partition built by other rules is stale although no file changed.
    """
    digest = hashlib.sha256()
    for path in sorted(Path(p) for p in files):
        stat = path.stat()
        digest.update(f"{path.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    if reading:
        digest.update(f"reading\0{reading}\n".encode())
    return digest.hexdigest()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    write_bytes_atomic(path, data)


def atomic_write_text(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def atomic_write_parquet(frame: pl.DataFrame, path: Path) -> None:
    with atomic_path(path) as tmp:
        frame.write_parquet(tmp, compression="zstd", statistics=True)


def remove_stale_temp_files(index_dir: Path) -> int:
    """Delete temp files a killed writer left behind (``.<name>.<random>.tmp``); returns how many.

    Only safe while no other writer works on the same index (the nightly script holds a lock).
    """
    removed = 0
    for path in Path(index_dir).rglob(".*.tmp"):
        path.unlink(missing_ok=True)
        removed += 1
    return removed


def table_sizes(index_dir: Path, day: str, family: str) -> dict[str, int]:
    return {table: table_path(index_dir, day, table).stat().st_size for table in FAMILY_TABLES[family]}


def damaged_tables(index_dir: Path, *, day: str, family: str, entry: PartitionEntry) -> list[str]:
    """Why the partition's tables are not as the manifest recorded them (empty when intact).

    A table that is absent, of another size than written, or whose parquet footer does not
    parse is damaged: the nightly job rebuilds it instead of skipping the partition.
    """
    problems: list[str] = []
    for table in FAMILY_TABLES[family]:
        path = table_path(index_dir, day, table)
        if not path.exists():
            problems.append(f"{path}: absent")
            continue
        recorded = entry.table_sizes.get(table)
        if recorded is not None and path.stat().st_size != recorded:
            problems.append(f"{path}: {path.stat().st_size} bytes, {recorded} written")
            continue
        try:
            pl.read_parquet_schema(path)
        except (pl.exceptions.PolarsError, OSError) as exc:
            problems.append(f"{path}: unreadable parquet ({exc})")
    return problems


def load_manifest(index_dir: Path, *, rebuild_older: bool = False) -> Manifest:
    """The index manifest (empty when absent); refuses another schema version.

    With ``rebuild_older`` (the nightly job), a manifest of an older version is replaced by an
    empty one of this version, so every partition counts as stale and is rebuilt.
    """
    path = Path(index_dir) / MANIFEST_NAME
    if not path.exists():
        return Manifest()
    try:
        manifest = Manifest.model_validate_json(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise IndexStoreError(f"{path}: corrupt manifest: {exc}") from exc
    if rebuild_older and manifest.schema_version < SCHEMA_VERSION:
        log.warning("%s: schema version %d, this code writes %d; every partition will be rebuilt",
                    path, manifest.schema_version, SCHEMA_VERSION)
        manifest = Manifest()
        save_manifest(index_dir, manifest)
    if manifest.schema_version != SCHEMA_VERSION:
        raise IndexStoreError(f"{path}: schema version {manifest.schema_version}, this code reads {SCHEMA_VERSION};"
                          " rebuild the index")
    return manifest


def save_manifest(index_dir: Path, manifest: Manifest) -> None:
    # In key order: partitions built at once finish in either order, and the file must not say so.
    ordered = manifest.model_copy(update={"partitions": dict(sorted(manifest.partitions.items()))})
    atomic_write_text(Path(index_dir) / MANIFEST_NAME, ordered.model_dump_json(indent=1))


def record_partition(index_dir: Path, *, day: str, family: str, entry: PartitionEntry) -> None:
    """Add one finished partition to the manifest (re-read first: last writer wins per key)."""
    manifest = load_manifest(index_dir)
    manifest.partitions[partition_key(day, family)] = entry
    save_manifest(index_dir, manifest)


def days_for_window(start: datetime, end: datetime) -> list[str]:
    """CST days whose partitions hold any minute of [start, end]."""
    start, end = as_utc(start), as_utc(end)
    days = {cst_day_and_hour(start)[0], cst_day_and_hour(end)[0]}
    cursor = start
    while cursor < end:
        days.add(cst_day_and_hour(cursor)[0])
        cursor += timedelta(hours=12)
    return sorted(days)


def load_table(
    index_dir: Path, *, table: str, start: datetime, end: datetime, schema: dict[str, pl.DataType],
) -> tuple[pl.DataFrame, list[str]]:
    """Rows of ``table`` with ``time`` in [start, end] from the covering day partitions.

    Returns the frame and the list of missing partitions (named ``<day>/<table>``).
    """
    frames: list[pl.DataFrame] = []
    missing: list[str] = []
    lo, hi = as_utc(start), as_utc(end)
    for day in days_for_window(lo, hi):
        path = table_path(index_dir, day, table)
        if not _readable(path, schema):
            missing.append(f"{day}/{table}")
            continue
        try:
            frames.append(pl.scan_parquet(path).filter(pl.col("time").is_between(pl.lit(lo), pl.lit(hi))).collect()
                          .cast(pl.Schema(schema)))
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise _corrupt(path, day) from exc
    if not frames:
        return pl.DataFrame(schema=schema), missing
    return pl.concat(frames), missing


def load_feature(index_dir: Path, table: FeatureTable, *, start: datetime, end: datetime,
                 baseline_start: datetime) -> tuple[pl.DataFrame, list[str]]:
    """One feature table for a query of the window [start, end], by its scope.

    ``minute`` tables give the minutes of [baseline_start, end]; ``interval`` tables the
    rows overlapping [start, end]; ``index`` tables the whole table. Returns the frame and
    the missing per-minute partitions (``<day>/<table>``).
    """
    if table.scope == "minute":
        return load_table(index_dir, table=table.name, start=baseline_start, end=end, schema=table.schema)
    if table.scope == "interval":
        return load_intervals(index_dir, table=table.name, start=start, end=end, schema=table.schema), []
    path = index_table_path(index_dir, table.name)
    if not path.exists():
        return pl.DataFrame(schema=table.schema), []
    try:
        return pl.read_parquet(path).cast(pl.Schema(table.schema)), []
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise IndexStoreError(f"{path}: corrupt index table; rebuild it with `rca preprocess --all --force`") from exc


def load_intervals(index_dir: Path, *, table: str, start: datetime, end: datetime,
                   schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Rows of a per-day ``[first, last]`` table (e.g. pod placement) that overlap [start, end]."""
    frames = []
    for day in days_for_window(start, end):
        path = table_path(index_dir, day, table)
        if _readable(path, schema):
            try:
                frame = pl.read_parquet(path).cast(pl.Schema(schema))
            except (pl.exceptions.PolarsError, OSError) as exc:
                raise _corrupt(path, day) from exc
            frames.append(frame.filter((pl.col("last") >= start) & (pl.col("first") <= end)))
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema)


def _corrupt(path: Path, day: str) -> IndexStoreError:
    return IndexStoreError(f"{path}: corrupt index table; rebuild it with `rca preprocess --date {day}` "
                           "(a damaged table is detected and rebuilt)")


def _readable(path: Path, schema: dict[str, pl.DataType]) -> bool:
    """The table exists and has every column of ``schema`` (an older schema's file awaits its rebuild)."""
    if not path.exists():
        return False
    try:
        columns = pl.read_parquet_schema(path)
    except (pl.exceptions.PolarsError, OSError) as exc:
        day = path.parent.name.removeprefix("day=")
        raise _corrupt(path, day) from exc
    if set(schema) <= set(columns):
        return True
    log.warning("%s: written by an older schema version, read as missing until rebuilt", path)
    return False
