#!/usr/bin/env python
"""Speed benchmark of the nightly job on one day: wall time, rows/s per family, peak RSS.

    scripts/bench_preprocess.py --data-dir D --day YYYY-MM-DD [--index-dir I] [--workers N]

Make a full-scale day first, e.g. ``rca simulate --out D --days 1 --scale full``.
Each family is built into a fresh index (``--index-dir`` or a temporary directory) and
timed separately; peak RSS is the maximum resident set of this process and its
workers. Targets: the whole day < 5 min and < 6 GB on a 2-core machine.
"""
from __future__ import annotations

import argparse
import logging
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from index.build import run_nightly  # noqa: E402
from index.store import PARTITION_FAMILIES  # noqa: E402

# Input rows per family are reported by the builders under these keys.
INPUT_ROWS = {"metric": "metric_series", "log": "lines_read", "trace": "spans_read"}


def peak_rss_mib() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024  # ru_maxrss is KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--day", required=True, help="CST day directory name, YYYY-MM-DD")
    parser.add_argument("--index-dir", type=Path, default=None)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    index_dir = args.index_dir or Path(tempfile.mkdtemp(prefix="rca-bench-index-"))
    if index_dir.exists():
        shutil.rmtree(index_dir)
    total_start = time.monotonic()
    print(f"{'family':8s} {'seconds':>8s} {'input rows':>12s} {'rows/s':>10s} {'peak RSS MiB':>13s}")
    for family in PARTITION_FAMILIES:
        start = time.monotonic()
        outcomes = run_nightly(data_dir=args.data_dir, index_dir=index_dir, days=[args.day], families=(family,),
                               force=True, workers=args.workers)
        seconds = time.monotonic() - start
        outcome = outcomes[0]
        if outcome.status != "written":
            print(f"{family}: {outcome.status}: {outcome.errors}")
            return 1
        rows = outcome.rows.get(INPUT_ROWS[family], 0)
        print(f"{family:8s} {seconds:8.1f} {rows:12d} {rows / max(seconds, 1e-9):10.0f} {peak_rss_mib():13.0f}")
    total = time.monotonic() - total_start
    print(f"{'total':8s} {total:8.1f}   (target < 300 s)   peak RSS {peak_rss_mib():.0f} MiB (target < 6144)")
    if args.index_dir is None:
        shutil.rmtree(index_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
