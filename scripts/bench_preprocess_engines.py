#!/usr/bin/env python
"""Benchmark: the nightly job on N full-scale simulated days, local engine versus Ray.

    scripts/bench_preprocess_engines.py --data-dir D [--days 7] [--workers 2] [--work-dir W] [--keep]

Simulates the days into ``--data-dir`` when fewer are there (``rca simulate --scale full``:
~76 s and ~310 MiB a day; the free disk is checked first), then builds the index of the
first ``--days`` days twice from scratch, ``--engine local --workers N`` and ``--engine ray``
on a local cluster of N CPUs started for the run. Prints, per engine, the wall time (Ray's
start and stop included), the mean build time of a partition per family, and the peak
resident memory of every process of the run (this one and all its descendants: pool
workers, Ray's gcs_server, raylet, agents and worker processes), sampled every 0.25 s with
psutil, and the peak of their sum (shared pages counted once per process, so an upper bound).
Last, it checks that the two indexes are byte-identical per table.
"""
from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from index.build import PartitionOutcome, run_nightly  # noqa: E402
from index.engines import make_engine  # noqa: E402
from index.store import PARTITION_FAMILIES  # noqa: E402
from preprocess import layout  # noqa: E402
from rca.system import bundled_system  # noqa: E402
from simulate.simulator import SimulationOptions, simulate  # noqa: E402

log = logging.getLogger("bench_preprocess_engines")

DAY_MIB = 310  # one full-scale simulated day on disk (scripts/bench_simulate.py)
INDEX_DAY_MIB = 20  # generous: one day of index tables
SAMPLE_SECONDS = 0.25


class PeakSampler:
    """Peak RSS per process of this process's tree, sampled in a thread."""

    def __init__(self) -> None:
        self.peaks: dict[int, tuple[str, int]] = {}  # pid -> (role, peak bytes)
        self.peak_total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for proc in [me, *me.children(recursive=True)]:
                try:
                    rss = proc.memory_info().rss
                    role = _role(proc, me)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                total += rss
                _, peak = self.peaks.get(proc.pid, (role, 0))
                self.peaks[proc.pid] = (role, max(peak, rss))
            self.peak_total = max(self.peak_total, total)
            self._stop.wait(SAMPLE_SECONDS)

    def by_role(self) -> dict[str, tuple[int, int]]:
        """role -> (number of processes, largest peak RSS among them)."""
        roles: dict[str, tuple[int, int]] = {}
        for role, peak in self.peaks.values():
            count, largest = roles.get(role, (0, 0))
            roles[role] = (count + 1, max(largest, peak))
        return roles


def _role(proc: psutil.Process, me: psutil.Process) -> str:
    if proc.pid == me.pid:
        return "driver"
    name = proc.name()
    cmdline = " ".join(proc.cmdline())
    if name in ("ray::DashboardAgent", "ray::RuntimeEnvAgent"):
        return "ray agent"
    if name.startswith("ray::"):
        return "ray worker"  # ray::IDLE or ray::<task name>
    if name in ("gcs_server", "raylet"):
        return f"ray {name}"
    if "site-packages/ray/" in cmdline:
        return "ray monitor/dashboard"
    if "resource_tracker" in cmdline:
        return "mp resource tracker"
    if "multiprocessing" in cmdline:
        return "pool worker"
    return name


def ensure_days(data_dir: Path, *, days: int, seed: int) -> list[str]:
    present = layout.list_days(data_dir) if data_dir.is_dir() else []
    if len(present) < days:
        data_dir.mkdir(parents=True, exist_ok=True)
        need_mib = (days - len(present)) * DAY_MIB + 2 * days * INDEX_DAY_MIB
        free_mib = shutil.disk_usage(data_dir).free / 2**20
        if free_mib < 1.2 * need_mib:
            raise SystemExit(f"{data_dir}: {free_mib:,.0f} MiB free, {days} days need ~{need_mib:,} MiB; "
                             "pass a smaller --days")
        log.warning("simulating %d full-scale day(s) into %s (~76 s each)", days - len(present), data_dir)
        simulate(SimulationOptions(out_dir=data_dir, days=days, scale="full", seed=seed))
        present = layout.list_days(data_dir)
    return present[:days]


def run_engine(name: str, *, data_dir: Path, index_dir: Path, days: list[str],
               workers: int) -> tuple[float, list[PartitionOutcome], PeakSampler]:
    if index_dir.exists():
        shutil.rmtree(index_dir)
    with PeakSampler() as sampler:
        started = time.monotonic()
        # The simulated HipsterShop days: the bundled system's trace naming.
        outcomes = run_nightly(data_dir=data_dir, index_dir=index_dir, naming=bundled_system().trace, days=days,
                               force=True, workers=workers, engine=make_engine(name, workers=workers))
        wall = time.monotonic() - started
    return wall, outcomes, sampler


def identical(a: Path, b: Path) -> tuple[int, list[str]]:
    files = sorted(p.relative_to(a) for p in a.rglob("*.parquet"))
    differ = [str(f) for f in files if not (b / f).exists() or (a / f).read_bytes() != (b / f).read_bytes()]
    return len(files), differ


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, required=True, help="simulated days (made when fewer are there)")
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", type=Path, default=None, help="where the two indexes go (default: temp)")
    parser.add_argument("--engines", default="local,ray")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    days = ensure_days(args.data_dir, days=args.days, seed=args.seed)
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="rca-bench-engines-"))
    print(f"{len(days)} day(s) {days[0]}..{days[-1]}, {args.workers} workers, indexes under {work_dir}")
    results = {}
    for name in args.engines.split(","):
        results[name] = run_engine(name, data_dir=args.data_dir, index_dir=work_dir / name, days=days,
                                   workers=args.workers)

    print(f"\n{'engine':7s} {'wall s':>8s} {'partitions':>10s} {'failed':>6s} "
          + " ".join(f"{f + ' s/part':>14s}" for f in PARTITION_FAMILIES) + f" {'build s (sum)':>13s}"
          + f" {'sum RSS peak MiB':>17s}")
    for name, (wall, outcomes, sampler) in results.items():
        per_family: dict[str, list[float]] = defaultdict(list)
        for o in outcomes:
            per_family[o.family].append(o.seconds)
        means = " ".join(f"{sum(per_family[f]) / max(len(per_family[f]), 1):14.1f}" for f in PARTITION_FAMILIES)
        failed = sum(o.status == "failed" for o in outcomes)
        build = sum(o.seconds for o in outcomes)
        print(f"{name:7s} {wall:8.1f} {len(outcomes):10d} {failed:6d} {means} {build:13.1f}"
              f" {sampler.peak_total / 2**20:17,.0f}")

    print(f"\n{'engine':7s} {'process':24s} {'count':>5s} {'peak RSS MiB (largest)':>23s}")
    for name, (_, _, sampler) in results.items():
        for role, (count, peak) in sorted(sampler.by_role().items()):
            print(f"{name:7s} {role:24s} {count:5d} {peak / 2**20:23,.0f}")

    if len(results) == 2:
        first, second = (work_dir / n for n in results)
        count, differ = identical(first, second)
        print(f"\nindexes byte-identical: {not differ} ({count} tables compared"
              + (f"; differ: {', '.join(differ)})" if differ else ")"))
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
