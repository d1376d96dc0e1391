#!/usr/bin/env python
"""Speed benchmark of the nightly job on one day, against the floor of reading its parquet files.

    scripts/bench_preprocess.py --data-dir D --day YYYY-MM-DD [--index-dir I] [--workers N] [--threads N]
                                [--by-family] [--repeat N] [--profile DIR]

Make a full-scale day first, e.g. ``rca simulate --out D --days 1 --scale full``.

In one run it prints

* the read floor: pyarrow's read of every raw file of the day, only the columns the readers
  need (what no nightly job can beat), per family and in total: ``pyarrow.parquet.read_table``
  of the columns, and for a trace file of the usual shape only the nested leaves its reader
  reads (``preprocess.span_arrow``: no tag ``type``, no ``references.traceID``); it is
  measured before and after the job and the smaller of the two is used, so that a burst of
  load on a shared machine does not flatter the ratio;
* the nightly job as ``rca preprocess`` runs it: every family of the day built into a fresh
  index (``--index-dir`` or a temporary directory) by one ``run_nightly`` call, partitions
  overlapping on ``--threads`` (default: the setting's default). The total is the job's wall
  time and the CPU seconds of all its threads and workers (on a machine of N cores a job whose
  CPU seconds approach N times its wall time is bound by computing, not by waiting); per
  family, its build's seconds (overlapping the others'), input rows, rows/s; peak RSS of this
  process and its workers. ``--by-family`` runs each family alone instead, one after another,
  with its own CPU seconds (the total is then their sum);
* the ratio job / floor per family and in total (target: total <= 2);
* beside it, the job against the plain read of the whole files (``pyarrow.parquet.read_table``
  of every file, every column: the floor as issue 27 words it, "just reading those parquet
  files"), measured in the same way. It is the looser of the two: the trace files' tag types
  and reference trace ids, which the reader skips, cost ~0.3 s a full-scale day.

Compare ratios, not seconds, between runs on a shared machine; ``--repeat N`` runs the job N
times, each between two reads of the floor, and prints the median ratio and its range (the floor
itself moves by a tenth or more within an hour). ``--profile DIR`` runs the job
under cProfile (one ``.prof`` per run of ``run_nightly``, top functions printed; ratios then
include the profiler's overhead; the profiler sees this thread only, so profile with
``--by-family --threads 1``).
"""
from __future__ import annotations

import argparse
import cProfile
import functools
import io
import logging
import pstats
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from index.build import run_nightly  # noqa: E402
from index.store import PARTITION_FAMILIES  # noqa: E402
from preprocess import layout  # noqa: E402
from preprocess.schema import APM_KPIS  # noqa: E402
from preprocess.span_arrow import fast_path_leaves  # noqa: E402
from rca.settings import PreprocessSettings  # noqa: E402
from rca.system import bundled_system  # noqa: E402

# Input rows per family are reported by the builders under these keys.
INPUT_ROWS = {"metric": "metric_series", "log": "lines_read", "trace": "spans_read"}

# Raw columns the readers take from each kind of file (preprocess/readers.py).
_APM_COLUMNS = ("time", "object_type", "object_id", *APM_KPIS)
_INFRA_LABELS = ("instance", "device", "mountpoint", "namespace", "type", "sql_type", "pod", "kubernetes_node",
                 "kpi_key")
_LOG_COLUMNS = ("@timestamp", "k8_pod", "k8_node_name", "message")
_TRACE_COLUMNS = ("traceID", "spanID", "operationName", "duration", "process", "tags", "references", "startTime")


def peak_rss_mib() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024  # ru_maxrss is KiB on Linux


def day_files(data_dir: Path, day: str) -> dict[str, list[tuple[Path, tuple[str, ...]]]]:
    """Every raw file of the day per partition family, with the columns its reader projects."""
    files: dict[str, list[tuple[Path, tuple[str, ...]]]] = {"metric": [], "log": [], "trace": []}
    for level in layout.APM_LEVELS:
        files["metric"] += [(m.path, _APM_COLUMNS) for m in layout.apm_files(data_dir, day, level)[0]]
    for family in layout.INFRA_FAMILIES:
        files["metric"] += [(m.path, ("time", *_INFRA_LABELS, m.key)) for m in layout.infra_files(data_dir, day, family)[0]]
    for family, columns in (("log", _LOG_COLUMNS), ("trace", _TRACE_COLUMNS)):
        for hour in range(24):
            files[family] += [(p, columns) for p in layout.hour_files(data_dir, family, day, hour)[0]]
    return files


def _read_needed(path: Path, *, columns: tuple[str, ...], family: str) -> int:
    """Rows of one file, reading what its reader reads: the leaves of a usual trace file, else the columns."""
    if family == "trace":
        parquet = pq.ParquetFile(path)
        leaves = fast_path_leaves(parquet)
        if leaves is not None:
            return parquet.read(columns=leaves).num_rows
    names = set(pq.read_schema(path).names)
    return pq.read_table(path, columns=[c for c in columns if c in names]).num_rows


def read_floor(files: dict[str, list[tuple[Path, tuple[str, ...]]]]) -> tuple[dict[str, float], dict[str, int]]:
    """Seconds to read every file's needed columns with pyarrow, and rows read, per family."""
    seconds: dict[str, float] = {}
    rows: dict[str, int] = {}
    for family, entries in files.items():
        start = time.monotonic()
        count = 0
        for path, columns in entries:
            count += _read_needed(path, columns=columns, family=family)
        seconds[family] = time.monotonic() - start
        rows[family] = count
    return seconds, rows


def read_whole_floor(files: dict[str, list[tuple[Path, tuple[str, ...]]]]) -> float:
    """Seconds to read every file of the day whole (every column) with pyarrow."""
    start = time.monotonic()
    for entries in files.values():
        for path, _columns in entries:
            pq.read_table(path)
    return time.monotonic() - start


def cpu_seconds() -> float:
    """User + system CPU seconds of this process's threads and its finished workers so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed_job(family: str, *, run: Callable[[], list], profile_dir: Path | None) -> tuple[float, float, list]:
    """Wall seconds, CPU seconds and the outcomes of ``run``."""
    profiler = cProfile.Profile() if profile_dir is not None else None
    cpu_start = cpu_seconds()
    start = time.monotonic()
    if profiler is not None:
        profiler.enable()
    outcomes = run()
    if profiler is not None:
        profiler.disable()
    seconds = time.monotonic() - start
    cpu = cpu_seconds() - cpu_start
    if profiler is not None and profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        profiler.dump_stats(profile_dir / f"{family}.prof")
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
        print(text.getvalue())
    return seconds, cpu, outcomes


@dataclass
class JobRun:
    """One run of the nightly job."""

    build: dict[str, float] = field(default_factory=dict)  # per family: its build's wall seconds
    cpu: dict[str, float] = field(default_factory=dict)  # per family, only when it ran alone
    input_rows: dict[str, int] = field(default_factory=dict)
    wall: float = 0.0  # the whole job's
    cpu_total: float = 0.0


def run_job(args: argparse.Namespace, *, families: tuple[str, ...], index_dir: Path) -> JobRun | None:
    """One run of the nightly job: per family build and CPU seconds and input rows, total wall and CPU.

    By default the job runs as ``rca preprocess`` does, every family in one call (partitions
    overlap on ``--threads``), and a family's CPU seconds are not separable; with
    ``--by-family`` each family runs alone and the total is the sum. None when a partition failed.
    """
    groups = [(family,) for family in families] if args.by_family else [families]
    job = JobRun()
    for group in groups:
        # A simulated (HipsterShop) day: the bundled trace naming, whose rules are part of what is timed.
        run = functools.partial(run_nightly, data_dir=args.data_dir, index_dir=index_dir, naming=bundled_system().trace,
                                days=[args.day], families=group, force=True, workers=args.workers,
                                threads=args.threads)
        seconds, cpu, outcomes = timed_job("-".join(group), profile_dir=args.profile, run=run)
        job.wall += seconds
        job.cpu_total += cpu
        for outcome in outcomes:
            if outcome.status != "written":
                print(f"{outcome.family}: {outcome.status}: {outcome.errors}")
                return None
            job.build[outcome.family] = seconds if args.by_family else outcome.seconds
            job.input_rows[outcome.family] = outcome.rows.get(INPUT_ROWS[outcome.family], 0)
            if args.by_family:
                job.cpu[outcome.family] = cpu
    return job


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--day", required=True, help="CST day directory name, YYYY-MM-DD")
    parser.add_argument("--index-dir", type=Path, default=None)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=PreprocessSettings().threads,
                        help="partitions built at once in this process (rca preprocess --threads)")
    parser.add_argument("--by-family", action="store_true",
                        help="each family alone, one after another (its own wall and CPU seconds)")
    parser.add_argument("--profile", type=Path, default=None, help="write cProfile stats per run here")
    parser.add_argument("--families", default=",".join(PARTITION_FAMILIES), help="comma-separated, default all")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of the job, each between two reads of the floor; the median ratio is printed")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    families = tuple(f for f in args.families.split(",") if f)

    files = day_files(args.data_dir, args.day)
    floor_after, floor_rows = read_floor(files)  # the first run's floor before
    # The whole files are the floor of the whole job only: read them only when every family runs.
    whole_day = set(families) == set(PARTITION_FAMILIES)
    whole_after = read_whole_floor(files) if whole_day else 0.0

    index_dir = args.index_dir or Path(tempfile.mkdtemp(prefix="rca-bench-index-"))
    ratios: list[float] = []
    whole_ratios: list[float] = []
    job = JobRun()  # the last run's, which the table shows
    for _ in range(args.repeat):
        if index_dir.exists():
            shutil.rmtree(index_dir)
        ran = run_job(args, families=families, index_dir=index_dir)
        if ran is None:
            return 1
        job = ran
        floor_before = floor_after
        floor_after, floor_rows = read_floor(files)
        floor = {f: min(floor_before[f], floor_after[f]) for f in floor_before}
        ratios.append(job.wall / max(sum(floor[f] for f in families), 1e-9))
        if whole_day:
            whole_before, whole_after = whole_after, read_whole_floor(files)
            whole_ratios.append(job.wall / max(min(whole_before, whole_after), 1e-9))

    # The table is the last run's.
    how = ("each family alone" if args.by_family
           else f"all families in one run, {args.threads} partition(s) at once: a family's build overlaps the others'")
    print(f"day {args.day} of {args.data_dir}: {sum(len(v) for v in files.values())} parquet files; job: {how}")
    print(f"{'family':8s} {'files':>6s} {'raw rows':>10s} {'floor s':>8s} {'build s':>8s} {'ratio':>6s} "
          f"{'job cpu s':>9s} {'input rows':>11s} {'rows/s':>9s}")
    for family in families:
        family_cpu = f"{job.cpu[family]:9.2f}" if family in job.cpu else f"{'-':>9s}"
        build, rows = job.build[family], job.input_rows[family]
        print(f"{family:8s} {len(files[family]):6d} {floor_rows[family]:10d} {floor[family]:8.2f} {build:8.2f} "
              f"{build / max(floor[family], 1e-9):6.2f} {family_cpu} {rows:11d} {rows / max(build, 1e-9):9.0f}")
    floor_total = sum(floor[f] for f in families)
    print(f"{'total':8s} {'':6s} {sum(floor_rows[f] for f in families):10d} {floor_total:8.2f} {job.wall:8.2f} "
          f"{job.wall / max(floor_total, 1e-9):6.2f} {job.cpu_total:9.2f}   (the job's wall time; target ratio <= 2)")
    print(f"floor before / after the job: {sum(floor_before[f] for f in families):.2f} s / "
          f"{sum(floor_after[f] for f in families):.2f} s; peak RSS {peak_rss_mib():.0f} MiB (target < 6144)")
    if whole_day:
        print(f"against the whole files (every column of every file; before / after the job "
              f"{whole_before:.2f} s / {whole_after:.2f} s): ratio {whole_ratios[-1]:.2f} (target <= 2)")
    if args.repeat > 1:
        print(f"ratio over {args.repeat} runs (each job against the smaller of the floors read just before and "
              f"after it): median {statistics.median(ratios):.2f}, {min(ratios):.2f}-{max(ratios):.2f} "
              f"({', '.join(f'{r:.2f}' for r in ratios)})")
        if whole_day:
            print(f"... against the whole files: median {statistics.median(whole_ratios):.2f}, "
                  f"{min(whole_ratios):.2f}-{max(whole_ratios):.2f} ({', '.join(f'{r:.2f}' for r in whole_ratios)})")
    if args.index_dir is None:
        shutil.rmtree(index_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
