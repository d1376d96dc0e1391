"""The nightly job: raw telemetry of CST days -> evidence index partitions.

One partition is a (CST day, family) pair, the family being a registered detector
(``preprocess.detect.DETECTORS``: ``metric`` from APM + infra + TiDB, ``log``, ``trace``).
Every partition is built the same way: read the raw input the detector declares (the whole
day, or hour by hour), hand it to the detector's ``build``, write the tables it returns.
The job is

* incremental: a partition whose input fingerprint (name, size, mtime of every raw
  file) equals the manifest's is skipped;
* idempotent: rebuilding a partition rewrites the same files;
* resumable: every partition is written atomically and recorded in the manifest only
  after its files are in place, so a kill loses at most the partition in progress;
* tolerant: an unreadable file is reported by name, the rest of the partition (other
  hours, other families) is still built, and the partition records what was skipped.

A ``sequential`` detector keeps state across days in the index directory (the log
detector's Drain3 miner), so its partitions form one engine chain: built one after
another in day order, each loading the state the previous day saved. The others run
wherever the engine puts them (``index/engines.py``: this process, a process pool, Ray).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from index import store
from index.engine_local import LocalEngine
from index.engines import PartitionEngine, PartitionResult, PartitionTask
from preprocess import layout
from preprocess.detect import Detector, RawInput, make_detectors
from preprocess.readers import ReaderError, read_day, read_logs, read_traces
from rca.errors import DataError
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


def family_inputs(data_dir: Path, day: str, raw: RawInput) -> tuple[list[Path], list[str]]:
    """Raw files a partition is built from, and descriptions of expected files that are absent."""
    files: list[Path] = []
    missing: list[str] = []
    for source in raw.sources:
        if raw.per_hour:
            for hour in range(24):
                found, absent = layout.hour_files(data_dir, source, day, hour)
                files += found
                missing += absent
            continue
        listings = ([layout.apm_files(data_dir, day, level) for level in layout.APM_LEVELS] if source == "apm"
                    else [layout.infra_files(data_dir, day, family) for family in layout.INFRA_FAMILIES])
        for found, absent in listings:
            files += [m.path for m in found]
            missing += absent
    return files, missing


def _hour_windows(day: str) -> list[tuple[datetime, datetime]]:
    """UTC [start, end] of the 24 CST hours of ``day`` (end inclusive, 1 µs before the next hour)."""
    day_start, _ = cst_day_bounds_utc(day)
    return [(day_start + timedelta(hours=h), day_start + timedelta(hours=h + 1) - timedelta(microseconds=1))
            for h in range(24)]


_HOURLY_READERS = {"log": read_logs, "trace": read_traces}


def _read(source: str, *, data_dir: Path, day: str, hour: tuple[datetime, datetime] | None) -> pl.DataFrame:
    if hour is None:
        return read_day(layout.day_dir(data_dir, day), source).frame
    start, end = hour
    return _HOURLY_READERS[source](data_dir, start=start, end=end).frame


def build_partition(detector: Detector, *, data_dir: Path, index_dir: Path, day: str,
                    ) -> tuple[dict[str, int], list[str]]:
    """Build one (day, detector) partition: read its raw input, build, write its tables.

    An unreadable source is reported in the returned errors and handed to the detector as
    None (whole-day input) or skipped (hour input); the rest of the day is still built.
    Index-wide tables (the log templates) are written before the day's tables.
    """
    errors: list[str] = []
    rows_read = 0

    def chunks() -> Iterator[Mapping[str, pl.DataFrame | None]]:
        nonlocal rows_read
        hours: list[tuple[datetime, datetime] | None] = (
            list(_hour_windows(day)) if detector.raw.per_hour else [None])
        for hour in hours:
            chunk: dict[str, pl.DataFrame | None] = {}
            for source in detector.raw.sources:
                try:
                    chunk[source] = _read(source, data_dir=data_dir, day=day, hour=hour)
                except ReaderError as exc:
                    errors.append(str(exc))
                    chunk[source] = None
            if hour is not None and all(frame is None for frame in chunk.values()):
                continue
            rows_read += sum(frame.height for frame in chunk.values() if frame is not None)
            yield chunk

    tables = detector.build(chunks(), state_dir=Path(index_dir))
    ordered = sorted(detector.feature_tables, key=lambda t: t.scope != "index")
    for table in ordered:
        path = (store.index_table_path(index_dir, table.name) if table.scope == "index"
                else store.table_path(index_dir, day, table.name))
        store.atomic_write_parquet(tables[table.name], path)
    rows = {t.name: tables[t.name].height for t in detector.feature_tables if t.scope != "index"}
    if detector.raw.rows_read is not None:
        rows[detector.raw.rows_read] = rows_read
    return rows, errors


def run_partition_task(task: PartitionTask) -> PartitionResult:
    """Build one partition where the engine runs it; data failures come back in the result.

    The detector is made here from the task's picklable params; a sequential one loads the
    state its previous partition saved in the index directory (the engine ran that one first).
    """
    started = time.monotonic()
    try:
        detector = make_detectors(task.params)[task.family]
        rows, errors = build_partition(detector, data_dir=task.data_dir, index_dir=task.index_dir, day=task.day)
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
    detector_params: Mapping[str, object] | None = None,
    on_partition_done: ProgressCallback | None = None,
    engine: PartitionEngine | None = None,
) -> list[PartitionOutcome]:
    """Build every stale partition of ``days`` (all day directories when None).

    ``detector_params`` maps a detector name to its ``Params`` (defaults when absent; see
    ``index.params.IndexParams.detector_params``). ``engine`` places the builds (default
    ``LocalEngine(workers=workers)``: with ``workers > 1``, partitions of non-sequential
    detectors run in ``workers - 1`` spawned processes while sequential ones, sharing state
    across days, run here in day order). Only this process writes the manifest.
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
    params = dict(detector_params or {})
    detectors = make_detectors(params)
    unknown_families = [f for f in families if f not in detectors]
    if unknown_families:
        raise ValueError(f"unknown partition family {unknown_families[0]!r}; expected one of {tuple(detectors)}")

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
            files, missing = family_inputs(data_dir, day, detectors[family].raw)
            fingerprint = store.input_fingerprint(files)
            entry = manifest.partitions.get(store.partition_key(day, family))
            tables_present = all(store.table_path(index_dir, day, t).exists() for t in store.FAMILY_TABLES[family])
            if not force and entry is not None and entry.fingerprint == fingerprint and tables_present:
                record(PartitionOutcome(day=day, family=family, status="skipped", rows=entry.rows))
            else:
                todo.append(_Task(day, family, tuple(files), tuple(missing), fingerprint))

    tasks = [PartitionTask(day=t.day, family=t.family, data_dir=data_dir, index_dir=index_dir, params=params,
                           chain=t.family if detectors[t.family].sequential else None)
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
_PARTITION_ERRORS = (DataError, OSError, pl.exceptions.PolarsError, ValueError)


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
