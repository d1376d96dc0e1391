"""Read throughput of every telemetry family for one CST day directory; prints a table.

    .venv/bin/python scripts/bench_readers.py --data-dir /path/to/release [--day 2025-06-06] [--family log]

Also times a one-hour window per hourly family (what the diagnoser reads per case).
Figures only: no assertion, no threshold.
"""
from __future__ import annotations

import argparse
import time
from datetime import timedelta
from pathlib import Path

from rich.console import Console
from rich.table import Table

from preprocess import layout
from preprocess.readers import read_day, read_logs, read_traces
from rca.logsetup import configure_logging
from rca.system import bundled_system
from rca.timeutil import cst_day_bounds_utc

FAMILIES = ("apm", "infra", "log", "trace")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="directory holding YYYY-MM-DD day directories")
    parser.add_argument("--day", help="CST day to read (default: the first day present)")
    parser.add_argument("--family", action="append", choices=FAMILIES, help="family to time (repeatable; default all)")
    args = parser.parse_args()
    configure_logging(-1)

    days = layout.list_days(args.data_dir)
    if not days:
        raise SystemExit(f"error: no YYYY-MM-DD directories under {args.data_dir}")
    day = args.day or days[0]
    if day not in days:
        raise SystemExit(f"error: day {day} not found under {args.data_dir} (have {', '.join(days)})")

    table = Table(title=f"reader throughput, day {day}")
    for column in ("read", "files", "missing", "rows", "seconds", "rows/s"):
        table.add_column(column, justify="right" if column != "read" else "left")

    def timed(label: str, read) -> None:
        began = time.perf_counter()
        result = read()
        elapsed = time.perf_counter() - began
        rows = result.frame.height
        table.add_row(label, str(len(result.files)), str(len(result.missing)), f"{rows:,}", f"{elapsed:.2f}",
                      f"{rows / elapsed:,.0f}" if elapsed > 0 else "-")

    # The release's (HipsterShop's) trace naming: the rules it runs are part of what is timed.
    naming = bundled_system().trace
    for family in args.family or FAMILIES:
        timed(f"day {family}", lambda f=family: read_day(args.data_dir / day, f, naming=naming))

    # One window of an hour straddling two CST hour files, as a case read does: it starts
    # half-way into the first hour that has a log file (a small simulated day has few hours).
    present = [h for h in range(24) if layout.hour_files(args.data_dir, "log", day, h)[0]]
    day_start, _ = cst_day_bounds_utc(day)
    start = day_start + timedelta(hours=present[0] if present else 12, minutes=30)
    end = start + timedelta(hours=1)
    if not args.family or "log" in args.family:
        timed("1h window log", lambda: read_logs(args.data_dir, start=start, end=end))
    if not args.family or "trace" in args.family:
        timed("1h window trace", lambda: read_traces(args.data_dir, start=start, end=end, naming=naming))
    Console().print(table)


if __name__ == "__main__":
    main()
