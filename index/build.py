"""The nightly job: raw telemetry of CST days -> evidence index partitions.

One partition is a (CST day, family) pair, family ``metric`` (APM + infra + TiDB),
``log`` or ``trace``. The job is

* incremental: a partition whose input fingerprint (name, size, mtime of every raw
  file) equals the manifest's is skipped;
* idempotent: rebuilding a partition rewrites the same files;
* resumable: every partition is written atomically and recorded in the manifest only
  after its files are in place, so a kill loses at most the partition in progress;
* tolerant: an unreadable file is reported by name, the rest of the partition (other
  hours, other families) is still built, and the partition records what was skipped.

Log templates are mined by one Drain3 miner whose state lives in the index directory,
so log partitions are built one after another in day order (one engine chain: each
loads the state the previous day saved); metric and trace partitions run wherever the
engine puts them (``index/engines.py``: this process, a process pool, or Ray tasks).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from index import store
from index.engine_local import LocalEngine
from index.engines import PartitionEngine, PartitionResult, PartitionTask
from preprocess import layout
from preprocess.detect_log import LOG_COUNT_SCHEMA, LogTemplateMiner, log_counts
from preprocess.detect_metric import day_change_points, metric_series, placement
from preprocess.detect_trace import EDGE_STATS_SCHEMA, edge_stats
from preprocess.readers import ReaderError, read_day, read_logs, read_traces
from rca.timeutil import cst_day_bounds_utc

log = logging.getLogger(__name__)

ProgressCallback = Callable[[str], None]


@dataclass
class PartitionOutcome:
    day: str
    family: str
    status: str  # written | skipped | failed
    rows: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


def family_inputs(data_dir: Path, day: str, family: str) -> tuple[list[Path], list[str]]:
    """Raw files a partition is built from, and descriptions of expected files that are absent."""
    files: list[Path] = []
    missing: list[str] = []
    if family == "metric":
        for level in layout.APM_LEVELS:
            found, absent = layout.apm_files(data_dir, day, level)
            files += [m.path for m in found]
            missing += absent
        for infra_family in layout.INFRA_FAMILIES:
            found, absent = layout.infra_files(data_dir, day, infra_family)
            files += [m.path for m in found]
            missing += absent
    elif family in ("log", "trace"):
        for hour in range(24):
            found, absent = layout.hour_files(data_dir, family, day, hour)
            files += found
            missing += absent
    else:
        raise ValueError(f"unknown partition family {family!r}; expected one of {store.PARTITION_FAMILIES}")
    return files, missing


def _hour_windows(day: str) -> list[tuple[datetime, datetime]]:
    """UTC [start, end] of the 24 CST hours of ``day`` (end inclusive, 1 µs before the next hour)."""
    day_start, _ = cst_day_bounds_utc(day)
    return [(day_start + timedelta(hours=h), day_start + timedelta(hours=h + 1) - timedelta(microseconds=1))
            for h in range(24)]


def build_metric_partition(*, data_dir: Path, index_dir: Path, day: str) -> tuple[dict[str, int], list[str]]:
    """Read APM and infra of one day, write series, placement and change points."""
    errors: list[str] = []
    frames: dict[str, pl.DataFrame | None] = {}
    for source in ("apm", "infra"):
        try:
            frames[source] = read_day(layout.day_dir(data_dir, day), source).frame
        except ReaderError as exc:
            errors.append(str(exc))
            frames[source] = None
    series = metric_series(apm=frames["apm"], infra=frames["infra"])
    tables = {
        "metric_series": series,
        "metric_placement": placement(frames["infra"]),
        "metric_change_points": day_change_points(series),
    }
    for table, frame in tables.items():
        store.atomic_write_parquet(frame, store.table_path(index_dir, day, table))
    return {table: frame.height for table, frame in tables.items()}, errors


def build_trace_partition(*, data_dir: Path, index_dir: Path, day: str) -> tuple[dict[str, int], list[str]]:
    """Per-minute call-edge statistics of one day, read hour by hour to bound memory."""
    errors: list[str] = []
    parts: list[pl.DataFrame] = []
    spans_read = 0
    for start, end in _hour_windows(day):
        try:
            spans = read_traces(data_dir, start=start, end=end).frame
        except ReaderError as exc:
            errors.append(str(exc))
            continue
        spans_read += spans.height
        parts.append(edge_stats(spans))
    frame = pl.concat(parts) if parts else pl.DataFrame(schema=EDGE_STATS_SCHEMA)
    store.atomic_write_parquet(frame, store.table_path(index_dir, day, "trace_edges"))
    return {"trace_edges": frame.height, "spans_read": spans_read}, errors


def build_log_partition(
    *, data_dir: Path, index_dir: Path, day: str, miner: LogTemplateMiner,
) -> tuple[dict[str, int], list[str]]:
    """Per-minute (pod, template) counts of one day; saves miner state and template table."""
    errors: list[str] = []
    parts: list[pl.DataFrame] = []
    lines_read = 0
    for start, end in _hour_windows(day):
        try:
            logs = read_logs(data_dir, start=start, end=end).frame
        except ReaderError as exc:
            errors.append(str(exc))
            continue
        lines_read += logs.height
        parts.append(log_counts(logs, miner=miner))
    frame = pl.concat(parts) if parts else pl.DataFrame(schema=LOG_COUNT_SCHEMA)
    # Miner state and templates first: a kill before the manifest update only re-mines
    # this day, and the restored miner assigns the same template ids again.
    miner.save()
    store.atomic_write_parquet(miner.templates(), Path(index_dir) / store.TEMPLATES_NAME)
    store.atomic_write_parquet(frame, store.table_path(index_dir, day, "log_counts"))
    return {"log_counts": frame.height, "lines_read": lines_read}, errors


def _build(family: str, *, data_dir: Path, index_dir: Path, day: str) -> tuple[dict[str, int], list[str]]:
    if family == "metric":
        return build_metric_partition(data_dir=data_dir, index_dir=index_dir, day=day)
    if family == "trace":
        return build_trace_partition(data_dir=data_dir, index_dir=index_dir, day=day)
    # The miner state the previous log partition saved (the log chain runs in day order).
    miner = LogTemplateMiner(state_path=Path(index_dir) / store.MINER_STATE_NAME)
    return build_log_partition(data_dir=data_dir, index_dir=index_dir, day=day, miner=miner)


LOG_CHAIN = "log"  # engine chain of the log partitions (shared Drain3 miner state)


def run_partition_task(task: PartitionTask) -> PartitionResult:
    """Build one partition where the engine runs it; data failures come back in the result."""
    started = time.monotonic()
    try:
        rows, errors = _build(task.family, data_dir=task.data_dir, index_dir=task.index_dir, day=task.day)
    except _PARTITION_ERRORS as exc:
        return PartitionResult(task=task, failure=str(exc), seconds=time.monotonic() - started)
    return PartitionResult(task=task, rows=rows, errors=tuple(errors), seconds=time.monotonic() - started)


@dataclass(frozen=True)
class _Task:
    day: str
    family: str
    files: tuple[Path, ...]
    missing: tuple[str, ...]
    fingerprint: str


def run_nightly(
    *,
    data_dir: Path,
    index_dir: Path,
    days: list[str] | None = None,
    families: tuple[str, ...] = store.PARTITION_FAMILIES,
    force: bool = False,
    workers: int = 1,
    on_partition_done: ProgressCallback | None = None,
    engine: PartitionEngine | None = None,
) -> list[PartitionOutcome]:
    """Build every stale partition of ``days`` (all day directories when None).

    ``engine`` places the builds (default: ``LocalEngine(workers=workers)``, where with
    ``workers > 1`` metric and trace partitions run in ``workers - 1`` spawned processes
    while log partitions run here in day order). Only this process writes the manifest.
    """
    data_dir, index_dir = Path(data_dir), Path(index_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"{data_dir}: data directory not found")
    index_dir.mkdir(parents=True, exist_ok=True)
    available = layout.list_days(data_dir)
    wanted = available if days is None else days
    unknown = [d for d in wanted if d not in available]
    if unknown:
        raise FileNotFoundError(f"{data_dir}: no day directory for {', '.join(unknown)}")

    manifest = store.load_manifest(index_dir, rebuild_older=True)
    stale = store.remove_stale_temp_files(index_dir)
    if stale:
        log.warning("%s: removed %d temp file(s) left by an interrupted run", index_dir, stale)
    outcomes: list[PartitionOutcome] = []

    def record(outcome: PartitionOutcome) -> None:
        outcomes.append(outcome)
        if on_partition_done is not None:
            on_partition_done(f"{outcome.day} {outcome.family} {outcome.status}")

    todo: list[_Task] = []
    for day in wanted:
        for family in families:
            files, missing = family_inputs(data_dir, day, family)
            fingerprint = store.input_fingerprint(files)
            entry = manifest.partitions.get(store.partition_key(day, family))
            tables_present = all(store.table_path(index_dir, day, t).exists() for t in store.FAMILY_TABLES[family])
            if not force and entry is not None and entry.fingerprint == fingerprint and tables_present:
                record(PartitionOutcome(day=day, family=family, status="skipped", rows=entry.rows))
            else:
                todo.append(_Task(day, family, tuple(files), tuple(missing), fingerprint))

    tasks = [PartitionTask(day=t.day, family=t.family, data_dir=data_dir, index_dir=index_dir,
                           chain=LOG_CHAIN if t.family == "log" else None)
             for t in sorted(todo, key=lambda t: (t.day, store.PARTITION_FAMILIES.index(t.family)))]
    by_name = {f"{t.day}/{t.family}": t for t in todo}
    for result in (engine or LocalEngine(workers=workers)).run(tasks, work=run_partition_task):
        task = by_name[result.task.name]
        if result.failure is not None:
            record(_failed(task, result.failure))
        else:
            record(_finish(task, index_dir=index_dir, result=result))
    return outcomes


# Failures that stop one partition but not the job (anything else is a bug and propagates).
_PARTITION_ERRORS = (ReaderError, OSError, pl.exceptions.PolarsError, ValueError)


def _finish(task: _Task, *, index_dir: Path, result: PartitionResult) -> PartitionOutcome:
    """Record a built partition in the manifest (its files are already in place)."""
    errors = list(result.errors)
    store.record_partition(index_dir, day=task.day, family=task.family, entry=store.PartitionEntry(
        fingerprint=task.fingerprint, input_files=len(task.files), rows=result.rows,
        missing_inputs=list(task.missing) + errors, written_at=datetime.now(UTC)))
    for error in errors:
        log.error("%s %s: %s", task.day, task.family, error)
    return PartitionOutcome(day=task.day, family=task.family, status="written", rows=result.rows,
                            seconds=result.seconds, errors=errors)


def _failed(task: _Task, failure: str) -> PartitionOutcome:
    log.error("%s %s: partition failed: %s", task.day, task.family, failure)
    return PartitionOutcome(day=task.day, family=task.family, status="failed", errors=[failure])
