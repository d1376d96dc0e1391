"""Data status of a window: for each modality, is the index's data complete, partial or absent?

The model and the run record are told what is missing in words ("no trace data 16:00-16:30
UTC"; "metric data partial: 1 file(s) unreadable (infra_pod_pod_cpu_usage_...)") instead of
partition keys, because absent evidence is not evidence of health. Sources of a gap:

- a partition the nightly job has not written (its whole CST day);
- an hour file the nightly job could not read (that CST hour);
- a daily metric file it could not read (those KPIs, all day: no gap in minutes, a lost file);
- no rows at all in the window (``no_data``).
"""
from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from index import store
from index.models import LostFile, ModalityStatus
from rca.timeutil import as_utc, cst_day_bounds_utc

# Modality -> (partition family, its table that carries the window's rows).
MODALITY_TABLES: dict[str, tuple[str, str]] = {
    "metric": ("metric", "metric_series"),
    "log": ("log", "log_counts"),
    "trace": ("trace", "trace_edges"),
}


def _clip(span: tuple[datetime, datetime], start: datetime, end: datetime) -> tuple[datetime, datetime] | None:
    lo, hi = max(span[0], start), min(span[1], end)
    return (lo, hi) if lo <= hi else None


def _merged(spans: list[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    merged: list[tuple[datetime, datetime]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1] + timedelta(minutes=1):
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _lost_span(day: str, lost: LostFile) -> tuple[datetime, datetime]:
    day_start, day_end = cst_day_bounds_utc(day)
    if lost.hour is None:
        return day_start, day_end
    return day_start + timedelta(hours=lost.hour), day_start + timedelta(hours=lost.hour + 1) - timedelta(minutes=1)


def modality_status(
    *,
    modality: str,
    manifest: store.Manifest,
    frame: pl.DataFrame,
    missing_partitions: list[str],
    start: datetime,
    end: datetime,
) -> ModalityStatus:
    """Status of one modality for the incident window [start, end], from its loaded rows and the manifest."""
    start, end = as_utc(start), as_utc(end)
    family, table = MODALITY_TABLES[modality]
    gaps: list[tuple[datetime, datetime]] = []
    lost_files: list[LostFile] = []
    for day in store.days_for_window(start, end):
        if f"{day}/{table}" in missing_partitions:
            day_start, day_end = cst_day_bounds_utc(day)
            clipped = _clip((day_start, day_end), start, end)
            if clipped is not None:
                gaps.append(clipped)
            continue
        entry = manifest.partitions.get(store.partition_key(day, family))
        for lost in entry.lost_files if entry is not None else []:
            clipped = _clip(_lost_span(day, lost), start, end)
            if clipped is None:
                continue
            lost_files.append(lost)
            if lost.hour is not None:
                gaps.append(clipped)
    in_window = frame.filter(pl.col("time").is_between(pl.lit(start), pl.lit(end))).height if frame.height else 0
    if in_window == 0:
        state = "no_data"
    elif gaps or lost_files:
        state = "partial"
    else:
        state = "ok"
    return ModalityStatus(modality=modality, state=state, gaps=_merged(gaps),  # type: ignore[arg-type]
                          missing_partitions=sorted(set(missing_partitions)), lost_files=lost_files)


def window_status(
    *,
    manifest: store.Manifest,
    frames: dict[str, tuple[pl.DataFrame, list[str]]],
    start: datetime,
    end: datetime,
) -> list[ModalityStatus]:
    """``frames`` maps each modality to its loaded rows and the missing partitions ``load_table`` reported."""
    return [modality_status(modality=m, manifest=manifest, frame=frame, missing_partitions=missing,
                            start=start, end=end) for m, (frame, missing) in frames.items()]


def newest_telemetry(index_dir: Path) -> datetime | None:
    """The newest minute any table of the index holds (its latest day with rows), or None when none.

    Raises what ``store.load_manifest`` raises for a directory that holds no index.
    """
    days = sorted({key.split("/", 1)[0] for key in store.load_manifest(index_dir).partitions})
    for day in reversed(days):
        newest: datetime | None = None
        for table in sorted(store.day_path(index_dir, day).glob("*.parquet")):
            lazy = pl.scan_parquet(table)
            if "time" not in lazy.collect_schema():
                continue
            value = lazy.select(pl.col("time").max()).collect().item()
            if isinstance(value, datetime) and (newest is None or as_utc(value) > newest):
                newest = as_utc(value)
        if newest is not None:
            return newest
    return None
