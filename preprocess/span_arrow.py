"""Trace reading through pyarrow: the fast path of ``preprocess.readers._read_trace_file``.

Polars decodes a nested column whole. Here the usual Jaeger export is read leaf by leaf (no
tag ``type``, no ``references.traceID``), its low-cardinality strings as dictionaries, and
the tag look-ups match dictionary codes; only the values a span keeps go on to polars.
A file of another shape is left to the general polars path (``arrow_spans`` returns None).
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from preprocess.readers import _TAGS, Window

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
StructColumn = TypeVar("StructColumn", pa.Array, pa.ChunkedArray)

# Leaf columns of the usual Jaeger export the fast path reads (``arrow_spans``): tag `type`
# fields, `references.traceID`, `logs` and `flags` are never decoded.
_ARROW_LEAVES = (
    "traceID", "spanID", "operationName", "duration", "startTime",
    "tags.list.element.key", "tags.list.element.value",
    "process.serviceName", "process.tags.list.element.key", "process.tags.list.element.value",
    "references.list.element.refType", "references.list.element.spanID",
)
# Low-cardinality leaves read as dictionaries: tag keys are matched on their codes, and only the
# values a span keeps are turned into strings.
_ARROW_DICTIONARY = (
    "operationName", "tags.list.element.key", "tags.list.element.value", "process.serviceName",
    "process.tags.list.element.key", "process.tags.list.element.value", "references.list.element.refType",
)


def _is_text(dtype: pa.DataType) -> bool:
    if pa.types.is_dictionary(dtype):
        dtype = dtype.value_type
    return pa.types.is_string(dtype) or pa.types.is_large_string(dtype)


def _is_list(dtype: pa.DataType) -> bool:
    return pa.types.is_list(dtype) or pa.types.is_large_list(dtype)  # large: files written by polars


def _field(structs: StructColumn, name: str) -> StructColumn:
    """A struct column's child (null where the struct is); without nulls, the child itself (no copy)."""
    if isinstance(structs, pa.ChunkedArray):
        return pa.chunked_array([_field(chunk, name) for chunk in structs.chunks], type=structs.type.field(name).type)
    return structs.field(name) if structs.null_count == 0 else pc.struct_field(structs, name)


def first_values(lists: pa.ChunkedArray, *, key_field: str, value_field: str,
                 keys: list[str]) -> dict[str, pa.ChunkedArray]:
    """``preprocess.readers._first_values`` on an arrow list-of-structs column (keys may be dictionary-encoded)."""
    found: dict[str, list[pa.Array]] = {key: [] for key in keys}
    for chunk in lists.chunks:
        rows = len(chunk)
        if chunk.null_count == 0:
            # Each element's row from the list offsets, read from their buffer: list_parent_indices
            # and ``chunk.offsets.to_numpy()`` cost ten times more.
            width = np.int64 if pa.types.is_large_list(chunk.type) else np.int32
            offsets = np.frombuffer(chunk.buffers()[1], dtype=width)[chunk.offset:chunk.offset + rows + 1]
            elements = chunk.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
            owners_of = np.repeat(np.arange(rows, dtype=np.int64), np.diff(offsets))
        else:
            elements = chunk.flatten()  # skips null lists (whatever offsets they have), like list_parent_indices
            owners_of = pc.list_parent_indices(chunk).to_numpy()
        names, values = _field(elements, key_field), _field(elements, value_field)
        # Key fields are read as dictionaries (_ARROW_DICTIONARY); values that are not strings are
        # left to the general path, which casts them.
        if not (pa.types.is_dictionary(names.type) and all(_is_text(a.type) for a in (names, values))):
            raise TypeError(f"{key_field} / {value_field}: {names.type} / {values.type}")
        # Each element's key as its number in ``keys`` (len(keys): another key, or null), from the
        # dictionary's entries and the codes: no element's string is compared.
        entries = names.dictionary.to_pylist()
        lookup = np.array([keys.index(e) if e in keys else len(keys) for e in entries] + [len(keys)], dtype=np.int16)
        numbers = lookup[names.indices.fill_null(len(entries)).to_numpy()]
        for number, key in enumerate(keys):
            hits = np.flatnonzero(numbers == number)
            if len(hits) == 0:
                found[key].append(pa.nulls(rows, values.type))
                continue
            owners = owners_of[hits]
            first = np.concatenate(([True], owners[1:] != owners[:-1]))
            position = np.full(rows, -1, dtype=np.int64)
            position[owners[first]] = hits[first]
            # Still a dictionary when the values are one: polars turns it into strings, in parallel.
            found[key].append(pc.take(values, pa.array(position, mask=position < 0)))
    return {key: pa.chunked_array(arrays) for key, arrays in found.items()}


def arrow_spans(path: Path, *, window: Window) -> pl.DataFrame | None:
    """The columns ``preprocess.readers._span_exprs`` reads; None when the file is not of the usual shape.

    The usual export (``startTime`` µs, ``tags``, ``process.tags`` and ``references`` lists of
    string structs) is read leaf by leaf, low-cardinality strings as dictionaries, cheaper than
    decoding the nested columns whole. Anything else (or a read error) returns
    None, and the general polars path reads the file with its own checks and error reporting.
    """
    try:
        parquet = pq.ParquetFile(path, read_dictionary=list(_ARROW_DICTIONARY))
        leaves = {parquet.schema.column(i).path for i in range(len(parquet.schema))}
        if not leaves.issuperset(_ARROW_LEAVES):
            return None
        table = parquet.read(columns=list(_ARROW_LEAVES))
        start = table.column("startTime")
        if not (pa.types.is_int64(start.type) and all(
                _is_list(table.schema.field(c).type) for c in ("tags", "references"))):
            return None
        process = table.column("process")
        columns: dict[str, pa.ChunkedArray] = {}
        for source, lists in (("tags", table.column("tags")), ("process.tags", _field(process, "tags")),
                              ("references", table.column("references"))):
            wanted = [t for t in _TAGS if t[0] == source]
            _, key_field, value_field, _, _ = wanted[0]
            values = first_values(lists, key_field=key_field, value_field=value_field, keys=[t[3] for t in wanted])
            for _, _, _, key, output in wanted:
                columns[output] = values[key]
        flat = pa.table({
            "traceID": table.column("traceID"),
            "spanID": table.column("spanID"),
            "operationName": table.column("operationName"),
            "duration": table.column("duration"),
            "serviceName": _field(process, "serviceName"),
            "time": start,
            **columns,
        })
        # Polars takes arrow strings unchecked: bytes that are not UTF-8 must go to the general
        # path, which reports and decodes them.
        flat.validate(full=True)
        frame = pl.from_arrow(flat)
    except (pa.ArrowException, pl.exceptions.PolarsError, OSError, ValueError, TypeError, KeyError):
        return None
    if not isinstance(frame, pl.DataFrame):
        return None
    if window is not None:
        # On the flat columns, by polars: filtering the nested ones first would copy them.
        low, high = (int((t - _EPOCH) // timedelta(microseconds=1)) for t in window)
        frame = frame.filter(pl.col("time").is_between(low, high))
    # Text columns as polars strings (dictionaries arrive as categoricals).
    text = [name for name, dtype in frame.schema.items() if name not in ("duration", "time")]
    return frame.with_columns(pl.col(text).cast(pl.Utf8)).with_columns(
        pl.struct("serviceName").alias("process"), pl.col("time").cast(pl.Datetime("us", "UTC"))).drop("serviceName")
