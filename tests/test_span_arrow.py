"""The pyarrow fast path of the trace reader (preprocess/span_arrow.py) reads what the polars path reads."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from preprocess import readers, span_arrow
from preprocess.readers import _read_trace_file, _scan_schema
from rca.system import bundled_system
from tests import layout_fixtures as fx

# HipsterShop's [traces] (the bundled system): the simulated and released spans' peer rules.
NAMING = bundled_system().trace

T0 = datetime(2025, 6, 6, 0, 0, tzinfo=UTC)
_KV = pl.List(pl.Struct({"key": pl.Utf8, "type": pl.Utf8, "value": pl.Utf8}))
_REF = pl.List(pl.Struct({"refType": pl.Utf8, "spanID": pl.Utf8, "traceID": pl.Utf8}))


def _kv(**tags: str) -> list[dict]:
    return [{"key": k.replace("_", "."), "type": "string", "value": v} for k, v in tags.items()]


def _edge_case_file(path: Path) -> Path:
    """Spans with null and empty tag lists, repeated and null keys, null values, no parent, one outside the window."""
    us = int((T0 - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1))
    rows = [
        ("a", _kv(span_kind="server", status_code="0"), [], us),
        ("b", _kv(span_kind="client", rpc_service="hipstershop.AdService"),
         [{"refType": "CHILD_OF", "spanID": "a", "traceID": "t"}], us + 10),
        ("c", None, [{"refType": "FOLLOWS_FROM", "spanID": "x", "traceID": "t"},
                     {"refType": "CHILD_OF", "spanID": "b", "traceID": "t"}], us + 20),
        ("d", [], None, us + 30),
        ("e", [{"key": None, "type": "string", "value": "client"}, *_kv(span_kind="CLIENT", span_kind_="server"),
               *_kv(http_status_code="503", error="true")], [], us + 40),
        ("f", _kv(span_kind="server"), [], us + 3_600_000_000),  # the next hour
        ("g", [{"key": "span.kind", "type": "string", "value": None}, *_kv(span_kind="server", error="true")],
         [], us + 50),  # the first span.kind holds no value: none is read, not the second's
    ]
    frame = pl.DataFrame(
        {
            "traceID": ["t"] * len(rows),
            "spanID": [r[0] for r in rows],
            "operationName": ["hipstershop.CartService/GetCart"] * len(rows),
            "references": [r[2] for r in rows],
            "startTime": [r[3] for r in rows],
            "duration": [100 * (i + 1) for i in range(len(rows))],
            "tags": [r[1] for r in rows],
            "process": [{"serviceName": "cartservice", "tags": _kv(name="cartservice-0", node_name="n1")},
                        {"serviceName": "frontend", "tags": _kv(podName="frontend-1", nodeName="n2")},
                        {"serviceName": "redis", "tags": None},
                        {"serviceName": "cartservice", "tags": []},
                        None,
                        {"serviceName": "cartservice", "tags": _kv(name="cartservice-1", name_="other")},
                        {"serviceName": "cartservice", "tags": [{"key": "name", "type": "string", "value": None}]}],
        },
        schema_overrides={"tags": _KV, "references": _REF},
    )
    frame.write_parquet(path)
    return path


def _both(path: Path, window: readers.Window, monkeypatch: pytest.MonkeyPatch) -> tuple[pl.DataFrame, pl.DataFrame]:
    assert span_arrow.arrow_spans(path, window=window, naming=NAMING) is not None, "the fast path declined the file"
    fast = _read_trace_file(path, _scan_schema(path), window=window, naming=NAMING)
    with monkeypatch.context() as patch:
        patch.setattr(span_arrow, "arrow_spans", lambda path, window, naming, peer_tags: None)
        general = _read_trace_file(path, _scan_schema(path), window=window, naming=NAMING)
    return fast, general


@pytest.mark.parametrize("window", [None, (T0, T0 + timedelta(hours=1) - timedelta(microseconds=1))])
def test_edge_cases_read_alike(tmp_path: Path, window: readers.Window, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, general = _both(_edge_case_file(tmp_path / "spans.parquet"), window, monkeypatch)
    assert fast.height == (7 if window is None else 6)
    assert_frame_equal(fast, general)


def test_fixture_day_reads_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    day = fx.write_day(tmp_path, "2025-06-06")
    files = sorted((day / "trace-parquet").glob("*.parquet"))
    assert files
    for path in files:
        fast, general = _both(path, None, monkeypatch)
        assert_frame_equal(fast, general)


def test_non_utf8_string_goes_to_the_general_path(tmp_path: Path) -> None:
    """A spanID that is not UTF-8: decoded with a replacement character and counted, as before."""
    day = fx.write_day(tmp_path, "2025-06-06")
    path = sorted((day / "trace-parquet").glob("*.parquet"))[0]
    table = pq.read_table(path)
    ids = table.column("spanID").combine_chunks().cast(pa.binary()).to_pylist()
    ids[0] = b"\xff" + ids[0][1:]
    table = table.set_column(table.schema.get_field_index("spanID"), "spanID",
                             pa.array(ids, pa.binary()).view(pa.string()))
    pq.write_table(table, path)
    assert span_arrow.arrow_spans(path, window=None, naming=NAMING) is None
    result = readers.read_day(day, "trace", naming=NAMING, skip_unreadable=True, report_missing=False)
    assert [i.reason for i in result.issues if path == i.path] == [
        "1 string value(s) not UTF-8, decoded with replacement characters"]
    assert result.frame.filter(pl.col("span_id").str.contains("\ufffd")).height == 1


@pytest.mark.parametrize("limit", [1 << 16, 4])
def test_distinct_rows_number_each_combination_once(limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows share a number exactly when all their codes agree, nulls (-1) included, whatever the renumbering."""
    monkeypatch.setattr(span_arrow, "_DENSE_LIMIT", limit)
    rng = np.random.default_rng(0)
    columns = [span_arrow._Coded(pa.array([str(i) for i in range(size)]), rng.integers(-1, size, 500))
               for size in (3, 1, 7, 2)]
    number, representative = span_arrow.distinct_rows(columns, rows=500)
    codes = np.stack([c.codes for c in columns], axis=1)
    distinct, inverse = np.unique(codes, axis=0, return_inverse=True)
    assert len(representative) == len(distinct)
    assert (codes[representative][number] == codes).all()
    assert len({(a, b) for a, b in zip(number, inverse.reshape(-1))}) == len(distinct)
