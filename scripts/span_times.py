"""Where a fault's time goes in the spans: the culprit's own spans against the wait before them.

    scripts/span_times.py --data-dir D                        # cpu stress and network delay cases
    scripts/span_times.py --data-dir D --fault-type "code error"

For every case of the ground truth (``D/groundtruth.jsonl``) of the given fault types: the median
duration of the culprit service's server spans, their self time (duration less their direct
children) and the wait before them (the caller's client span less the server span), in the minute
before the fault and in the window (from 30 s to 170 s after its start), with how many spans each.
A delayed network grows the wait and leaves the callee's own spans as they were; a CPU stress
slows the spans themselves (docs/real-data.md, round 23). It reads the ground truth: run it on a
tuning set, never on an evaluation set.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
from rich.console import Console
from rich.table import Table

from preprocess.readers import read_traces
from rca.system import bundled_system

BEFORE = (timedelta(seconds=-70), timedelta(0))
DURING = (timedelta(seconds=30), timedelta(seconds=170))


@dataclass(frozen=True)
class Times:
    """Medians (µs) of one service's server spans in one stretch of time; None: no span."""

    spans: int
    duration_us: float | None
    self_us: float | None
    wait_us: float | None


def server_span_times(spans: pl.DataFrame) -> pl.DataFrame:
    """Every server span with its self time (``self_us``) and the wait before it (``wait_us``, null
    where its parent is no client span), from spans in ``preprocess.schema.SPAN_SCHEMA``."""
    children = (spans.filter(pl.col("parent_span_id").is_not_null())
                .group_by("trace_id", "parent_span_id").agg(pl.col("duration_us").sum().alias("children_us")))
    parents = spans.select("trace_id", pl.col("span_id").alias("parent_span_id"),
                           pl.col("duration_us").alias("parent_us"), pl.col("span_kind").alias("parent_kind"))
    return (spans.filter(pl.col("span_kind") == "server")
            .join(children, left_on=["trace_id", "span_id"], right_on=["trace_id", "parent_span_id"], how="left")
            .join(parents, on=["trace_id", "parent_span_id"], how="left")
            .with_columns((pl.col("duration_us") - pl.col("children_us").fill_null(0)).alias("self_us"),
                          pl.when(pl.col("parent_kind") == "client")
                          .then(pl.col("parent_us") - pl.col("duration_us")).alias("wait_us")))


def times_of(served: pl.DataFrame, *, service: str, start: datetime, stretch: tuple[timedelta, timedelta]) -> Times:
    """Medians of ``service``'s rows of ``server_span_times`` that start in ``start`` + ``stretch``."""
    rows = served.filter((pl.col("service") == service) & (pl.col("start") >= start + stretch[0])
                         & (pl.col("start") < start + stretch[1]))

    def median(column: str) -> float | None:
        value = rows.select(pl.col(column).drop_nulls().median()).item()
        return None if value is None else float(value)

    return Times(spans=rows.height, duration_us=median("duration_us"), self_us=median("self_us"),
                 wait_us=median("wait_us"))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value / 1000:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--gt", type=Path, help="ground truth (default: DATA_DIR/groundtruth.jsonl)")
    parser.add_argument("--fault-type", action="append", help="repeatable; default cpu stress and network delay")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    fault_types = args.fault_type or ["cpu stress", "network delay"]
    truth_file = args.gt or args.data_dir / "groundtruth.jsonl"
    table = Table(title=f"the culprit's server spans, the minute before the fault -> the window (ms), {args.data_dir}")
    for column in ("case", "fault type", "service", "spans", "duration", "self time", "wait before"):
        table.add_column(column)
    for number, line in enumerate(truth_file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        truth = json.loads(line)
        if truth.get("fault_type") not in fault_types:
            continue
        start = datetime.fromisoformat(truth["start_time"].replace("Z", "+00:00"))
        # Server spans and their parents only: the peer naming does not matter, HipsterShop's will do.
        spans = read_traces(args.data_dir, start=start + BEFORE[0], end=start + DURING[1],
                            naming=bundled_system().trace, report_missing=False).frame
        served = server_span_times(spans)
        before, during = (times_of(served, service=truth["service"], start=start, stretch=s) for s in (BEFORE, DURING))
        table.add_row(truth.get("uuid", f"line {number}"), truth["fault_type"], truth["service"],
                      f"{before.spans} -> {during.spans}",
                      *(f"{_ms(getattr(before, f))} -> {_ms(getattr(during, f))}"
                        for f in ("duration_us", "self_us", "wait_us")))
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
