"""Trace reading through pyarrow: the fast path of ``preprocess.readers._read_trace_file``.

Polars decodes a nested column whole. Here the usual Jaeger export is read leaf by leaf (no
tag ``type``, no ``references.traceID``), its low-cardinality strings (operation and service
names, tag keys and values) as dictionaries. Tag look-ups match dictionary codes, and the
span columns made of those strings (``readers.span_attribute_exprs``) are computed once per
distinct combination of codes, a few hundred an hour instead of one per span, then handed to
every span of that combination. A file of another shape is left to the general polars path
(``arrow_spans`` returns None).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from preprocess.arrow_numpy import arrow_of, numpy_view
from preprocess.readers import _TAGS, URL_TAGS, Window, span_attribute_exprs, span_identity_exprs, span_schema
from rca.system import TraceNaming
from rca.timeutil import epoch_us

StructColumn = TypeVar("StructColumn", pa.Array, pa.ChunkedArray)

# Leaf columns of the usual Jaeger export the fast path reads (``arrow_spans``): tag `type`
# fields, `references.traceID`, `logs` and `flags` are never decoded.
_ARROW_LEAVES = (
    "traceID", "spanID", "operationName", "duration", "startTime",
    "tags.list.element.key", "tags.list.element.value",
    "process.serviceName", "process.tags.list.element.key", "process.tags.list.element.value",
    "references.list.element.refType", "references.list.element.spanID",
)
# Flat columns of each span's own values read by polars rather than pyarrow: polars decodes
# them straight into its own layout, checking UTF-8 as it reads (a full-scale day: ~0.6 s of
# CPU less than pyarrow's read, its UTF-8 check and the conversion to polars).
_POLARS_COLUMNS = ("traceID", "spanID", "duration")
# Low-cardinality leaves read as dictionaries: tag keys are matched on their codes, and the
# span attributes are computed per distinct combination of codes.
_ARROW_DICTIONARY = (
    "operationName", "tags.list.element.key", "tags.list.element.value", "process.serviceName",
    "process.tags.list.element.key", "process.tags.list.element.value", "references.list.element.refType",
)
# Codes are combined into one integer per row; past this many possible combinations the
# combined codes are first renumbered densely (a table of this many flags, or a sort).
_DENSE_LIMIT = 1 << 16


@dataclass(frozen=True)
class _Coded:
    """A low-cardinality column as its distinct strings and each row's code among them (-1: null)."""

    dictionary: pa.Array
    codes: np.ndarray


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


def _codes(array: pa.Array) -> np.ndarray:
    """A dictionary array's indices as int32 (int64 when they are), -1 where the value is null.

    Not widened to int64: an hour's tag lists hold ~1.3 M elements, and every array made from
    their codes is then half the memory to write and read.
    """
    if not (pa.types.is_dictionary(array.type) and _is_text(array.type)):
        raise TypeError(f"not a dictionary of strings: {array.type}")
    indices = array.indices if array.null_count == 0 else array.indices.fill_null(-1)
    wide = pa.types.is_int64(indices.type) or pa.types.is_uint32(indices.type) or pa.types.is_uint64(indices.type)
    return numpy_view(indices).astype(np.int64 if wide else np.int32, copy=False)


def _first_hits(lists: pa.Array, *, key_field: str, keys: list[str]) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """The elements of an arrow list-of-structs array, and the lists' first elements of each key.

    Returns the lists' elements, then the positions among them of every list's first element
    whose ``key_field`` (a dictionary) is a key of ``keys``, and each one's slot: its key's
    number in ``keys`` times the number of lists, plus its list's row.
    """
    rows, width = len(lists), len(keys)
    if lists.null_count == 0:
        # Each element's row from the list offsets, read from their buffer: list_parent_indices
        # and ``lists.offsets.to_numpy()`` cost ten times more.
        offset_type = np.int64 if pa.types.is_large_list(lists.type) else np.int32
        offsets = np.frombuffer(lists.buffers()[1], dtype=offset_type)[lists.offset:lists.offset + rows + 1]
        elements = lists.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    else:
        elements = lists.flatten()  # skips null lists (whatever offsets they have), like list_parent_indices
    # Rows, elements and slots as int32 where they fit (an hour: ~0.2 M rows, ~1.3 M elements):
    # the arrays below are written and read whole, and half the bytes is most of their cost.
    index_type = np.int32 if max(rows * (width + 1), len(elements)) < np.iinfo(np.int32).max else np.int64
    if lists.null_count == 0:
        owners_of = np.repeat(np.arange(rows, dtype=index_type), np.diff(offsets))
    else:
        owners_of = numpy_view(pc.list_parent_indices(lists)).astype(index_type, copy=False)
    # Each element's key as its number in ``keys`` (``width``: another key, or null), from the
    # dictionary's entries and the codes: no element's string is compared.
    names = _field(elements, key_field)
    codes = _codes(names)
    lookup = np.array([keys.index(e) if e in keys else width for e in names.dictionary.to_pylist()] + [width],
                      dtype=index_type)
    numbers = lookup[codes]  # a null key's code -1 takes the last entry: no key
    hits = np.flatnonzero(numbers < width).astype(index_type, copy=False)
    slots = numbers[hits] * index_type(rows) + owners_of[hits]
    taken = np.zeros(rows * width, dtype=bool)
    taken[slots] = True
    if np.count_nonzero(taken) < len(hits):
        # A key repeated within one list: its first element wins (a stable sort puts it first).
        order = np.argsort(slots, kind="stable")
        ordered = slots[order]
        first = np.concatenate(([True], ordered[1:] != ordered[:-1]))
        hits, slots = hits[order[first]], ordered[first]
    return elements, hits, slots


def _text_field(elements: pa.Array, name: str) -> pa.Array:
    values = _field(elements, name)
    if not _is_text(values.type):
        raise TypeError(f"{name}: {values.type}")  # the general path casts other values
    return values


def first_positions(lists: pa.Array, *, key_field: str, value_field: str,
                    keys: list[str]) -> tuple[pa.Array, np.ndarray]:
    """``preprocess.readers._first_values`` on an arrow list-of-structs array, as positions.

    Returns the list elements' ``value_field`` and, per key of ``keys`` (one row each, a
    contiguous array of one value per list) and per list, the position among them of the
    list's first element whose ``key_field`` (a dictionary) is that key; -1 where none is, or
    the list is null.
    """
    elements, hits, slots = _first_hits(lists, key_field=key_field, keys=keys)
    values = _text_field(elements, value_field)
    positions = np.full(len(lists) * len(keys), -1, dtype=hits.dtype)
    positions[slots] = hits
    return values, positions.reshape(len(keys), len(lists))


def first_value_codes(lists: pa.Array, *, key_field: str, value_field: str,
                      keys: list[str]) -> tuple[pa.Array, np.ndarray]:
    """``first_positions`` for a dictionary ``value_field``: its dictionary, and the values' codes.

    Per key of ``keys`` (one row each, read key by key) and per list, the code of the value
    of the list's first element of that key; -1 where none is, the list is null or the value is.
    The codes are taken for those elements only, not handed on through their positions.
    """
    elements, hits, slots = _first_hits(lists, key_field=key_field, keys=keys)
    values = _text_field(elements, value_field)
    codes = _codes(values)
    first_codes = np.full(len(lists) * len(keys), -1, dtype=codes.dtype)
    first_codes[slots] = codes[hits]
    return values.dictionary, first_codes.reshape(len(keys), len(lists))


def _dense(key: np.ndarray, *, size: int) -> tuple[np.ndarray, int]:
    """``key`` (values in [0, size)) renumbered 0..n-1 in the same order, and n."""
    if size <= _DENSE_LIMIT:
        used = np.zeros(size, dtype=bool)
        used[key] = True
        number = np.cumsum(used) - 1
        return number[key], int(number[-1]) + 1
    distinct, inverse = np.unique(key, return_inverse=True)
    return inverse.reshape(-1), len(distinct)


def distinct_rows(columns: list[_Coded], *, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's number among the distinct combinations of ``columns``' codes, and one row of each."""
    key = np.zeros(rows, dtype=np.int64)
    size = 1
    for column in columns:
        count = len(column.dictionary) + 1  # a null is one more value
        if size * count > _DENSE_LIMIT:
            key, size = _dense(key, size=size)
        key = key * count + (column.codes + 1)
        size *= count
    key, combinations = _dense(key, size=size)
    representative = np.empty(combinations, dtype=np.int64)
    representative[key] = np.arange(rows, dtype=np.int64)  # any row of a combination stands for it
    return key, representative


# A URL's scheme and authority (``readers.URL_HOST`` reads the host from them), and the rest.
_URL_ORIGIN = r"(?s)^(\s*[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*).*$"


def _url_origins(column: _Coded) -> _Coded:
    """A URL tag's column with each URL cut to its scheme and authority, equal ones sharing a code.

    The reader takes only the host from a URL; its path and query (ids, search terms) would make
    nearly every span a distinct combination of codes, each computed on its own. Only the values
    the column holds are cut (the dictionary is every tag's values).
    """
    held = column.codes >= 0
    if not held.any():
        return column
    distinct, inverse = np.unique(column.codes[held], return_inverse=True)
    urls = column.dictionary.take(arrow_of(distinct))
    origins = pc.dictionary_encode(pc.replace_substring_regex(urls, pattern=_URL_ORIGIN, replacement=r"\1"))
    codes = np.full(len(column.codes), -1, dtype=np.int64)
    codes[held] = _codes(origins)[inverse.reshape(-1)]
    return _Coded(origins.dictionary, codes)


def _taken(values: pa.Array, positions: np.ndarray) -> pa.Array:
    """``values`` at ``positions``, null where a position is -1."""
    return pc.take(values, arrow_of(positions, null=positions < 0))


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    if not isinstance(frame, pl.DataFrame):
        raise TypeError(f"not a table: {type(frame)}")
    return frame


def _span_batch(batch: pa.RecordBatch, *, own: pl.DataFrame, window: Window, naming: TraceNaming,
                peer_tags: bool) -> pl.DataFrame:
    """The span columns of one record batch (one array per column) and its rows' ``_POLARS_COLUMNS`` (``own``)."""
    process = batch.column("process")
    coded: dict[str, _Coded] = {
        name: _Coded(array.dictionary, _codes(array))
        for name, array in (("operationName", batch.column("operationName")),
                            ("serviceName", _field(process, "serviceName")))
    }
    for source, lists in (("tags", batch.column("tags")), ("process.tags", _field(process, "tags"))):
        wanted = [t for t in _TAGS if t[0] == source]
        _, key_field, value_field, _, _ = wanted[0]
        dictionary, value_codes = first_value_codes(lists, key_field=key_field, value_field=value_field,
                                                    keys=[t[3] for t in wanted])
        for column, (_, _, _, key, output) in enumerate(wanted):
            coded[output] = _Coded(dictionary, value_codes[column])
            if key in URL_TAGS:
                coded[output] = _url_origins(coded[output])
    (_, key_field, value_field, key, _), = [t for t in _TAGS if t[0] == "references"]
    span_ids, positions = first_positions(batch.column("references"), key_field=key_field, value_field=value_field,
                                          keys=[key])
    parent = _taken(span_ids, positions[0])  # span ids: every span its own

    times = numpy_view(batch.column("startTime"))
    if window is not None:
        low, high = (epoch_us(t) for t in window)
        kept = np.flatnonzero((times >= low) & (times <= high))
    else:
        kept = np.arange(len(times))
    # A column null in every row splits no combination: most files carry only some of the tags read.
    varying = [column for column in coded.values() if column.codes.max(initial=-1) >= 0]
    combination, representative = distinct_rows(varying, rows=len(times))
    combinations = pa.table({name: _taken(column.dictionary, column.codes[representative])
                             for name, column in coded.items()})
    identities = pa.table({"parent": parent, "time": batch.column("startTime")})
    if not _is_text(identities.schema.field("parent").type):
        raise TypeError("parent span ids are not strings")  # the general path casts them
    for table in (combinations, identities):
        # Polars takes arrow strings unchecked: bytes that are not UTF-8 must go to the general
        # path, which reports and decodes them.
        table.validate(full=True)
    attributes = (_frame(combinations).with_columns(pl.struct("serviceName").alias("process"))
                  .select(span_attribute_exprs(naming=naming, peer_tags=peer_tags)))
    spans = pl.concat([own, _frame(identities)], how="horizontal").with_columns(
        pl.col("time").cast(pl.Datetime("us", "UTC")))
    if len(kept) < len(times):
        spans = spans[pl.Series(kept)]
    spans = spans.select(span_identity_exprs()).rename({"time": "start"})
    return (pl.concat([spans, attributes[pl.Series(combination[kept])]], how="horizontal")
            .select(list(span_schema(peer_tags=peer_tags))))


def fast_path_leaves(parquet: pq.ParquetFile) -> list[str] | None:
    """The leaf columns the fast path reads from ``parquet``; None when the file lacks one (another shape)."""
    leaves = {parquet.schema.column(i).path for i in range(len(parquet.schema))}
    return list(_ARROW_LEAVES) if leaves.issuperset(_ARROW_LEAVES) else None


def arrow_spans(path: Path, *, window: Window, naming: TraceNaming, peer_tags: bool = False) -> pl.DataFrame | None:
    """The span rows of one file (``readers.span_schema``) in ``window``, named by ``naming``; None when the
    file is not of the usual shape.

    The usual export (``startTime`` µs, ``tags``, ``process.tags`` and ``references`` lists of
    structs of strings) is read leaf by leaf, low-cardinality strings as dictionaries, cheaper
    than decoding the nested columns whole. Anything else (or a read error) returns None, and
    the general polars path reads the file with its own checks and error reporting.
    """
    try:
        parquet = pq.ParquetFile(path, read_dictionary=list(_ARROW_DICTIONARY))
        leaves = fast_path_leaves(parquet)
        if leaves is None:
            return None
        table = parquet.read(columns=[leaf for leaf in leaves if leaf not in _POLARS_COLUMNS])
        if not (table.num_rows > 0 and pa.types.is_int64(table.schema.field("startTime").type) and all(
                _is_list(table.schema.field(c).type) for c in ("tags", "references"))):
            return None
        # Invalid UTF-8 makes polars raise: the general path then reports and decodes it.
        own = pl.scan_parquet(path).select(_POLARS_COLUMNS).collect()
        if own.height != table.num_rows or own.schema["traceID"] != pl.Utf8 or own.schema["spanID"] != pl.Utf8:
            return None  # ids of another type: the general path casts them
        frames: list[pl.DataFrame] = []
        offset = 0
        for batch in table.to_batches():
            if batch.num_rows:
                frames.append(_span_batch(batch, own=own.slice(offset, batch.num_rows), window=window, naming=naming,
                                          peer_tags=peer_tags))
            offset += batch.num_rows
        return pl.concat(frames, how="vertical", rechunk=False)
    except (pa.ArrowException, pl.exceptions.PolarsError, OSError, ValueError, TypeError, KeyError):
        return None
