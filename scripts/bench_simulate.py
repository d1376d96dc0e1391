"""Benchmark: generation time and on-disk size of one full-scale simulated day.

Usage: .venv/bin/python scripts/bench_simulate.py [--out DIR] [--scale full|small] [--seed S]
Prints wall time, per-hour figures and the size of each family. May take a few minutes.
"""
from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from simulate.simulator import SimulationOptions, simulate


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: a temp dir, removed)")
    parser.add_argument("--scale", choices=("small", "full"), default="full")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    out = args.out or Path(tempfile.mkdtemp(prefix="bench_simulate_"))
    try:
        began = time.perf_counter()
        faults = simulate(SimulationOptions(out_dir=out, days=1, scale=args.scale, seed=args.seed))
        elapsed = time.perf_counter() - began
        day = next(p for p in out.iterdir() if p.is_dir())
        spans = [pq.ParquetFile(p).metadata.num_rows for p in (day / "trace-parquet").glob("*.parquet")]
        logs = [pq.ParquetFile(p).metadata.num_rows for p in (day / "log-parquet").glob("*.parquet")]
        print(f"scale={args.scale} day={day.name} faults={len(faults)}")
        print(f"generation wall time: {elapsed:.1f} s ({elapsed / 24:.2f} s per hour)")
        print(f"spans per hour: mean {sum(spans) / len(spans):,.0f}, max {max(spans):,}")
        print(f"log lines per hour: mean {sum(logs) / len(logs):,.0f}, max {max(logs):,}")
        for family in ("trace-parquet", "log-parquet", "metric-parquet"):
            print(f"{family}: {_size(day / family) / 2**20:,.1f} MiB")
        print(f"total on disk: {_size(out) / 2**20:,.1f} MiB, metric files: "
              f"{sum(1 for _ in (day / 'metric-parquet').rglob('*.parquet'))}")
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
