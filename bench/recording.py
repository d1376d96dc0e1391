"""How a source records the telemetry the simulator writes: a simulated set seen with a real source's habits.

Nezha's datasets (docs/datasets/nezha.md, "The source's habits") record spans without a status,
no error counts, and traces and logs only around each injection: from about a minute before it to
two and a half minutes after it. An OpenTelemetry collector without a metrics pipeline records
no metric at all (``TRACES_ONLY``). The simulator writes everything. ``recorded_copy`` copies a
simulated dataset (the 2025 layout) keeping only what such a source would have recorded, so the
ranker can be tuned on a view with those habits (``scripts/eval_index.py --nezha-recording``)
without looking at the real evaluation sets that have them.
"""
from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from diagnose.cases import load_cases
from preprocess.readers import STATUS_TAGS
from preprocess.schema import APM_KPIS
from rca.errors import DataError

log = logging.getLogger(__name__)

# The APM columns that count failed calls.
ERROR_KPIS = tuple(k for k in APM_KPIS if "error" in k or k == "timeout")


@dataclass(frozen=True)
class Recording:
    """What a source keeps of the telemetry: spans' status and error counts, and which minutes of traces and logs."""

    name: str  # names the copy: a set's directory gets ``-<name>``
    span_status: bool = True
    metrics: bool = True  # False: no metric file at all (traces and logs only)
    # Traces and logs only from the first number of seconds before each case's start to the
    # second after it; None keeps all of them.
    around_cases: tuple[float, float] | None = None
    # The source's lines state the request's trace context. A copy cannot add it: the set is
    # simulated with it (``SimulationOptions.log_trace_context``, ``bench.pipeline.simulated_index_set``).
    log_trace_context: bool = False


# Nezha's: no status, no error counts, traces and logs from the minute before each injection to
# 20-50 s into the third minute after it (docs/datasets/nezha.md, "File names vs span times"),
# and lines that state the request's trace context (both of its systems' services write it).
NEZHA_RECORDING = Recording(name="nezha-recording", span_status=False, around_cases=(60.0, 150.0),
                            log_trace_context=True)
# An OpenTelemetry collector without a metrics pipeline: traces and logs, no metric.
TRACES_ONLY = Recording(name="traces-only", metrics=False)


def recorded_copy(src: Path, dst: Path, *, recording: Recording) -> Path:
    """Copy the dataset ``src`` (``input.json``, ground truth and day directories) to ``dst`` as ``recording`` keeps it.

    Written to a temporary sibling and renamed into place, so a killed run leaves no half copy;
    an existing ``dst`` is reused. Returns ``dst``.
    """
    if (dst / "input.json").exists():
        log.info("reusing recorded copy %s", dst)
        return dst
    tmp = dst.with_name(dst.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    try:
        _record(tmp, src=src, recording=recording)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(dst, ignore_errors=True)
    os.replace(tmp, dst)
    return dst


def _record(root: Path, *, src: Path, recording: Recording) -> None:
    """Rewrite the copy under ``root`` in place as ``recording`` keeps it (``src`` names files in errors)."""
    windows = []
    if recording.around_cases is not None:
        before, after = recording.around_cases
        windows = [(case.start.timestamp() - before, case.start.timestamp() + after)
                   for case in load_cases(root / "input.json")]
    for path in sorted(root.rglob("trace-parquet/*.parquet")):
        table = _read(path, named=src / path.relative_to(root), needs=("tags", "startTime"))
        if not recording.span_status:
            table = _without_status(table)
        if recording.around_cases is not None:
            table = table.filter(_within(pc.cast(table.column("startTime"), pa.int64()), windows, unit=1_000_000))
        pq.write_table(table, path)
    if not recording.metrics:
        for folder in sorted(root.glob("*/metric-parquet")):
            shutil.rmtree(folder)
    if not recording.span_status:
        for path in sorted(root.rglob("metric-parquet/apm/**/*.parquet")):
            pq.write_table(_without_error_counts(pq.read_table(path)), path)
    if recording.around_cases is not None:
        for path in sorted(root.rglob("log-parquet/*.parquet")):
            table = _read(path, named=src / path.relative_to(root), needs=("@timestamp",))
            pq.write_table(table.filter(_within(_log_seconds(table.column("@timestamp")), windows, unit=1)), path)


def _read(path: Path, *, named: Path, needs: tuple[str, ...]) -> pa.Table:
    table = pq.read_table(path)
    missing = [name for name in needs if name not in table.schema.names]
    if missing:
        raise DataError(f"{named}: no column {', '.join(map(repr, missing))}, "
                        "which the 2025 layout gives (docs/data-contract.md)")
    return table


def _without_status(table: pa.Table) -> pa.Table:
    index = table.schema.get_field_index("tags")
    kept = [[tag for tag in tags or () if tag["key"] not in STATUS_TAGS] for tags in table.column("tags").to_pylist()]
    return table.set_column(index, table.schema.field(index), pa.array(kept, type=table.schema.field(index).type))


def _without_error_counts(table: pa.Table) -> pa.Table:
    for name in ERROR_KPIS:
        index = table.schema.get_field_index(name)
        if index >= 0:
            field = table.schema.field(index)
            table = table.set_column(index, field, pa.nulls(table.num_rows, type=field.type))
    return table


def _log_seconds(timestamps: pa.ChunkedArray) -> pa.Array:
    """Unix seconds of the 2025 layout's ``@timestamp`` strings (``2025-06-06T01:00:02.146Z``)."""
    seconds = pc.strptime(pc.utf8_slice_codeunits(timestamps, 0, 19), format="%Y-%m-%dT%H:%M:%S", unit="s")
    return pc.cast(seconds, pa.int64())


def _within(times: pa.Array, windows: Sequence[tuple[float, float]], *, unit: int) -> pa.Array:
    """Whether each time (in 1/``unit`` s) lies in one of ``windows`` (Unix seconds, half-open)."""
    keep = pa.array([False] * len(times))
    for lo, hi in windows:
        inside = pc.and_(pc.greater_equal(times, int(lo * unit)), pc.less(times, int(hi * unit)))
        keep = pc.or_(keep, pc.fill_null(inside, False))
    return keep
