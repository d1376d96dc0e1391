"""The nightly job: raw telemetry of CST days -> evidence index partitions.

One partition is a (CST day, family) pair, family ``metric`` (APM + infra + TiDB),
``log`` or ``trace``. The job is

* incremental: a partition whose input fingerprint (name, size, mtime of every raw
  file) equals the manifest's is skipped;
* idempotent: rebuilding a partition rewrites the same files;
* resumable: every partition is written atomically and recorded in the manifest only
  after its files are in place, so a kill loses at most the partition in progress;
* tolerant: an unreadable file costs that file only: it is reported by name, the rest of
  the partition (other files, other hours, other families) is still built, and the
  partition records the lost files in the manifest, so a rerun still reports the loss and
  a query tells the model which data is missing;
* exclusive: the whole run holds the index's writer lock (index/lock.py);
* supervised: worker processes die with this process (rca/lifeline.py), and a worker that
  dies fails its partition with a message instead of a traceback.

Log templates are mined by one Drain3 miner whose state lives in the index directory,
so log partitions are built one after another in day order; metric and trace
partitions may run in worker processes.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from index import store
from index.lock import writer_lock
from index.models import LostFile
from preprocess import layout
from preprocess.detect_log import LOG_COUNT_SCHEMA, LogTemplateMiner, log_counts
from preprocess.detect_metric import day_change_points, metric_series, placement
from preprocess.detect_trace import EDGE_STATS_SCHEMA, edge_stats
from preprocess.readers import ReaderError, ReadResult, read_day, read_logs, read_traces
from rca.lifeline import die_with_parent
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
    lost_files: list[LostFile] = field(default_factory=list)  # unreadable inputs (also on a skipped rerun)
    notes: list[str] = field(default_factory=list)  # repairs that lost no file (undecodable strings)

    @property
    def data_loss(self) -> bool:
        return bool(self.lost_files)


@dataclass
class PartitionBuild:
    """What building one partition produced: row counts and what could not be read."""

    rows: dict[str, int]
    lost_files: list[LostFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def take(self, result: ReadResult, *, source: str, hour: int | None) -> None:
        for issue in result.issues:
            if issue.lost:
                self.lost_files.append(LostFile(path=str(issue.path), reason=issue.reason, source=source, hour=hour))
            else:
                self.notes.append(f"{issue.path.name}: {issue.reason}")


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


def build_metric_partition(*, data_dir: Path, index_dir: Path, day: str) -> PartitionBuild:
    """Read APM and infra of one day file by file, write series, placement and change points."""
    built = PartitionBuild(rows={})
    frames: dict[str, pl.DataFrame] = {}
    for source in ("apm", "infra"):
        result = read_day(layout.day_dir(data_dir, day), source, skip_unreadable=True, report_missing=False)
        built.take(result, source=source, hour=None)
        frames[source] = result.frame
    series = metric_series(apm=frames["apm"], infra=frames["infra"])
    tables = {
        "metric_series": series,
        "metric_placement": placement(frames["infra"]),
        "metric_change_points": day_change_points(series),
    }
    for table, frame in tables.items():
        store.atomic_write_parquet(frame, store.table_path(index_dir, day, table))
    built.rows = {table: frame.height for table, frame in tables.items()}
    return built


def build_trace_partition(*, data_dir: Path, index_dir: Path, day: str) -> PartitionBuild:
    """Per-minute call-edge statistics of one day, read hour by hour to bound memory."""
    built = PartitionBuild(rows={})
    parts: list[pl.DataFrame] = []
    spans_read = 0
    for hour, (start, end) in enumerate(_hour_windows(day)):
        result = read_traces(data_dir, start=start, end=end, skip_unreadable=True, report_missing=False)
        built.take(result, source="trace", hour=hour)
        spans_read += result.frame.height
        parts.append(edge_stats(result.frame))
    frame = pl.concat(parts) if parts else pl.DataFrame(schema=EDGE_STATS_SCHEMA)
    store.atomic_write_parquet(frame, store.table_path(index_dir, day, "trace_edges"))
    built.rows = {"trace_edges": frame.height, "spans_read": spans_read}
    return built


def build_log_partition(
    *, data_dir: Path, index_dir: Path, day: str, miner: LogTemplateMiner,
) -> PartitionBuild:
    """Per-minute (pod, template) counts of one day; saves miner state and template table."""
    built = PartitionBuild(rows={})
    parts: list[pl.DataFrame] = []
    lines_read = 0
    for hour, (start, end) in enumerate(_hour_windows(day)):
        result = read_logs(data_dir, start=start, end=end, skip_unreadable=True, report_missing=False)
        built.take(result, source="log", hour=hour)
        lines_read += result.frame.height
        parts.append(log_counts(result.frame, miner=miner))
    frame = pl.concat(parts) if parts else pl.DataFrame(schema=LOG_COUNT_SCHEMA)
    # Miner state and templates first: a kill before the manifest update only re-mines
    # this day, and the restored miner assigns the same template ids again.
    miner.save()
    store.atomic_write_parquet(miner.templates(), Path(index_dir) / store.TEMPLATES_NAME)
    store.atomic_write_parquet(frame, store.table_path(index_dir, day, "log_counts"))
    built.rows = {"log_counts": frame.height, "lines_read": lines_read}
    return built


def _build(family: str, *, data_dir: Path, index_dir: Path, day: str,
           miner: LogTemplateMiner | None = None) -> PartitionBuild:
    if family == "metric":
        return build_metric_partition(data_dir=data_dir, index_dir=index_dir, day=day)
    if family == "trace":
        return build_trace_partition(data_dir=data_dir, index_dir=index_dir, day=day)
    if miner is None:
        raise ValueError("log partitions need the shared template miner")
    return build_log_partition(data_dir=data_dir, index_dir=index_dir, day=day, miner=miner)


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
    wait_for_lock: bool = False,
    on_partition_done: ProgressCallback | None = None,
) -> list[PartitionOutcome]:
    """Build every stale partition of ``days`` (all day directories when None).

    With ``workers > 1``, metric and trace partitions run in ``workers - 1`` spawned
    processes while log partitions (which share the template miner) run here in day order.
    Only this process writes the manifest. The run holds the index's writer lock; another
    writer makes it raise ``IndexBusyError`` (or wait, with ``wait_for_lock``).
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
    with writer_lock(index_dir, wait=wait_for_lock):
        return _run_locked(data_dir=data_dir, index_dir=index_dir, wanted=wanted, families=families, force=force,
                           workers=workers, on_partition_done=on_partition_done)


def _run_locked(
    *, data_dir: Path, index_dir: Path, wanted: list[str], families: tuple[str, ...], force: bool, workers: int,
    on_partition_done: ProgressCallback | None,
) -> list[PartitionOutcome]:
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
            if not force and entry is not None and entry.fingerprint == fingerprint:
                damaged = store.damaged_tables(index_dir, day=day, family=family, entry=entry)
                if not damaged:
                    record(PartitionOutcome(day=day, family=family, status="skipped", rows=entry.rows,
                                            lost_files=list(entry.lost_files)))
                    continue
                log.warning("%s %s: rebuilding a damaged partition: %s", day, family, "; ".join(damaged))
            todo.append(_Task(day, family, tuple(files), tuple(missing), fingerprint))

    log_tasks = [t for t in todo if t.family == "log"]
    miner = LogTemplateMiner(state_path=index_dir / store.MINER_STATE_NAME) if log_tasks else None

    def run_here(task: _Task) -> None:
        started = time.monotonic()
        try:
            built = _build(task.family, data_dir=data_dir, index_dir=index_dir, day=task.day, miner=miner)
        except _PARTITION_ERRORS as exc:
            record(_failed(task, exc))
            return
        record(_finish(task, index_dir=index_dir, started=started, built=built))

    if workers > 1 and len(todo) > len(log_tasks):
        # Spawned, not forked: polars' thread pool does not survive a fork.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers - 1, mp_context=context, initializer=die_with_parent,
                                 initargs=(os.getpid(),)) as pool:
            futures = [(task, time.monotonic(), pool.submit(_build, task.family, data_dir=data_dir,
                                                            index_dir=index_dir, day=task.day))
                       for task in todo if task.family != "log"]
            for task in log_tasks:
                run_here(task)
            for task, started, future in futures:
                try:
                    built = future.result()
                except BrokenProcessPool as exc:
                    record(_failed(task, RuntimeError(
                        f"worker process died before finishing ({exc}); killed or out of memory? "
                        "Rerun to build this partition")))
                    continue
                except _PARTITION_ERRORS as exc:
                    record(_failed(task, exc))
                    continue
                record(_finish(task, index_dir=index_dir, started=started, built=built))
    else:
        for task in sorted(todo, key=lambda t: (t.day, store.PARTITION_FAMILIES.index(t.family))):
            run_here(task)
    return outcomes


# Failures that stop one partition but not the job (anything else is a bug and propagates).
_PARTITION_ERRORS = (ReaderError, OSError, pl.exceptions.PolarsError, ValueError)


def _summarise_missing(task: _Task) -> None:
    # One line per partition: a partial day (a simulated demo, a late upload) would otherwise
    # print one warning per absent hour file. Every item stays in the manifest.
    if task.missing:
        shown = "; ".join(task.missing[:2]) + (f"; ... and {len(task.missing) - 2} more" if len(task.missing) > 2 else "")
        log.warning("%s %s: %d expected input(s) absent: %s", task.day, task.family, len(task.missing), shown)


def _finish(task: _Task, *, index_dir: Path, started: float, built: PartitionBuild) -> PartitionOutcome:
    """Record a built partition in the manifest (its files are already in place)."""
    store.record_partition(index_dir, day=task.day, family=task.family, entry=store.PartitionEntry(
        fingerprint=task.fingerprint, input_files=len(task.files), rows=built.rows,
        missing_inputs=list(task.missing), lost_files=built.lost_files,
        table_sizes=store.table_sizes(index_dir, task.day, task.family), written_at=datetime.now(UTC)))
    _summarise_missing(task)
    for lost in built.lost_files:
        log.error("%s %s: lost file %s: %s", task.day, task.family, lost.path, lost.reason)
    return PartitionOutcome(day=task.day, family=task.family, status="written", rows=built.rows,
                            seconds=time.monotonic() - started,
                            errors=[f"{lost.name()}: {lost.reason}" for lost in built.lost_files],
                            lost_files=built.lost_files, notes=built.notes)


def _failed(task: _Task, exc: Exception) -> PartitionOutcome:
    log.error("%s %s: partition failed: %s", task.day, task.family, exc)
    return PartitionOutcome(day=task.day, family=task.family, status="failed", errors=[str(exc)])
