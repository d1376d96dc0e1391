"""Readers: raw parquet of the released layout -> canonical polars frames (preprocess/schema.py).

Every reader takes a UTC window ``[start, end]`` (both inclusive), finds the CST-named files
that can hold it (preprocess/layout.py), reads them with projection pushdown, normalises the
variants listed in docs/data-contract.md and keeps only rows inside the window:

- times: ISO strings with ``Z``, ``+00:00`` or no zone, tz-aware or naive timestamps, trace µs
  integers -> ``Datetime("us", "UTC")``;
- the string ``"null"`` in label columns -> a real null, and in KPI value columns too (an all-null
  counter is absent, never zero, and does not cost its file);
- Jaeger nesting -> one flat row per span (parent, pod, node, kind, status, peer service); span
  services and peers are named by the system's ``[traces]`` (``rca.system.TraceNaming``), which
  every trace read takes from its caller: no system's rules are built in.

A missing file is listed in ``ReadResult.missing``. An unreadable or malformed file raises
``ReaderError`` naming the file; with ``skip_unreadable=True`` (the nightly job) it costs that
file only: the other files are still read and the bad one is listed in ``ReadResult.issues``.
String values that are not valid UTF-8 never cost a file: they are decoded with replacement
characters and counted in ``ReadResult.issues``.
"""
from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl

from preprocess import layout
from preprocess.iso_time import parse_fixed_iso_utc
from preprocess.schema import (
    APM_KPIS,
    APM_SCHEMA,
    INFRA_SCHEMA,
    LOG_SCHEMA,
    SPAN_LANGUAGE_KEYS,
    SPAN_PEER_TAG_KEYS,
    SPAN_RAW_TAGS,
    SPAN_SCHEMA,
    TIME,
    empty_frame,
)
from rca.errors import DataError
from rca.system import SystemSpecError, TraceNaming
from rca.taxonomy import TIDB_COMPONENTS
from rca.timeutil import as_utc, cst_hours_between, format_utc

log = logging.getLogger(__name__)

# Component names of the TiDB families, whose rows do not name a pod.

# Raw label columns of the long metric files that may hold the string "null".
_INFRA_LABELS: tuple[str, ...] = (
    "instance", "device", "mountpoint", "namespace", "type", "sql_type", "pod", "kubernetes_node", "kpi_key",
)
# Canonical log column -> raw Filebeat column.
_LOG_RAW: dict[str, str] = {
    "time": "@timestamp",
    "namespace": "k8_namespace",
    "pod": "k8_pod",
    "node": "k8_node_name",
    "message": "message",
}

Window = tuple[datetime, datetime] | None
Scanned = tuple[pl.LazyFrame, pl.Schema]
# Reads one file, given its scan (lazy frame and schema), into canonical rows.
FileReader = Callable[[Path, Scanned], pl.DataFrame]
# Plans the read of one file, given its scan: the lazy query of its canonical rows.
FilePlanner = Callable[[Path, Scanned], pl.LazyFrame]


class ReaderError(DataError):
    """A telemetry file that exists but cannot be read or does not have the expected shape."""


@dataclass(frozen=True)
class FileIssue:
    """A file that was skipped (``lost``) or read with some values repaired (not ``lost``)."""

    path: Path
    reason: str
    lost: bool


@dataclass
class ReadResult:
    """Rows of one family for a request, the files they came from, what was absent or unreadable."""

    frame: pl.DataFrame
    files: list[Path] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    issues: list[FileIssue] = field(default_factory=list)

    @property
    def lost(self) -> list[FileIssue]:
        return [i for i in self.issues if i.lost]

    def read_file(self, path: Path, reader: FileReader, *, skip_unreadable: bool) -> pl.DataFrame | None:
        """Read one file; with ``skip_unreadable`` a ``ReaderError`` costs this file only and is recorded.

        Invalid UTF-8 strings are decoded with replacement characters and counted, whatever the mode.
        """
        try:
            try:
                frame = reader(path, _scan_schema(path))
            except InvalidUtf8Error:
                lazy, schema, bad = _decoded_copy(path)
                frame = reader(path, (lazy, schema))
                log.warning("%s: %d string value(s) are not UTF-8; decoded with replacement characters", path, bad)
                self.issues.append(FileIssue(path=path, lost=False,
                                             reason=f"{bad} string value(s) not UTF-8, decoded with replacement characters"))
        except ReaderError as exc:
            if not skip_unreadable:
                raise
            log.debug("skipping unreadable file %s", exc)  # the caller reports it, once, with its context
            self.issues.append(FileIssue(path=path, reason=_short_reason(exc, path), lost=True))
            return None
        self.files.append(path)
        return frame

    def read_files(self, entries: list[tuple[Path, FilePlanner]], *, skip_unreadable: bool) -> list[pl.DataFrame]:
        """Read many files at once: each file's plan is built (its footer read), then all are collected together.

        The same rows, files and issues as ``read_file`` on each entry in turn: when the joint
        collection fails, every file is read again on its own, so that the failure costs (or
        names) only its file.
        """
        planned: list[tuple[Path, FilePlanner, pl.LazyFrame]] = []
        for path, plan in entries:
            try:
                planned.append((path, plan, plan(path, _scan_schema(path))))
            except ReaderError as exc:
                if not skip_unreadable:
                    self._one_by_one(planned, skip_unreadable=False)  # an earlier file's error comes first
                    raise
                log.debug("skipping unreadable file %s", exc)
                self.issues.append(FileIssue(path=path, reason=_short_reason(exc, path), lost=True))
        if not planned:
            return []
        try:
            # In memory: the streaming engine costs more than it saves on many small files.
            frames = pl.collect_all([lazy for _, _, lazy in planned], engine="in-memory")
        except (pl.exceptions.PolarsError, OSError):
            return self._one_by_one(planned, skip_unreadable=skip_unreadable)
        self.files += [path for path, _, _ in planned]
        return frames

    def _one_by_one(self, planned: list[tuple[Path, FilePlanner, pl.LazyFrame]], *,
                    skip_unreadable: bool) -> list[pl.DataFrame]:
        frames: list[pl.DataFrame] = []
        for path, plan, _ in planned:
            frame = self.read_file(path, _collected(plan), skip_unreadable=skip_unreadable)
            if frame is not None:
                frames.append(frame)
        return frames


# --------------------------------------------------------------------------- shared helpers


def _collected(plan: FilePlanner) -> FileReader:
    """The reader that collects ``plan``'s query on its own (a factory: binds ``plan`` now, not at call time)."""
    return lambda path, scanned: _collect(plan(path, scanned), path=path)


def _checked_window(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    start, end = as_utc(start), as_utc(end)
    if end < start:
        raise ValueError(f"window end {format_utc(end)} precedes start {format_utc(start)}")
    return start, end


def _days_of_window(start: datetime, end: datetime) -> list[str]:
    return sorted({day for day, _ in cst_hours_between(start, end)})


@functools.cache  # one expression per column name: a day's 119 metric file plans ask ~800 times
def _null_string(name: str) -> pl.Expr:
    """Raw label column with the placeholder string ``"null"`` (and empty strings) turned into nulls."""
    col = pl.col(name).cast(pl.Utf8)
    return pl.when(col.is_in(["null", ""])).then(None).otherwise(col)


def _number(name: str, dtype: pl.DataType) -> pl.Expr:
    """A KPI value column as Float64. A value that is missing (null, or the placeholder string "null" that
    some exports write for a counter they never fill) stays null: absent, never zero, and it does not cost
    the file; any other string still fails the file, naming it."""
    if dtype == pl.Utf8:
        return _null_string(name).cast(pl.Float64)
    return pl.col(name).cast(pl.Float64)


def _utc_time(name: str, dtype: pl.DataType, *, path: Path, repeated: bool = False) -> pl.Expr:
    """Expression turning a raw time column of any released encoding into ``Datetime("us", "UTC")``.

    ``repeated``: the column holds few distinct strings (a metric file: one per minute), so
    only those are parsed and the rows take their parsed value (several times faster, the
    same values and the same errors).
    """
    col = pl.col(name)
    if dtype == pl.Utf8:
        if repeated:
            distinct = col.unique(maintain_order=True)
            return col.replace_strict(distinct, _parsed_utc(distinct), return_dtype=TIME).cast(TIME)
        return col.map_batches(_parsed_utc_series, return_dtype=TIME, is_elementwise=True)
    if dtype == pl.Null:  # an all-null column, as an empty export writes it
        return col.cast(pl.Datetime("us", "UTC"))
    if isinstance(dtype, pl.Datetime):
        zoned = col.dt.replace_time_zone("UTC") if dtype.time_zone is None else col.dt.convert_time_zone("UTC")
        return zoned.dt.cast_time_unit("us")
    raise ReaderError(f"{path}: column {name!r} has unsupported time type {dtype}")


def _parsed_utc(strings: pl.Expr) -> pl.Expr:
    # '2025-06-05T16:00:00Z', '2025-06-05 16:00:00+00:00', '2025-06-05 16:00:00', '...27.724Z'.
    # Only UTC offsets are stripped: any other offset fails to parse instead of being misread.
    cleaned = strings.str.strip_chars().str.replace(r"(Z|[+-]00:?00)$", "").str.replace("T", " ", literal=True)
    return cleaned.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="us", time_zone="UTC", strict=True)


def _parsed_utc_series(strings: pl.Series) -> pl.Series:
    # A log file's times are nearly all distinct, and polars' parser costs more than the read:
    # one ISO layout throughout (Filebeat's) is parsed with numpy, anything else as before.
    fast = parse_fixed_iso_utc(strings)
    return fast if fast is not None else strings.to_frame().select(_parsed_utc(pl.col(strings.name))).to_series()


def _in_window(window: Window) -> pl.Expr:
    if window is None:
        return pl.lit(True)
    return pl.col("time").is_between(pl.lit(window[0]).dt.cast_time_unit("us"), pl.lit(window[1]).dt.cast_time_unit("us"))


def _scan_schema(path: Path) -> tuple[pl.LazyFrame, pl.Schema]:
    try:
        lazy = pl.scan_parquet(path)
        return lazy, lazy.collect_schema()
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise ReaderError(f"{path}: unreadable parquet: {exc}") from exc


class InvalidUtf8Error(ReaderError):
    """A string column holds bytes that are not UTF-8 (the file is otherwise readable)."""


def _collect(lazy: pl.LazyFrame, *, path: Path, engine: Literal["auto", "in-memory", "streaming"] = "auto") -> pl.DataFrame:
    try:
        return lazy.collect(engine=engine)
    except (pl.exceptions.PolarsError, OSError) as exc:
        if "invalid utf-8" in str(exc).lower():
            raise InvalidUtf8Error(f"{path}: string values that are not UTF-8: {exc}") from exc
        raise ReaderError(f"{path}: cannot read rows: {exc}") from exc


def _decoded_copy(path: Path) -> tuple[pl.LazyFrame, pl.Schema, int]:
    """The file with every invalid UTF-8 string decoded with replacement characters; and how many were.

    Polars refuses the whole file on one bad byte sequence; pyarrow reads the bytes unchecked,
    so each string column is taken as binary and decoded value by value.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise ReaderError(f"{path}: unreadable parquet: {exc}") from exc
    bad = 0
    for index, column in enumerate(table.schema):
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            continue
        values: list[str | None] = []
        for raw in table.column(index).cast(pa.binary()).to_pylist():
            if raw is None:
                values.append(None)
                continue
            try:
                values.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                bad += 1
                values.append(raw.decode("utf-8", errors="replace"))
        table = table.set_column(index, column.name, pa.array(values, type=pa.string()))
    frame = pl.from_arrow(table)
    if not isinstance(frame, pl.DataFrame):
        raise ReaderError(f"{path}: not a table")
    lazy = frame.lazy()
    return lazy, lazy.collect_schema(), bad


def _require(schema: pl.Schema, columns: Iterable[str], *, path: Path) -> None:
    absent = [c for c in columns if c not in schema]
    if absent:
        raise ReaderError(f"{path}: missing required column(s) {absent}; has {list(schema)}")


def _stack(frames: list[pl.DataFrame], schema: dict[str, pl.DataType], columns: list[str] | None = None) -> pl.DataFrame:
    names = columns or list(schema)
    if not frames:
        return empty_frame({n: schema[n] for n in names})
    return pl.concat([f.select(names) for f in frames], how="vertical")


def _stack_sorted(frames: list[pl.DataFrame], schema: dict[str, pl.DataType], by: list[str]) -> pl.DataFrame:
    """``_stack`` then a stable sort on ``by`` (nulls first), without polars' slow multi-column string sort.

    Each key column becomes an int64 code with the same order (a string: its rank among the
    column's distinct values; a time: its integer value; null: before everything), and numpy's
    stable ``lexsort`` orders the rows: the same order as ``sort(by, maintain_order=True)``.
    """
    frame = _stack(frames, schema)
    if frame.height < 2:
        return frame
    keys: list[np.ndarray] = []
    for name in by:
        column = frame.get_column(name)
        if column.dtype == pl.Utf8:
            distinct = column.drop_nulls().unique().sort()
            code = column.replace_strict(distinct, pl.int_range(1, len(distinct) + 1, eager=True),
                                         default=0, return_dtype=pl.Int64)
            keys.append(code.to_numpy())
        else:
            physical = column.to_physical().cast(pl.Int64)
            keys.append(physical.is_not_null().to_numpy())
            keys.append(physical.fill_null(0).to_numpy())
    order = np.lexsort(keys[::-1])
    return frame[pl.Series(order)]


def _short_reason(exc: Exception, path: Path) -> str:
    """The error text without the leading file path (the path is recorded beside it)."""
    text = str(exc)
    prefix = f"{path}: "
    return text[len(prefix):] if text.startswith(prefix) else text


def _report_missing(missing: list[str]) -> None:
    # One line per read, not per hour file: a partial day (a simulated demo, a late
    # upload) would otherwise drown the log. Every item stays in ReadResult.missing.
    if not missing:
        return
    shown = "; ".join(missing[:2]) + (f"; ... and {len(missing) - 2} more" if len(missing) > 2 else "")
    log.warning("missing telemetry (%d): %s", len(missing), shown)


# --------------------------------------------------------------------------- APM


def _plan_apm_file(meta: layout.MetricFile, scanned: Scanned, *, level: str, window: Window) -> pl.LazyFrame:
    lazy, schema = scanned
    _require(schema, ["time"], path=meta.path)
    object_type = _null_string("object_type") if "object_type" in schema else pl.lit(None, pl.Utf8)
    object_id = _null_string("object_id") if "object_id" in schema else pl.lit(None, pl.Utf8)
    exprs = [
        _utc_time("time", schema["time"], path=meta.path, repeated=True).alias("time"),
        # The directory and file name say which object a file holds when the columns do not.
        pl.coalesce(object_type, pl.lit(level)).alias("object_type"),
        pl.coalesce(object_id, pl.lit(meta.key)).alias("object_id"),
    ]
    for kpi in APM_KPIS:
        exprs.append(_number(kpi, schema[kpi]).alias(kpi) if kpi in schema else pl.lit(None, pl.Float64).alias(kpi))
    return lazy.select(exprs).filter(_in_window(window))


def _apm_planner(meta: layout.MetricFile, *, level: str, window: Window) -> FilePlanner:
    return lambda _, scanned: _plan_apm_file(meta, scanned, level=level, window=window)


def _apm(data_dir: Path, days: list[str], *, level: str | None, window: Window, skip_unreadable: bool = False,
         report_missing: bool = True, ordered: bool = True) -> ReadResult:
    levels = layout.APM_LEVELS if level is None else (level,)
    for name in levels:
        if name not in layout.APM_LEVELS:
            raise ValueError(f"unknown APM level {name!r}; expected one of {layout.APM_LEVELS}")
    result = ReadResult(frame=empty_frame(APM_SCHEMA))
    entries: list[tuple[Path, FilePlanner]] = []
    for day in days:
        for name in levels:
            metas, missing = layout.apm_files(data_dir, day, name)
            result.missing += missing
            entries += [(meta.path, _apm_planner(meta, level=name, window=window)) for meta in metas]
    frames = result.read_files(entries, skip_unreadable=skip_unreadable)
    result.frame = _stack_sorted(frames, APM_SCHEMA, ["object_id", "time"]) if ordered else _stack(frames, APM_SCHEMA)
    if report_missing:
        _report_missing(result.missing)
    return result


def read_apm(data_dir: Path, *, start: datetime, end: datetime, level: str | None = None) -> ReadResult:
    """APM rows (pod and/or service level) with ``time`` in ``[start, end]``, in APM_SCHEMA."""
    window = _checked_window(start, end)
    return _apm(Path(data_dir), _days_of_window(*window), level=level, window=window)


# --------------------------------------------------------------------------- infra / TiDB


def _value_column(meta: layout.MetricFile, schema: pl.Schema) -> str:
    """The value column is named exactly as the KPI; fall back to the single non-label numeric column."""
    if meta.key in schema:
        return meta.key
    numeric = [n for n, t in schema.items() if n not in _INFRA_LABELS and n != "time" and t.is_numeric()]
    if len(numeric) == 1:
        return numeric[0]
    raise ReaderError(f"{meta.path}: no value column named {meta.key!r} (numeric columns: {numeric})")


def _plan_infra_file(meta: layout.MetricFile, scanned: Scanned, *, window: Window) -> pl.LazyFrame:
    lazy, schema = scanned
    _require(schema, ["time"], path=meta.path)
    value = _value_column(meta, schema)
    label = {n: (_null_string(n) if n in schema else pl.lit(None, pl.Utf8)) for n in _INFRA_LABELS}
    family = meta.family
    if family == "infra_pod":
        component, node = label["pod"], label["instance"]
    elif family == "infra_node":
        component, node = label["kubernetes_node"], label["kubernetes_node"]
    else:
        component, node = pl.lit(TIDB_COMPONENTS[family]), label["kubernetes_node"]
    exprs = [
        _utc_time("time", schema["time"], path=meta.path, repeated=True).alias("time"),
        pl.lit(family).alias("family"),
        pl.coalesce(label["kpi_key"], pl.lit(meta.key)).alias("kpi_key"),
        component.alias("component"),
        node.alias("node"),
        *(label[n].alias(n) for n in ("instance", "device", "mountpoint", "namespace", "type", "sql_type")),
        _number(value, schema[value]).alias("value"),
    ]
    return lazy.select(exprs).filter(_in_window(window))


def _infra_planner(meta: layout.MetricFile, *, window: Window) -> FilePlanner:
    return lambda _, scanned: _plan_infra_file(meta, scanned, window=window)


def _infra(
    data_dir: Path, days: list[str], *, families: Iterable[str] | None, kpis: Iterable[str] | None, window: Window,
    skip_unreadable: bool = False, report_missing: bool = True, ordered: bool = True,
) -> ReadResult:
    chosen = tuple(families) if families is not None else layout.INFRA_FAMILIES
    for family in chosen:
        if family not in layout.INFRA_FAMILIES:
            raise ValueError(f"unknown infra family {family!r}; expected one of {layout.INFRA_FAMILIES}")
    wanted = set(kpis) if kpis is not None else None
    result = ReadResult(frame=empty_frame(INFRA_SCHEMA))
    entries: list[tuple[Path, FilePlanner]] = []
    for day in days:
        for family in chosen:
            metas, missing = layout.infra_files(data_dir, day, family)
            result.missing += missing
            entries += [(meta.path, _infra_planner(meta, window=window))
                        for meta in metas if wanted is None or meta.key in wanted]
    frames = result.read_files(entries, skip_unreadable=skip_unreadable)
    result.frame = (_stack_sorted(frames, INFRA_SCHEMA, ["family", "kpi_key", "component", "time"]) if ordered
                    else _stack(frames, INFRA_SCHEMA))
    if report_missing:
        _report_missing(result.missing)
    return result


def read_infra(
    data_dir: Path,
    *,
    start: datetime,
    end: datetime,
    families: Iterable[str] | None = None,
    kpis: Iterable[str] | None = None,
) -> ReadResult:
    """Infra and TiDB rows in ``[start, end]``, in INFRA_SCHEMA; optionally only some families / KPI keys."""
    window = _checked_window(start, end)
    return _infra(Path(data_dir), _days_of_window(*window), families=families, kpis=kpis, window=window)


# --------------------------------------------------------------------------- logs


def _read_log_file(path: Path, scanned: Scanned, *, columns: list[str], window: Window) -> pl.DataFrame:
    lazy, schema = scanned
    # Without k8_pod no line can be attributed to a component: the file is bad, not silently pod-less.
    _require(schema, ["@timestamp", *(["k8_pod"] if "pod" in columns else [])], path=path)
    exprs: list[pl.Expr] = []
    for name in columns:
        if name == "time":
            exprs.append(_utc_time("@timestamp", schema["@timestamp"], path=path).alias("time"))
        elif name == "message":
            # The message is content, not a label: a literal "null" line stays as written.
            exprs.append(pl.col("message").cast(pl.Utf8) if "message" in schema else pl.lit(None, pl.Utf8).alias("message"))
        else:
            raw = _LOG_RAW[name]
            exprs.append((_null_string(raw) if raw in schema else pl.lit(None, pl.Utf8)).alias(name))
    return _collect(lazy.select(exprs).filter(_in_window(window)), path=path)


def _log_columns(columns: Iterable[str] | None) -> list[str]:
    if columns is None:
        return list(LOG_SCHEMA)
    requested = set(columns) | {"time"}  # time is always kept: rows are filtered on it
    unknown = requested - set(LOG_SCHEMA)
    if unknown:
        raise ValueError(f"unknown log column(s) {sorted(unknown)}; expected some of {list(LOG_SCHEMA)}")
    return [c for c in LOG_SCHEMA if c in requested]


# --------------------------------------------------------------------------- traces


# The span tags that carry a call's outcome (read into ``status_code`` and ``is_error``).
STATUS_TAGS: tuple[str, ...] = ("status.code", "http.status_code", "error", "otel.status_code")
# The span tags that say which host a client span connected to, first found wins (OpenTelemetry's
# current convention, then the older one); then the tags whose URL's host it is.
HOST_TAGS: tuple[str, ...] = ("server.address", "net.peer.name")
URL_TAGS: tuple[str, ...] = ("url.full", "http.url")
# Tags the span columns are made of: (raw list column, key field, value field, key, output column).
_TAGS: tuple[tuple[str, str, str, str, str], ...] = (
    *((("tags", "key", "value", key, f"tag:{key}")) for key in (
        "span.kind", *STATUS_TAGS, "rpc.service", "db.system", "peer.service", *HOST_TAGS, *URL_TAGS)),
    *((("process.tags", "key", "value", key, f"process:{key}"))
      for key in ("name", "podName", "node_name", "nodeName", *SPAN_LANGUAGE_KEYS)),
    ("references", "refType", "spanID", "CHILD_OF", "parent"),
)


def _first_values(lists: pl.Series, *, key_field: str, value_field: str, keys: list[str]) -> dict[str, pl.Series]:
    """Per row of a list-of-structs column, the ``value_field`` (as string) of the first element whose
    ``key_field`` equals each of ``keys``; null where none does (or the list is null).

    Vectorised on the exploded elements (each knows its row from the list lengths): no per-row
    loop and no per-list evaluation, the cost of ``list.eval`` on a full-scale hour of spans.
    """
    rows = len(lists)
    lengths = lists.list.len().fill_null(0).to_numpy()
    elements = lists.explode(empty_as_null=False, keep_nulls=False)
    if len(elements) != int(lengths.sum()):
        raise ReaderError(f"list column {lists.name!r}: {len(elements)} elements for lengths summing to {lengths.sum()}")
    owners_of = np.repeat(np.arange(rows, dtype=np.int64), lengths)
    names = elements.struct.field(key_field)
    values = elements.struct.field(value_field)
    if values.dtype != pl.Utf8:
        values = values.cast(pl.Utf8)
    found: dict[str, pl.Series] = {}
    for key in keys:
        hits = np.flatnonzero((names == key).fill_null(False).to_numpy())
        owners = owners_of[hits]
        first = np.concatenate(([True], owners[1:] != owners[:-1])) if len(owners) else np.zeros(0, dtype=bool)
        position = np.full(rows, -1, dtype=np.int64)
        position[owners[first]] = hits[first]
        index = pl.Series(position)
        found[key] = values.gather(pl.select(pl.when(index >= 0).then(index)).to_series()).alias(key)
    return found


def _tag_columns(raw: pl.DataFrame) -> pl.DataFrame:
    """The tag values ``span_attribute_exprs`` reads, one column each (``tag:<key>``, ``process:<key>``, ``parent``)."""
    columns: dict[str, pl.Series] = {}
    sources: dict[str, pl.Series | None] = {
        "tags": raw.get_column("tags") if "tags" in raw.columns else None,
        "process.tags": raw.get_column("process").struct.field("tags"),
        "references": raw.get_column("references") if "references" in raw.columns else None,
    }
    for source in dict.fromkeys(t[0] for t in _TAGS):
        wanted = [t for t in _TAGS if t[0] == source]
        lists = sources[source]
        if lists is None or isinstance(lists.dtype, pl.Null):
            for *_, output in wanted:
                columns[output] = pl.Series(output, [None] * raw.height, dtype=pl.Utf8)
            continue
        _, key_field, value_field, _, _ = wanted[0]
        values = _first_values(lists, key_field=key_field, value_field=value_field, keys=[t[3] for t in wanted])
        for _, _, _, key, output in wanted:
            columns[output] = values[key].alias(output)
    return pl.DataFrame(columns)


def _on_distinct(column: pl.Expr, transform: Callable[[pl.Expr], pl.Expr], dtype: pl.DataType) -> pl.Expr:
    """``transform(column)`` computed once per distinct value (operation names, service tags: few)."""
    distinct = column.unique(maintain_order=True)
    return column.replace_strict(distinct, transform(distinct), return_dtype=dtype).cast(dtype)


def check_trace_naming(naming: TraceNaming) -> None:
    """Raise ``SystemSpecError`` unless the trace reader can run ``naming``'s regexes.

    The system loader checks them with Python's ``re``; polars runs them with Rust's regex
    engine, which has no look-around or back-references. Checked once per read, here: inside a
    file's read the error would cost every file instead of naming the field.
    """
    for name, pattern in (("traces.rpc_service", naming.rpc_service), ("traces.operation", naming.operation)):
        if pattern is None:
            continue
        try:
            groups = re.compile(pattern).groups
            pl.Series([""], dtype=pl.Utf8).str.extract(pattern, 1)
        except (re.error, pl.exceptions.PolarsError) as exc:
            raise SystemSpecError(f"{name}: regex {pattern!r} cannot be run by the trace reader: {exc}") from exc
        if groups < 1:
            raise SystemSpecError(f"{name}: regex {pattern!r} needs a group for the peer name")


def _mapped(column: pl.Expr, mapping: dict[str, str], *, otherwise: pl.Expr) -> pl.Expr:
    """``mapping[value]`` where ``column`` holds one of its keys, else ``otherwise``.

    Comparisons, not ``replace``'s hash look-up: a ``[traces]`` map holds a few entries, and on
    the general path (every span, not every distinct value) comparing them costs less.
    """
    out = otherwise
    for key, value in mapping.items():  # keys are distinct: the order of the tests does not matter
        out = pl.when(column == key).then(pl.lit(value)).otherwise(out)
    return out


def _named_peer(column: pl.Expr, pattern: str, *, lowercase: bool) -> pl.Expr:
    """Group 1 of ``pattern`` in ``column``, once per distinct value (operation names, tag values: few)."""
    def extract(values: pl.Expr) -> pl.Expr:
        found = values.str.extract(pattern, 1)
        return found.str.to_lowercase() if lowercase else found

    return _on_distinct(column, extract, pl.Utf8())


# The host of an absolute URL (``scheme://[user@]host[:port]/...``): group 1, with its port.
URL_HOST = r"^\s*[A-Za-z][A-Za-z0-9+.-]*://(?:[^/?#]*@)?([^/?#]*)"
# A host, or an absolute URL's host, without its port (and path): group 1 is its first DNS label,
# which holds a letter (so an IPv4 address, all digits and dots, has none); an IPv6 address
# (bracketed, or colons) does not match, nor does a socket path.
_HOST_LABEL = (r"(?is)^\s*(?:[a-z][a-z0-9+.-]*://(?:[^/?#]*@)?)?"
               r"([0-9-]*[a-z_][a-z0-9_-]*)(?:\.[a-z0-9_.-]*)?(?::[0-9]+)?(?:[/?#].*)?\s*$")


def _host_peers(hosts: pl.Expr) -> pl.Expr:
    """The peer a host or a URL names: the host's first DNS label, lower-cased, without a port; null for
    an IP address (v4, v6 bracketed or not), ``localhost`` or anything that is not a host name.

    One regex, and its input read once: polars compiles a pattern each time an expression runs
    (the fast path runs these once per file) and evaluates every reference to a column again.
    """
    return hosts.str.extract(_HOST_LABEL, 1).str.to_lowercase().replace("localhost", None)


def _raw_hosts(tag: Callable[[str], pl.Expr]) -> pl.Expr:
    """The first of ``HOST_TAGS`` that is not empty, else the first of ``URL_TAGS`` that is an absolute URL."""
    hosts = (pl.when(tag(key) != "").then(tag(key)) for key in HOST_TAGS)
    urls = (pl.when(tag(key).str.contains("://", literal=True)).then(tag(key)) for key in URL_TAGS)
    return pl.coalesce(*hosts, *urls)


def _url_hosts(values: pl.Expr) -> pl.Expr:
    """A URL's ``host[:port]`` (null where it names none); any other value as it is."""
    host = values.str.extract(URL_HOST, 1)
    return pl.when(values.str.contains("://", literal=True)).then(pl.when(host != "").then(host)).otherwise(values)


def peer_host_expr(tag: Callable[[str], pl.Expr]) -> pl.Expr:
    """The host a span connected to, as written: the first of ``HOST_TAGS`` that is not empty, else the host
    (and port) of the first of ``URL_TAGS`` that is an absolute URL; ``tag(key)`` is the tag's column."""
    return _on_distinct(_raw_hosts(tag), _url_hosts, pl.Utf8())


def span_attribute_exprs(*, naming: TraceNaming, peer_tags: bool = False) -> list[pl.Expr]:
    """The span columns made of low-cardinality raw values only (operation, service, pod, node, kind, peer, status).

    They read ``operationName``, ``process.serviceName`` and the tag columns of ``_tag_columns``,
    row by row: the pyarrow path (``preprocess.span_arrow``) evaluates them once per distinct
    combination of those values. ``naming`` (the system's ``[traces]``) spells the services and
    names a client span's peer; ``peer_tags`` adds the raw tags (``SPAN_RAW_TAGS``): those it names
    peers from, for a caller that looks for peers the naming misses, and the language the process's
    instrumentation states (``sdk_language``), for one that drafts runtimes.
    """
    service_raw = pl.col("process").struct.field("serviceName").cast(pl.Utf8)

    def tag(key: str) -> pl.Expr:
        return pl.col(f"tag:{key}")

    kind = tag("span.kind").str.to_lowercase()
    # status.code is a numeric string ('0'); a non-numeric value becomes null, not an error.
    status = tag("status.code").cast(pl.Int64, strict=False)
    http_status = tag("http.status_code").cast(pl.Int64, strict=False)
    error_tag = tag("error").str.to_lowercase() == "true"
    otel_error = tag("otel.status_code").str.to_uppercase() == "ERROR"
    operation = pl.col("operationName").cast(pl.Utf8)
    # A client span's callee, first found wins: an explicit peer.service tag (OpenTelemetry's
    # convention, and what imported datasets carry) as written, then the system's rules in
    # order: the rpc.service tag, the db.system tag (case-insensitive), the operation name; then
    # (``peer_host``) the host it connected to, which OpenTelemetry's clients record.
    peers = [tag("peer.service")]
    if naming.rpc_service is not None:
        peers.append(_named_peer(tag("rpc.service"), naming.rpc_service, lowercase=naming.lowercase))
    if naming.db_system:
        components = {key.lower(): value for key, value in naming.db_system.items()}
        peers.append(_mapped(tag("db.system").str.to_lowercase(), components, otherwise=pl.lit(None, pl.Utf8)))
    if naming.operation is not None:
        peers.append(_named_peer(operation, naming.operation, lowercase=naming.lowercase))
    if naming.peer_host:
        peers.append(_on_distinct(_raw_hosts(tag), _host_peers, pl.Utf8()))
    service = _mapped(service_raw, naming.service_aliases, otherwise=service_raw)
    return [
        operation.alias("operation"),
        service.alias("service"),
        pl.coalesce(pl.col("process:name"), pl.col("process:podName")).alias("pod"),
        pl.coalesce(pl.col("process:node_name"), pl.col("process:nodeName")).alias("node"),
        kind.alias("span_kind"),
        pl.when(kind == "client").then(pl.coalesce(peers)).alias("peer_service"),
        status.alias("status_code"),
        (
            error_tag.fill_null(False)
            | otel_error.fill_null(False)
            | (status.fill_null(0) != 0)
            | (http_status.fill_null(0) >= 500)
        ).alias("is_error"),
        # The raw tags; the host of client spans only (a server span's net.peer.name is its caller's).
        *(((pl.when(kind == "client").then(peer_host_expr(tag)) if name == "peer_host" else tag(key)).alias(name)
           for name, key in SPAN_PEER_TAG_KEYS.items()) if peer_tags else ()),
        # The first of the process's language tags that is not empty, as written.
        *((pl.coalesce(*(pl.when(process_tag != "").then(process_tag)
                         for process_tag in (pl.col(f"process:{key}") for key in SPAN_LANGUAGE_KEYS)))
           .alias("sdk_language"),) if peer_tags else ()),
    ]


def span_identity_exprs() -> list[pl.Expr]:
    """The span columns of each span's own values: ids, parent, start (``time`` until renamed), duration."""
    return [
        pl.col("traceID").cast(pl.Utf8).alias("trace_id"),
        pl.col("spanID").cast(pl.Utf8).alias("span_id"),
        pl.col("parent").cast(pl.Utf8).alias("parent_span_id"),
        pl.col("time"),
        pl.col("duration").cast(pl.Int64).alias("duration_us"),
    ]


def span_schema(*, peer_tags: bool) -> dict[str, pl.DataType]:
    """The columns a trace read returns: ``SPAN_SCHEMA``, then ``SPAN_RAW_TAGS`` when asked for."""
    return {**SPAN_SCHEMA, **SPAN_RAW_TAGS} if peer_tags else SPAN_SCHEMA


def span_columns(frame: pl.LazyFrame, *, naming: TraceNaming, peer_tags: bool = False) -> pl.LazyFrame:
    """The span columns in ``span_schema``'s order from the raw columns plus ``_tag_columns`` (start as ``time``)."""
    named = {e.meta.output_name(): e for e in (*span_identity_exprs(),
                                                *span_attribute_exprs(naming=naming, peer_tags=peer_tags))}
    return (frame.select(named["time" if name == "start" else name] for name in span_schema(peer_tags=peer_tags))
            .rename({"time": "start"}))


# Raw trace columns the span columns are made of (projection push-down: `logs`, `flags`,
# `startTimeMillis` when `startTime` is there, are never read).
_SPAN_RAW = ("traceID", "spanID", "operationName", "duration", "process", "tags", "references")


def _read_trace_file(path: Path, scanned: Scanned, *, window: Window, naming: TraceNaming,
                     peer_tags: bool = False) -> pl.DataFrame:
    lazy, schema = scanned
    if "startTime" in schema:
        start_us = pl.col("startTime").cast(pl.Int64)  # µs since epoch (the official README says ns: wrong)
    elif "startTimeMillis" in schema:
        start_us = pl.col("startTimeMillis").cast(pl.Int64) * 1000
    else:
        raise ReaderError(f"{path}: no startTime or startTimeMillis column; has {list(schema)}")
    _require(schema, ["traceID", "spanID", "operationName", "duration", "process"], path=path)
    # Imported here: pyarrow costs the CLI's other commands ~75 ms of start-up.
    from preprocess.span_arrow import arrow_spans

    flat = arrow_spans(path, window=window, naming=naming, peer_tags=peer_tags) if "startTime" in schema else None
    if flat is not None:
        return flat
    # Filter on the cheap integer time before touching the nested columns (predicate push-down).
    raw = _collect(lazy.select(*(c for c in _SPAN_RAW if c in schema), start_us.cast(pl.Datetime("us", "UTC"))
                               .alias("time")).filter(_in_window(window)), path=path, engine="in-memory")
    try:
        flat = pl.concat([raw, _tag_columns(raw)], how="horizontal")
    except (pl.exceptions.PolarsError, TypeError, ReaderError) as exc:
        raise ReaderError(f"{path}: cannot read rows: {exc}") from exc
    return _collect(span_columns(flat.lazy(), naming=naming, peer_tags=peer_tags), path=path)


# --------------------------------------------------------------------------- hourly families


def _hourly(
    data_dir: Path,
    family: str,
    slots: list[tuple[str, int]],
    *,
    read_file: FileReader,
    schema: dict[str, pl.DataType],
    columns: list[str] | None = None,
    skip_unreadable: bool = False,
    report_missing: bool = True,
) -> ReadResult:
    result = ReadResult(frame=empty_frame(schema))
    frames: list[pl.DataFrame] = []
    for day, hour in slots:
        paths, missing = layout.hour_files(data_dir, family, day, hour)
        result.missing += missing
        for path in paths:
            frame = result.read_file(path, read_file, skip_unreadable=skip_unreadable)
            if frame is not None:
                frames.append(frame)
    result.frame = _stack(frames, schema, columns)
    if report_missing:
        _report_missing(result.missing)
    return result


def read_logs(
    data_dir: Path, *, start: datetime, end: datetime, columns: Iterable[str] | None = None,
    skip_unreadable: bool = False, report_missing: bool = True,
) -> ReadResult:
    """Filebeat log rows with ``time`` in ``[start, end]``, in LOG_SCHEMA (or only ``columns`` plus time).

    ``report_missing=False`` leaves the warning about absent hour files to the caller (the
    nightly job summarises a whole day in one line).
    """
    window = _checked_window(start, end)
    names = _log_columns(columns)
    return _hourly(
        Path(data_dir), "log", cst_hours_between(*window),
        read_file=lambda p, scanned: _read_log_file(p, scanned, columns=names, window=window), schema=LOG_SCHEMA,
        columns=names, skip_unreadable=skip_unreadable, report_missing=report_missing,
    )


def read_traces(
    data_dir: Path, *, start: datetime, end: datetime, naming: TraceNaming, peer_tags: bool = False,
    skip_unreadable: bool = False, report_missing: bool = True,
) -> ReadResult:
    """Flattened Jaeger spans whose ``start`` is in ``[start, end]``, in SPAN_SCHEMA.

    ``naming`` is the system's ``[traces]`` (``SystemSpec.trace``): how span services are
    spelled and how a client span names its peer. ``peer_tags`` adds the raw ``SPAN_RAW_TAGS``.
    """
    window = _checked_window(start, end)
    check_trace_naming(naming)
    return _hourly(
        Path(data_dir), "trace", cst_hours_between(*window),
        read_file=lambda p, scanned: _read_trace_file(p, scanned, window=window, naming=naming, peer_tags=peer_tags),
        schema=span_schema(peer_tags=peer_tags), skip_unreadable=skip_unreadable, report_missing=report_missing,
    )


# --------------------------------------------------------------------------- whole day


def read_day(day_dir: Path, family: str, *, naming: TraceNaming, peer_tags: bool = False,
             skip_unreadable: bool = False, report_missing: bool = True, ordered: bool = True) -> ReadResult:
    """Every row of one family in a CST day directory, unfiltered (for the nightly job).

    ``family`` is one of "apm", "infra", "log", "trace". Hour files are read whatever their
    exact name (``-00-00`` or ``-59-00``); absent hours are listed in ``missing``. With
    ``skip_unreadable`` a bad file costs that file only (listed in ``issues``);
    ``report_missing=False`` leaves the warning about absent files to the caller.
    ``ordered=False`` leaves APM and infra rows in file order instead of sorting them as
    ``read_apm`` / ``read_infra`` do, for a caller that groups them itself (a full-scale
    day's infra sort costs about a third of a second). ``naming`` and ``peer_tags`` are
    ``read_traces``'. ``naming`` has no default (the peers a span names are the system's, and
    HipsterShop's are not everyone's) and is required whatever the family, though only spans
    name peers: a caller reading every family in one loop cannot leave it out for traces and
    find out at run time (the type checker says so).
    """
    day_dir = Path(day_dir)
    day, data_dir = day_dir.name, day_dir.parent
    if not layout.is_day_dir(day_dir):
        raise ReaderError(f"{day_dir}: not a day directory named YYYY-MM-DD")
    if family == "apm":
        return _apm(data_dir, [day], level=None, window=None, skip_unreadable=skip_unreadable,
                    report_missing=report_missing, ordered=ordered)
    if family == "infra":
        return _infra(data_dir, [day], families=None, kpis=None, window=None, skip_unreadable=skip_unreadable,
                      report_missing=report_missing, ordered=ordered)
    if family not in layout.HOURLY_DIRS:
        raise ValueError(f"unknown family {family!r}; expected apm, infra, log or trace")
    slots = [(day, hour) for hour in range(24)]
    if family == "log":
        names = list(LOG_SCHEMA)
        return _hourly(
            data_dir, "log", slots,
            read_file=lambda p, scanned: _read_log_file(p, scanned, columns=names, window=None), schema=LOG_SCHEMA,
            skip_unreadable=skip_unreadable, report_missing=report_missing,
        )
    check_trace_naming(naming)
    return _hourly(data_dir, "trace", slots,
                   read_file=lambda p, scanned: _read_trace_file(p, scanned, window=None, naming=naming,
                                                                 peer_tags=peer_tags),
                   schema=span_schema(peer_tags=peer_tags), skip_unreadable=skip_unreadable,
                   report_missing=report_missing)
