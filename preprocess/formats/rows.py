"""Column buffers that become canonical frames: readers append one record at a time.

Times are appended as integer microseconds since the epoch (UTC) and cast once at the end,
which is both faster than building datetimes per record and exact (no float rounding).
"""
from __future__ import annotations

from typing import Any

import polars as pl

from preprocess.schema import APM_SCHEMA, INFRA_SCHEMA, LOG_SCHEMA, SPAN_IMPORT_SCHEMA

_TIME_COLUMNS = ("time", "start")
# The order each reader's frame comes out in, so a format's output does not depend on file order.
SORT_KEYS: dict[str, tuple[str, ...]] = {
    "spans": ("start", "trace_id", "span_id"),
    "logs": ("time", "pod", "message"),
    "apm": ("object_id", "object_type", "time"),
    "infra": ("family", "kpi_key", "component", "time", "instance", "device", "mountpoint", "type", "sql_type"),
}
# Spans carry the raw tags their peer is named from at read time and the language their process states
# (``SPAN_RAW_TAGS``) besides the canonical columns.
_SCHEMAS: dict[str, dict[str, pl.DataType]] = {"spans": SPAN_IMPORT_SCHEMA, "logs": LOG_SCHEMA, "apm": APM_SCHEMA,
                                               "infra": INFRA_SCHEMA}


class Rows:
    """Records of one canonical family (``spans``, ``logs``, ``apm``, ``infra``) in column lists."""

    def __init__(self, family: str) -> None:
        self.family = family
        self.schema = _SCHEMAS[family]
        self._columns: dict[str, list[Any]] = {name: [] for name in self.schema}

    def __len__(self) -> int:
        return len(self._columns["time" if "time" in self._columns else "start"])

    def append(self, **values: Any) -> None:
        """One record; a column not given is null. Time columns take integer µs since the epoch."""
        unknown = set(values) - set(self._columns)
        if unknown:
            raise KeyError(f"not columns of {self.family}: {sorted(unknown)}")
        for name, column in self._columns.items():
            column.append(values.get(name))

    def frame(self) -> pl.DataFrame:
        """The records in the canonical schema, sorted on the family's key."""
        build = {n: (pl.Int64 if n in _TIME_COLUMNS else t) for n, t in self.schema.items()}
        frame = pl.DataFrame(self._columns, schema=build)
        frame = frame.with_columns(*(pl.col(n).cast(self.schema[n]) for n in _TIME_COLUMNS if n in self.schema))
        return frame.sort(list(SORT_KEYS[self.family]), nulls_last=True, maintain_order=True)
