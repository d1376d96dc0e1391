"""The nightly job: raw telemetry of CST days -> evidence index partitions.

One partition is a (CST day, family) pair, the family being a registered detector
(``preprocess.detect.DETECTORS``: ``metric`` from APM + infra + TiDB, ``log``, ``trace``).
Every partition is built the same way: read the raw input the detector declares (the whole
day, or hour by hour), hand it to the detector's ``build``, write the tables it returns.
The job is

* incremental: a partition whose input fingerprint (name, size, mtime of every raw
  file, the detector's knobs, and for spans the system's ``[traces]`` rules they are read
  by) equals the manifest's is skipped;
* idempotent: rebuilding a partition rewrites the same files;
* resumable: every partition is written atomically and recorded in the manifest only
  after its files are in place, so a kill loses at most the partition in progress;
* tolerant: an unreadable file costs that file only: it is reported by name, the rest of
  the partition (other files, other hours, other families) is still built, and the
  partition records the lost files in the manifest, so a rerun still reports the loss and
  a query tells the model which data is missing;
* exclusive: the whole run holds the index's writer lock (index/lock.py);
* supervised: local worker processes die with this process (rca/lifeline.py), and a
  worker that dies fails its partitions with a message instead of a traceback
  (index/engine_local.py).

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
from index.code_digest import code_digest
from index.engine_local import LocalEngine
from index.engines import DEFAULT_THREADS, PartitionEngine, PartitionResult, PartitionTask
from index.lock import writer_lock
from index.models import LostFile
from preprocess import layout
from preprocess.detect import Detector, RawInput, make_detectors
from preprocess.readers import ReadResult, read_day, read_logs, read_traces
from rca.errors import DataError
from rca.system import TraceNaming
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
        for metas, absent in listings:
            files += [m.path for m in metas]
            missing += absent
    return files, missing


def _hour_windows(day: str) -> list[tuple[datetime, datetime]]:
    """UTC [start, end] of the 24 CST hours of ``day`` (end inclusive, 1 µs before the next hour)."""
    day_start, _ = cst_day_bounds_utc(day)
    return [(day_start + timedelta(hours=h), day_start + timedelta(hours=h + 1) - timedelta(microseconds=1))
            for h in range(24)]


def _read(source: str, *, data_dir: Path, day: str, hour: tuple[datetime, datetime] | None, naming: TraceNaming,
          columns: tuple[str, ...] | None = None, ordered: bool = True) -> ReadResult:
    """One source's rows, file by file: an unreadable file is skipped and listed in ``issues``.

    Absent files are summarised once per partition by the caller, not per hour here.
    ``columns`` (log only): the canonical columns the detector reads; the others are not
    read from the files (projection push-down). ``ordered`` (whole-day sources): sorted rows.
    ``naming``: the system's ``[traces]``, for spans.
    """
    if hour is None:
        return read_day(layout.day_dir(data_dir, day), source, naming=naming, skip_unreadable=True,
                        report_missing=False, ordered=ordered)
    start, end = hour
    if source == "trace":
        return read_traces(data_dir, start=start, end=end, naming=naming, skip_unreadable=True, report_missing=False)
    if source != "log":
        raise ValueError(f"no hourly reader for {source!r}; expected log or trace")
    return read_logs(data_dir, start=start, end=end, columns=columns, skip_unreadable=True, report_missing=False)


def build_partition(detector: Detector, *, data_dir: Path, index_dir: Path, day: str,
                    naming: TraceNaming) -> PartitionBuild:
    """Build one (day, detector) partition: read its raw input, build, write its tables.

    A bad raw file costs that file only: it is skipped, and listed with its reason in the
    returned ``lost_files``; the rest of the day is still built. Index-wide tables (the log
    templates) are written before the day's tables. ``naming`` is the system's ``[traces]``.
    """
    built = PartitionBuild(rows={})
    rows_read = 0
    # A detector may name the canonical columns it reads per source (the log detector: not the
    # namespace, nor the service derived from the pod name by a regex on every line).
    raw_columns: Mapping[str, tuple[str, ...]] = getattr(detector, "raw_columns", None) or {}

    def chunks() -> Iterator[Mapping[str, pl.DataFrame | None]]:
        nonlocal rows_read
        hours: list[tuple[datetime, datetime] | None] = (
            list(_hour_windows(day)) if detector.raw.per_hour else [None])
        for number, hour in enumerate(hours):
            chunk: dict[str, pl.DataFrame | None] = {}
            for source in detector.raw.sources:
                result = _read(source, data_dir=data_dir, day=day, hour=hour, naming=naming,
                               columns=raw_columns.get(source), ordered=detector.raw.ordered)
                built.take(result, source=source, hour=number if hour is not None else None)
                chunk[source] = result.frame
            rows_read += sum(frame.height for frame in chunk.values() if frame is not None)
            yield chunk

    tables = detector.build(chunks(), state_dir=Path(index_dir))
    ordered = sorted(detector.feature_tables, key=lambda t: t.scope != "index")
    for table in ordered:
        path = (store.index_table_path(index_dir, table.name) if table.scope == "index"
                else store.table_path(index_dir, day, table.name))
        store.atomic_write_parquet(tables[table.name], path)
    built.rows = {t.name: tables[t.name].height for t in detector.feature_tables if t.scope != "index"}
    if detector.raw.rows_read is not None:
        built.rows[detector.raw.rows_read] = rows_read
    return built


def run_partition_task(task: PartitionTask) -> PartitionResult:
    """Build one partition where the engine runs it; data failures come back in the result.

    The detector is made here from the task's picklable params; a sequential one loads the
    state its previous partition saved in the index directory (the engine ran that one first).
    """
    started = time.monotonic()
    try:
        detector = make_detectors(task.params)[task.family]
        built = build_partition(detector, data_dir=task.data_dir, index_dir=task.index_dir, day=task.day,
                                naming=task.naming)
    except _PARTITION_ERRORS as exc:
        return PartitionResult(task=task, failure=str(exc), seconds=time.monotonic() - started)
    return PartitionResult(task=task, rows=built.rows, errors=tuple(f"{f.name()}: {f.reason}" for f in built.lost_files),
                           lost_files=tuple(built.lost_files), notes=tuple(built.notes),
                           seconds=time.monotonic() - started)


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
    naming: TraceNaming,
    days: list[str] | None = None,
    families: tuple[str, ...] = store.PARTITION_FAMILIES,
    force: bool = False,
    workers: int = 1,
    threads: int = DEFAULT_THREADS,
    detector_params: Mapping[str, object] | None = None,
    wait_for_lock: bool = False,
    on_partition_done: ProgressCallback | None = None,
    engine: PartitionEngine | None = None,
) -> list[PartitionOutcome]:
    """Build every stale partition of ``days`` (all day directories when None).

    ``naming`` is the system's ``[traces]`` (``SystemSpec.trace``): how the spans read name
    services and peers. ``detector_params`` maps a detector name to its ``Params`` (defaults
    when absent; see ``index.params.IndexParams.detector_params``). ``engine`` places the builds (default
    ``LocalEngine(workers=workers, threads=threads)``: with one worker, ``threads`` partitions
    at once in this process; with ``workers > 1``, partitions of non-sequential detectors run
    in ``workers - 1`` spawned processes while sequential ones, sharing state across days,
    run here in day order). Only this process writes the manifest. The run
    holds the index's writer lock; another writer makes it raise ``IndexBusyError`` (or
    wait, with ``wait_for_lock``).
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
    with writer_lock(index_dir, wait=wait_for_lock):
        return _run_locked(data_dir=data_dir, index_dir=index_dir, naming=naming, wanted=wanted, families=families,
                           force=force, params=params, detectors=detectors, on_partition_done=on_partition_done,
                           engine=engine or LocalEngine(workers=workers, threads=threads))


def _run_locked(
    *, data_dir: Path, index_dir: Path, naming: TraceNaming, wanted: list[str], families: tuple[str, ...], force: bool,
    params: dict[str, object], detectors: Mapping[str, Detector], on_partition_done: ProgressCallback | None,
    engine: PartitionEngine,
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
            files, missing = family_inputs(data_dir, day, detectors[family].raw)
            fingerprint = store.input_fingerprint(files, reading=_reading(family, detectors[family], params=params,
                                                                          naming=naming))
            entry = manifest.partitions.get(store.partition_key(day, family))
            if not force and entry is not None and entry.fingerprint == fingerprint:
                damaged = store.damaged_tables(index_dir, day=day, family=family, entry=entry)
                if not damaged:
                    record(PartitionOutcome(day=day, family=family, status="skipped", rows=entry.rows,
                                            lost_files=list(entry.lost_files)))
                    continue
                log.warning("%s %s: rebuilding a damaged partition: %s", day, family, "; ".join(damaged))
            todo.append(_Task(day, family, tuple(files), tuple(missing), fingerprint))

    # Day by day (a chain's order), the largest input first: partitions built at once then
    # end together rather than the largest alone at the end.
    tasks = [PartitionTask(day=t.day, family=t.family, data_dir=data_dir, index_dir=index_dir, naming=naming,
                           params=params, chain=t.family if detectors[t.family].sequential else None)
             for t in sorted(todo, key=lambda t: (t.day, -sum(f.stat().st_size for f in t.files),
                                                  store.PARTITION_FAMILIES.index(t.family)))]
    by_name = {f"{t.day}/{t.family}": t for t in todo}
    for result in engine.run(tasks, work=run_partition_task):
        task = by_name[result.task.name]
        if result.failure is not None:
            record(_failed(task, result.failure))
        else:
            record(_finish(task, index_dir=index_dir, result=result))
    return outcomes


def _reading(family: str, detector: Detector, *, params: Mapping[str, object], naming: TraceNaming) -> str:
    """What besides its files decides a partition's tables: the code that reads and builds them
    (``code_digest`` of the detector's module and the raw readers), the detector's knobs (``repr``
    of its frozen ``Params``) and, for a detector reading spans, the system's ``[traces]`` (other
    rules name other services and peers). Any of them changed, the partition is stale."""
    code = code_digest((type(detector).__module__, read_day.__module__))
    knobs = repr(params.get(family, detector.Params()))
    reading = f"code {code}\n{knobs}"
    return f"{reading}\n{naming.model_dump_json()}" if "trace" in detector.raw.sources else reading


# Failures that stop one partition but not the job (anything else is a bug and propagates).
_PARTITION_ERRORS = (DataError, OSError, pl.exceptions.PolarsError, ValueError)


def _summarise_missing(task: _Task) -> None:
    # One line per partition: a partial day (a simulated demo, a late upload) would otherwise
    # print one warning per absent hour file. Every item stays in the manifest.
    if task.missing:
        shown = "; ".join(task.missing[:2]) + (f"; ... and {len(task.missing) - 2} more" if len(task.missing) > 2 else "")
        log.warning("%s %s: %d expected input(s) absent: %s", task.day, task.family, len(task.missing), shown)


def _finish(task: _Task, *, index_dir: Path, result: PartitionResult) -> PartitionOutcome:
    """Record a built partition in the manifest (its files are already in place)."""
    store.record_partition(index_dir, day=task.day, family=task.family, entry=store.PartitionEntry(
        fingerprint=task.fingerprint, input_files=len(task.files), rows=result.rows,
        missing_inputs=list(task.missing), lost_files=list(result.lost_files),
        table_sizes=store.table_sizes(index_dir, task.day, task.family), written_at=datetime.now(UTC)))
    _summarise_missing(task)
    for lost in result.lost_files:
        log.error("%s %s: lost file %s: %s", task.day, task.family, lost.path, lost.reason)
    return PartitionOutcome(day=task.day, family=task.family, status="written", rows=result.rows,
                            seconds=result.seconds, errors=list(result.errors),
                            lost_files=list(result.lost_files), notes=list(result.notes))


def _failed(task: _Task, failure: str) -> PartitionOutcome:
    log.error("%s %s: partition failed: %s", task.day, task.family, failure)
    return PartitionOutcome(day=task.day, family=task.family, status="failed", errors=[failure])
