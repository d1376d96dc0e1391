"""preprocess.dataset_writer: canonical frames -> the release layout -> preprocess.readers gives them back.

The frames are synthetic and in the form the readers produce (``node == instance`` for a
pod's series, a node's series named by its node, ``is_error`` whenever the status says so),
spread over two CST days and several hours so that file naming is exercised too.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from preprocess.dataset_writer import DatasetWriteError, write_frames
from preprocess.readers import read_apm, read_infra, read_logs, read_traces
from preprocess.schema import APM_SCHEMA, INFRA_SCHEMA, LOG_SCHEMA, SPAN_SCHEMA
from rca.system import bundled_system

# HipsterShop's [traces] (the bundled system): the simulated and released spans' peer rules.
NAMING = bundled_system().trace

T0 = datetime(2025, 6, 5, 15, 30, 0, 123456, tzinfo=UTC)  # CST 23:30 on 2025-06-05; +1 h is 2025-06-06
WHOLE = (datetime(2025, 6, 5, 0, 0, tzinfo=UTC), datetime(2025, 6, 7, 0, 0, tzinfo=UTC))
SPAN_KEY, LOG_KEY = ["trace_id", "span_id"], ["time", "pod", "message"]
APM_KEY, INFRA_KEY = ["object_type", "object_id", "time"], ["family", "kpi_key", "component", "time"]


def spans(first: int = 0, count: int = 8) -> pl.DataFrame:
    """``count`` traces of frontend -> cartservice (client, server, an internal span, one error)."""
    rows = []
    for n in range(first, first + count):
        trace, start = f"{n:032x}", T0 + timedelta(minutes=20 * n, microseconds=n)
        failed = n % 3 == 2
        rows += [
            (trace, f"{n:08x}00000001", None, "GET /cart", "frontend", "frontend-0", "node-1", "server", None,
             start, 9000 + n, 0, False),
            (trace, f"{n:08x}00000002", f"{n:08x}00000001", "hipstershop.CartService/GetCart", "frontend", "frontend-0",
             "node-1", "client", "cartservice", start + timedelta(microseconds=10), 7000, 2 if failed else 0, failed),
            (trace, f"{n:08x}00000003", f"{n:08x}00000002", "hipstershop.CartService/GetCart", "cartservice",
             f"cartservice-579f59597d-{n % 2}abcd", "node-2", "server", None, start + timedelta(microseconds=20),
             6000, 2 if failed else None, failed),
            (trace, f"{n:08x}00000004", f"{n:08x}00000003", "CartStore.load", "cartservice",
             f"cartservice-579f59597d-{n % 2}abcd", "node-2", None, None, start + timedelta(microseconds=30), 500,
             None, False),
        ]
    return pl.DataFrame(rows, schema=SPAN_SCHEMA, orient="row")


def logs(first: int = 0, count: int = 8) -> pl.DataFrame:
    rows = [(T0 + timedelta(minutes=20 * n, seconds=n, microseconds=7), "hipstershop", pod, node,
             f'{{"severity":"info","message":"line {n}"}}')
            for n in range(first, first + count)
            for pod, node in (("frontend-0", "node-1"), ("cartservice-579f59597d-wc2lz", "node-2"))]
    rows.append((T0, "hipstershop", "frontend-0", None, "null"))  # a literal "null" line stays
    return pl.DataFrame(rows, schema=LOG_SCHEMA, orient="row")


def apm(first: int = 0, count: int = 90) -> pl.DataFrame:
    rows = []
    for m in range(first, first + count):
        t = T0.replace(second=0, microsecond=0) + timedelta(minutes=m)
        for level, name in (("pod", "frontend-0"), ("pod", "cartservice-579f59597d-wc2lz"), ("service", "frontend")):
            values = [100.0 + m, 99.0 + m, 1500.5, 9000.0, float(m % 3), None, 0.5, None, (m % 3) / (100.0 + m),
                      None, 0.1]
            rows.append((t, level, name, *values))
    return pl.DataFrame(rows, schema=APM_SCHEMA, orient="row")


def infra(first: int = 0, count: int = 90) -> pl.DataFrame:
    rows = []
    for m in range(first, first + count):
        t = T0.replace(second=0, microsecond=0) + timedelta(minutes=m)
        rows += [
            (t, "infra_pod", "pod_cpu_usage", "frontend-0", "node-1", "node-1", None, None, "hipstershop", None, None,
             0.2 + m / 1000),
            (t, "infra_pod", "pod_cpu_usage", "cartservice-579f59597d-wc2lz", "node-2", "node-2", None, None,
             "hipstershop", None, None, 0.3),
            (t, "infra_pod", "pod_fs_writes_bytes", "frontend-0", "node-1", "node-1", "/dev/vda", None, "hipstershop",
             None, None, 4096.0 * m),
            (t, "infra_node", "node_cpu_usage_rate", "node-1", "node-1", "10.0.0.1:9100", None, None, None, None, None,
             12.5 + m % 7),
            (t, "infra_node", "node_filesystem_usage_rate", "node-2", "node-2", "10.0.0.2:9100", "/dev/vda1", "/",
             None, None, None, 40.0),
        ]
    return pl.DataFrame(rows, schema=INFRA_SCHEMA, orient="row")


def read_back(out: Path) -> dict[str, pl.DataFrame]:
    return {
        "spans": read_traces(out, naming=NAMING, start=WHOLE[0], end=WHOLE[1]).frame.sort(SPAN_KEY),
        "logs": read_logs(out, start=WHOLE[0], end=WHOLE[1]).frame.sort(LOG_KEY),
        "apm": read_apm(out, start=WHOLE[0], end=WHOLE[1]).frame.sort(APM_KEY),
        "infra": read_infra(out, start=WHOLE[0], end=WHOLE[1],
                            families=["infra_pod", "infra_node"]).frame.sort(INFRA_KEY),
    }


def expected(frames: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    keys = {"spans": SPAN_KEY, "logs": LOG_KEY, "apm": APM_KEY, "infra": INFRA_KEY}
    return {name: frame.unique(maintain_order=True).sort(keys[name]) for name, frame in frames.items()}


def test_frames_written_are_read_back_equal(tmp_path):
    frames = {"spans": spans(), "logs": logs(), "apm": apm(), "infra": infra()}
    written = write_frames(tmp_path, **frames)
    got = read_back(tmp_path)
    for name, want in expected(frames).items():
        assert_frame_equal(got[name], want, check_column_order=True)
    # Files are named by the CST day and hour of their rows, whatever zone the frames use.
    names = {p.relative_to(tmp_path).as_posix() for p in written}
    assert "2025-06-05/trace-parquet/trace_jaeger-span_2025-06-05_23-00-00.parquet" in names
    assert "2025-06-06/trace-parquet/trace_jaeger-span_2025-06-06_00-00-00.parquet" in names
    assert "2025-06-06/log-parquet/log_filebeat-server_2025-06-06_01-00-00.parquet" in names
    assert "2025-06-05/metric-parquet/apm/pod/pod_frontend-0_2025-06-05.parquet" in names
    assert "2025-06-06/metric-parquet/apm/service/service_frontend_2025-06-06.parquet" in names
    assert "2025-06-06/metric-parquet/infra/infra_pod/infra_pod_pod_cpu_usage_2025-06-06.parquet" in names
    assert "2025-06-05/metric-parquet/infra/infra_node/infra_node_node_cpu_usage_rate_2025-06-05.parquet" in names


def test_two_writes_merge(tmp_path):
    # Two exports of one incident that overlap: each row once, nothing lost.
    first = {"spans": spans(0, 5), "logs": logs(0, 5), "apm": apm(0, 60), "infra": infra(0, 60)}
    second = {"spans": spans(3, 5), "logs": logs(3, 5), "apm": apm(30, 60), "infra": infra(30, 60)}
    write_frames(tmp_path, **first)
    write_frames(tmp_path, **second)
    got = read_back(tmp_path)
    union = expected({name: pl.concat([first[name], second[name]]) for name in first})
    for name, want in union.items():
        assert_frame_equal(got[name], want)
    assert got["spans"].height == 8 * 4 and got["apm"].height == 90 * 3


def test_rewriting_the_same_frames_changes_nothing(tmp_path):
    frames = {"spans": spans(), "logs": logs(), "apm": apm(), "infra": infra()}
    write_frames(tmp_path, **frames)
    before = read_back(tmp_path)
    write_frames(tmp_path, **frames)
    after = read_back(tmp_path)
    for name in before:
        assert_frame_equal(after[name], before[name])


@pytest.mark.parametrize(("family", "frame", "column"), [
    ("spans", spans, "peer_service"),
    ("spans", spans, "start"),
    ("logs", logs, "message"),
    ("apm", apm, "error_ratio"),
    ("infra", infra, "kpi_key"),
])
def test_a_frame_missing_a_column_is_refused_naming_it(tmp_path, family, frame, column):
    with pytest.raises(DatasetWriteError, match=rf"{family} frame lacks column\(s\) \['{column}'\]"):
        write_frames(tmp_path, **{family: frame().drop(column)})
    assert not list(tmp_path.rglob("*.parquet"))


def test_rows_without_a_time_are_refused(tmp_path):
    bad = logs().with_columns(pl.when(pl.col("pod") == "frontend-0").then(None).otherwise(pl.col("time")).alias("time"))
    with pytest.raises(DatasetWriteError, match="without 'time'"):
        write_frames(tmp_path, logs=bad)


def test_unknown_levels_are_refused(tmp_path):
    with pytest.raises(DatasetWriteError, match="object_type 'node'"):
        write_frames(tmp_path, apm=apm(0, 2).with_columns(pl.lit("node").alias("object_type")))
    with pytest.raises(DatasetWriteError, match="family 'infra_mongo'"):
        write_frames(tmp_path, infra=infra(0, 2).with_columns(pl.lit("infra_mongo").alias("family")))


def test_storage_families_round_trip(tmp_path):
    """TiDB's families (rows that name no pod: the family says which component) are written too."""
    rows = [(T0.replace(second=0, microsecond=0) + timedelta(minutes=m), family, "cpu_usage", component, "node-3",
             "10.0.0.3:20180", None, None, "tidb", None, None, 1.5 + m)
            for m in range(3) for family, component in (("infra_tidb", "tidb-tidb"), ("infra_tikv", "tidb-tikv"))]
    frame = pl.DataFrame(rows, schema=INFRA_SCHEMA, orient="row")
    write_frames(tmp_path, infra=frame)
    back = read_infra(tmp_path, start=WHOLE[0], end=WHOLE[1], families=["infra_tidb", "infra_tikv"]).frame
    assert back.sort(INFRA_KEY).select(INFRA_KEY + ["value"]).equals(frame.sort(INFRA_KEY).select(INFRA_KEY + ["value"]))
