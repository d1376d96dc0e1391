"""bench.recording: a simulated set copied as a real source records it (status, error counts, minutes kept)."""
from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.recording import NEZHA_RECORDING, TRACES_ONLY, Recording, recorded_copy
from rca.errors import DataError

DAY = "2025-06-06"
START = datetime(2025, 6, 6, 2, 0, 0, tzinfo=UTC)  # the one case's start
TAG = pa.struct([("key", pa.string()), ("type", pa.string()), ("value", pa.string())])
# Seconds from the case's start of each span and log line: 70 s before it, 30 s before, 100 s and 200 s after.
OFFSETS = (-70, -30, 100, 200)


def _write_set(root):
    day = root / DAY
    (day / "trace-parquet").mkdir(parents=True)
    (day / "log-parquet").mkdir()
    (day / "metric-parquet" / "apm" / "pod").mkdir(parents=True)
    start_us = [int((START.timestamp() + s) * 1e6) for s in OFFSETS]
    tags = [[{"key": "span.kind", "type": "string", "value": "server"},
             {"key": "status.code", "type": "int64", "value": "2"},
             {"key": "http.status_code", "type": "int64", "value": "500"}]] * len(OFFSETS)
    pq.write_table(pa.table({"spanID": [f"s{i}" for i in range(len(OFFSETS))],
                             "startTime": pa.array(start_us, pa.int64()),
                             "tags": pa.array(tags, pa.list_(TAG))}),
                   day / "trace-parquet" / f"trace_jaeger-span_{DAY}_02-00-00.parquet")
    stamps = [datetime.fromtimestamp(START.timestamp() + s, UTC).strftime("%Y-%m-%dT%H:%M:%S.123Z") for s in OFFSETS]
    pq.write_table(pa.table({"@timestamp": stamps, "k8_pod": ["frontend-0"] * len(OFFSETS),
                             "message": ["request error"] * len(OFFSETS)}),
                   day / "log-parquet" / f"log_filebeat-server_{DAY}_02-00-00.parquet")
    pq.write_table(pa.table({"object_id": ["frontend-0"], "request": [100.0], "rrt": [2.5], "error": [7.0],
                             "error_ratio": [7.0], "timeout": [1.0]}),
                   day / "metric-parquet" / "apm" / "pod" / f"pod_frontend-0_{DAY}.parquet")
    sentence = f"The system experienced an anomaly from {START:%Y-%m-%dT%H:%M:%SZ} to 2025-06-06T02:03:00Z."
    (root / "input.json").write_text(json.dumps([{"Anomaly Description": sentence, "uuid": "c-0"}]))
    (root / "groundtruth.jsonl").write_text('{"uuid": "c-0"}\n')


def _read(dst, folder):
    return pq.read_table(next((dst / DAY / folder).rglob("*.parquet"))).to_pylist()


def test_nezha_recording_keeps_no_status_no_error_counts_and_only_the_minutes_around_the_case(tmp_path):
    _write_set(tmp_path / "src")
    dst = recorded_copy(tmp_path / "src", tmp_path / "dst", recording=NEZHA_RECORDING)
    spans = _read(dst, "trace-parquet")
    # 60 s before the start to 150 s after it: the spans 30 s before and 100 s after stay.
    assert [s["spanID"] for s in spans] == ["s1", "s2"]
    assert all([t["key"] for t in s["tags"]] == ["span.kind"] for s in spans)
    assert len(_read(dst, "log-parquet")) == 2
    apm = _read(dst, "metric-parquet")[0]
    assert apm["request"] == 100.0 and apm["rrt"] == 2.5
    assert apm["error"] is None and apm["error_ratio"] is None and apm["timeout"] is None
    assert (dst / "groundtruth.jsonl").read_text() == '{"uuid": "c-0"}\n'
    assert len(_read(tmp_path / "src", "trace-parquet")) == 4  # the source is untouched


@pytest.mark.parametrize(("recording", "spans", "status"), [
    (Recording(name="all"), 4, True),
    (Recording(name="no-status", span_status=False), 4, False),
    (Recording(name="around", around_cases=(0.0, 300.0)), 2, True),
], ids=["everything", "no-status", "around-only"])
def test_each_habit_alone(tmp_path, recording, spans, status):
    _write_set(tmp_path / "src")
    dst = recorded_copy(tmp_path / "src", tmp_path / "dst", recording=recording)
    kept = _read(dst, "trace-parquet")
    assert len(kept) == spans
    assert all(("status.code" in [t["key"] for t in s["tags"]]) == status for s in kept)
    assert (_read(dst, "metric-parquet")[0]["error"] is not None) == status


def test_an_existing_copy_is_reused_and_no_partial_copy_is_left(tmp_path):
    _write_set(tmp_path / "src")
    dst = recorded_copy(tmp_path / "src", tmp_path / "dst", recording=NEZHA_RECORDING)
    (dst / "marker").write_text("kept")
    assert recorded_copy(tmp_path / "src", tmp_path / "dst", recording=NEZHA_RECORDING) == dst
    assert (dst / "marker").read_text() == "kept"
    assert not (tmp_path / "dst.partial").exists()


def test_a_trace_file_without_its_columns_is_named_and_nothing_is_left_behind(tmp_path):
    _write_set(tmp_path / "src")
    bad = tmp_path / "src" / DAY / "trace-parquet" / f"trace_jaeger-span_{DAY}_03-00-00.parquet"
    pq.write_table(pa.table({"spanID": ["x"]}), bad)
    with pytest.raises(DataError, match=r"trace_jaeger-span_2025-06-06_03-00-00.parquet: no column 'tags', 'startTime'"):
        recorded_copy(tmp_path / "src", tmp_path / "dst", recording=NEZHA_RECORDING)
    assert not (tmp_path / "dst").exists() and not (tmp_path / "dst.partial").exists()


def test_traces_only_keeps_traces_and_logs_and_no_metric_file(tmp_path):
    _write_set(tmp_path / "src")
    dst = recorded_copy(tmp_path / "src", tmp_path / "dst", recording=TRACES_ONLY)
    assert not list(dst.rglob("metric-parquet"))
    assert _read(dst, "trace-parquet") == _read(tmp_path / "src", "trace-parquet")
    assert _read(dst, "log-parquet") == _read(tmp_path / "src", "log-parquet")
    assert (dst / "input.json").read_text() == (tmp_path / "src" / "input.json").read_text()
