"""Readers on a tiny day written in the released layout with every variant (tests/layout_fixtures.py)."""
from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from preprocess import layout
from preprocess.readers import ReaderError, read_apm, read_day, read_infra, read_logs, read_traces
from preprocess.schema import APM_SCHEMA, INFRA_SCHEMA, LOG_SCHEMA, SPAN_SCHEMA
from rca.system import bundled_system
from tests import layout_fixtures as fx

# HipsterShop's [traces] (the bundled system): the simulated and released spans' peer rules.
NAMING = bundled_system().trace

UTC = UTC
DAY1, DAY2 = "2025-06-06", "2025-06-07"  # CST days; DAY1 = UTC 2025-06-05T16:00 .. 2025-06-06T16:00
MISSING_HOUR = 5  # CST hour 05 of DAY1 = UTC 2025-06-05T21:00


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("readers")
    fx.write_day(root, DAY1, missing_hours=(MISSING_HOUR,), fifty_nine_hours=(3, 23))
    fx.write_day(root, DAY2)
    return root


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def _schema_of(frame: pl.DataFrame) -> dict[str, pl.DataType]:
    return dict(frame.schema)


# Windows: inside one hour; across a CST hour; across the CST day boundary (UTC 16:00).
WINDOWS = {
    "one_hour": (utc(2025, 6, 5, 17, 10), utc(2025, 6, 5, 17, 40)),
    "hour_boundary": (utc(2025, 6, 5, 17, 50), utc(2025, 6, 5, 18, 20)),
    "day_boundary": (utc(2025, 6, 6, 15, 30), utc(2025, 6, 6, 16, 30)),
}


@pytest.mark.parametrize("name", list(WINDOWS))
def test_logs_window(data_dir: Path, name: str) -> None:
    start, end = WINDOWS[name]
    result = read_logs(data_dir, start=start, end=end)
    frame = result.frame
    assert _schema_of(frame) == LOG_SCHEMA
    # One row per minute at second 27.724, so exactly one per started minute in the window.
    assert frame.height == int((end - start).total_seconds() // 60)
    assert frame["time"].min() >= start and frame["time"].max() <= end
    assert result.missing == []
    assert set(frame["pod"].unique()) == set(fx.LOG_PODS)
    assert frame["node"].null_count() <= 1  # the "null" string became a real null
    assert "null" not in frame["node"].drop_nulls().to_list()
    if name == "day_boundary":
        assert {p.parent.parent.name for p in result.files} == {DAY1, DAY2}


def test_logs_fifty_nine_hour_names_are_found(data_dir: Path) -> None:
    # CST hour 03 of DAY1 is written as _03-59-00: UTC 2025-06-05T19:00.
    result = read_logs(data_dir, start=utc(2025, 6, 5, 19, 0), end=utc(2025, 6, 5, 19, 59, 59))
    assert result.frame.height == 60
    assert result.files[0].name.endswith("_03-59-00.parquet")


def test_logs_column_projection(data_dir: Path) -> None:
    start, end = WINDOWS["one_hour"]
    frame = read_logs(data_dir, start=start, end=end, columns=["pod", "node"]).frame
    assert frame.columns == ["time", "pod", "node"]
    with pytest.raises(ValueError, match="unknown log column"):
        read_logs(data_dir, start=start, end=end, columns=["bogus"])
    # A pod's service is the system description's (SystemSpec.service_of), not a log column.
    assert "service" not in read_logs(data_dir, start=start, end=end).frame.columns
    with pytest.raises(ValueError, match="unknown log column"):
        read_logs(data_dir, start=start, end=end, columns=["pod", "service"])


def test_missing_hour_reported_not_fatal(data_dir: Path) -> None:
    # UTC 20:30-21:30 covers CST 04 (present) and CST 05 (missing).
    result = read_logs(data_dir, start=utc(2025, 6, 5, 20, 30), end=utc(2025, 6, 5, 21, 30))
    assert result.frame.height == 30
    assert len(result.missing) == 1 and "hour 05" in result.missing[0]
    spans = read_traces(data_dir, naming=NAMING, start=utc(2025, 6, 5, 20, 30), end=utc(2025, 6, 5, 21, 30))
    assert len(spans.missing) == 1


def test_missing_day_reported(data_dir: Path) -> None:
    start, end = utc(2025, 7, 1, 0, 0), utc(2025, 7, 1, 0, 10)
    for reader in (read_apm, read_infra, read_logs, functools.partial(read_traces, naming=NAMING)):
        result = reader(data_dir, start=start, end=end)
        assert result.frame.is_empty() and result.missing, reader


@pytest.mark.parametrize("name", list(WINDOWS))
def test_traces_window_and_flattening(data_dir: Path, name: str) -> None:
    start, end = WINDOWS[name]
    frame = read_traces(data_dir, naming=NAMING, start=start, end=end).frame
    assert _schema_of(frame) == SPAN_SCHEMA
    minutes = int((end - start).total_seconds() // 60)
    assert frame.height == fx.SPANS_PER_TRACE * (minutes // fx.TRACE_EVERY_MIN)
    assert frame["start"].min() >= start and frame["start"].max() <= end


def test_span_fields(data_dir: Path) -> None:
    start, end = WINDOWS["one_hour"]
    frame = read_traces(data_dir, naming=NAMING, start=start, end=end).frame
    ops = {row["operation"]: row for row in frame.unique("operation").iter_rows(named=True)}
    root = ops["hipstershop.Frontend/Recv."]
    assert root["parent_span_id"] is None and root["is_error"] and root["span_kind"] == "server"  # http 503
    assert root["pod"] == "frontend-0" and root["node"] == "aiops-k8s-01"
    cart_server = ops["POST /hipstershop.CartService/GetCart"]
    assert cart_server["pod"] == "cartservice-1" and cart_server["node"] == "aiops-k8s-02"  # podName / nodeName
    assert cart_server["parent_span_id"].endswith("00000002")  # CHILD_OF, not the FOLLOWS_FROM reference
    ads = ops["hipstershop.AdService/GetAds"]
    assert ads["peer_service"] == "adservice" and ads["status_code"] == 2 and ads["is_error"]
    assert ops["hipstershop.CartService/GetCart"]["peer_service"] == "cartservice"
    assert ops["hipstershop.PaymentService/Charge"]["peer_service"] == "paymentservice"
    assert ops["/hipstershop.ProductCatalogService/ListProducts"]["peer_service"] == "productcatalogservice"
    assert cart_server["peer_service"] is None  # server spans have no peer
    hget = frame.filter(pl.col("operation") == "HGET")
    assert set(hget["peer_service"]) == {"redis-cart"}
    assert set(hget["service"]) == {"redis-cart", "cartservice"}  # serviceName "redis" -> redis-cart
    assert frame.filter(pl.col("span_kind") == "client")["peer_service"].null_count() == 0
    assert frame["duration_us"].min() == 1000


@pytest.mark.parametrize("name", list(WINDOWS))
def test_apm_window(data_dir: Path, name: str) -> None:
    start, end = WINDOWS[name]
    result = read_apm(data_dir, start=start, end=end)
    frame = result.frame
    assert _schema_of(frame) == APM_SCHEMA
    minutes = int((end - start).total_seconds() // 60) + 1  # both ends are whole minutes, inclusive
    objects = set(fx.APM_PODS) | set(fx.APM_SERVICES)
    assert set(frame["object_id"]) == objects
    assert frame.height == minutes * len(objects)
    assert frame["time"].min() == start and frame["time"].max() == end
    # String times (pod files) and timestamps (service files) agree minute by minute.
    per_minute = frame.group_by("time").len()
    assert per_minute["len"].unique().to_list() == [len(objects)]
    assert any("deleted" in p.name for p in result.files)


def test_apm_level_filter(data_dir: Path) -> None:
    start, end = WINDOWS["one_hour"]
    frame = read_apm(data_dir, start=start, end=end, level="service").frame
    assert set(frame["object_type"]) == {"service"}
    with pytest.raises(ValueError, match="unknown APM level"):
        read_apm(data_dir, start=start, end=end, level="node")


@pytest.mark.parametrize("name", list(WINDOWS))
def test_infra_window_all_time_encodings(data_dir: Path, name: str) -> None:
    start, end = WINDOWS[name]
    frame = read_infra(data_dir, start=start, end=end).frame
    assert _schema_of(frame) == INFRA_SCHEMA
    minutes = int((end - start).total_seconds() // 60) + 1
    per_family = dict(frame.group_by("family").len().iter_rows())
    assert per_family == {
        "infra_pod": minutes * len(fx.INFRA_PODS) * 2,  # two KPI files
        "infra_node": minutes * len(fx.NODES),
        "infra_tidb": minutes * 2,  # split by sql_type
        "infra_tikv": minutes,
        "infra_pd": minutes,
    }
    components = dict(frame.select("family", "component").unique().group_by("family").agg(pl.col("component")).iter_rows())
    assert components["infra_tidb"] == ["tidb-tidb"]
    assert components["infra_tikv"] == ["tidb-tikv"]
    assert components["infra_pd"] == ["tidb-pd"]
    assert set(components["infra_node"]) == set(fx.NODES)
    assert frame["time"].min() == start and frame["time"].max() == end
    # "null" label strings are real nulls
    assert frame.filter(pl.col("family") == "infra_pod")["device"].null_count() == per_family["infra_pod"]
    assert "null" not in frame["sql_type"].drop_nulls().to_list()


def test_infra_pod_node_is_instance(data_dir: Path) -> None:
    start, end = utc(2025, 6, 5, 16, 0) + timedelta(minutes=fx.MOVE_AFTER_MIN - 2), utc(2025, 6, 5, 16, 0) + timedelta(minutes=fx.MOVE_AFTER_MIN + 1)
    frame = read_infra(data_dir, start=start, end=end, families=["infra_pod"], kpis=["pod_cpu_usage"]).frame
    cart = frame.filter(pl.col("component") == "cartservice-1").sort("time")
    assert cart["node"].to_list() == ["aiops-k8s-02", "aiops-k8s-02", "aiops-k8s-03", "aiops-k8s-03"]
    assert set(frame["kpi_key"]) == {"pod_cpu_usage"}


def test_infra_unknown_family(data_dir: Path) -> None:
    with pytest.raises(ValueError, match="unknown infra family"):
        read_infra(data_dir, start=utc(2025, 6, 5, 17), end=utc(2025, 6, 5, 18), families=["infra_gpu"])


def test_reversed_window_rejected(data_dir: Path) -> None:
    with pytest.raises(ValueError, match="precedes"):
        read_logs(data_dir, start=utc(2025, 6, 5, 18), end=utc(2025, 6, 5, 17))


@pytest.mark.parametrize("family", ["apm", "infra", "log", "trace"])
def test_read_day(data_dir: Path, family: str) -> None:
    result = read_day(data_dir / DAY1, family, naming=NAMING)
    frame = result.frame
    if family == "log":
        assert frame.height == 23 * 60 and len(result.missing) == 1
    elif family == "trace":
        assert frame.height == 23 * 6 * fx.SPANS_PER_TRACE
    elif family == "apm":
        assert frame.height == 1440 * (len(fx.APM_PODS) + len(fx.APM_SERVICES))
    else:
        assert frame.filter(pl.col("family") == "infra_pd").height == 1440
    if family in ("log", "trace"):
        assert frame.schema[frame.columns[0] if family == "log" else "start"] == pl.Datetime("us", "UTC")


def test_read_day_rejects_other_dirs(tmp_path: Path) -> None:
    with pytest.raises(ReaderError, match="not a day directory"):
        read_day(tmp_path, "log", naming=NAMING)


@pytest.fixture()
def corrupt_dir(tmp_path: Path) -> Path:
    fx.write_day(tmp_path, DAY1)
    return tmp_path


@pytest.mark.parametrize(
    ("reader", "relative"),
    [
        (read_logs, f"log-parquet/log_filebeat-server_{DAY1}_02-00-00.parquet"),
        (functools.partial(read_traces, naming=NAMING), f"trace-parquet/trace_jaeger-span_{DAY1}_02-00-00.parquet"),
        (read_apm, f"metric-parquet/apm/service/service_frontend_{DAY1}.parquet"),
        (read_infra, f"metric-parquet/other/infra_pd_store_up_count_{DAY1}.parquet"),
    ],
)
def test_corrupt_file_raises_naming_it(corrupt_dir: Path, reader, relative: str) -> None:
    path = corrupt_dir / DAY1 / relative
    path.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(ReaderError, match=path.name):
        reader(corrupt_dir, start=utc(2025, 6, 5, 18, 10), end=utc(2025, 6, 5, 18, 20))


def test_wrong_shape_raises_naming_file(tmp_path: Path) -> None:
    fx.write_day(tmp_path, DAY1)
    path = tmp_path / DAY1 / "log-parquet" / f"log_filebeat-server_{DAY1}_02-00-00.parquet"
    pl.DataFrame({"something": [1]}).write_parquet(path)
    with pytest.raises(ReaderError, match=rf"{path.name}.*@timestamp"):
        read_logs(tmp_path, start=utc(2025, 6, 5, 18, 10), end=utc(2025, 6, 5, 18, 20))


def test_bad_time_string_raises_naming_file(tmp_path: Path) -> None:
    fx.write_day(tmp_path, DAY1)
    path = tmp_path / DAY1 / "metric-parquet" / "other" / f"infra_pd_store_up_count_{DAY1}.parquet"
    frame = pl.read_parquet(path).with_columns(pl.lit("yesterday").alias("time"))
    frame.write_parquet(path)
    with pytest.raises(ReaderError, match=path.name):
        read_infra(tmp_path, start=utc(2025, 6, 5, 18, 10), end=utc(2025, 6, 5, 18, 20), families=["infra_pd"])


@pytest.mark.parametrize(
    ("name", "prefix", "expected"),
    [
        ("infra_pod_pod_cpu_usage_2025-06-06.parquet", "infra_pod_", ("pod_cpu_usage", False)),
        ("pod_cartservice-1-deleted_2025-06-06.parquet", "pod_", ("cartservice-1", True)),
        ("pod_cartservice-1_deleted_2025-06-06.parquet", "pod_", ("cartservice-1", True)),
        ("pod_cartservice-1_2025-06-06_deleted.parquet", "pod_", ("cartservice-1", True)),
        ("pod_cartservice-2 (deleted)_2025-06-06.parquet", "pod_", ("cartservice-2", True)),
        ("infra_pd_store_up_count_2025-06-06.parquet", "infra_pd_", ("store_up_count", False)),
        ("other.parquet", "infra_pd_", None),
    ],
)
def test_metric_file_names(name: str, prefix: str, expected) -> None:
    assert layout._key_from_name(name, prefix=prefix, day="2025-06-06") == expected


def _one_span_file(root: Path, *, tags: list[dict], operation: str, drop: tuple[str, ...] = ()) -> None:
    start_us = int(utc(2025, 6, 5, 17, 5).timestamp() * 1_000_000)
    row = {
        "traceID": "a" * 32, "spanID": "b" * 16, "flags": 1.0, "operationName": operation, "references": [],
        "startTime": start_us, "startTimeMillis": start_us // 1000, "duration": 7, "tags": tags, "logs": [],
        "process": {"serviceName": "frontend", "tags": [{"key": "name", "type": "string", "value": "frontend-2"}]},
    }
    path = root / DAY1 / "trace-parquet" / f"trace_jaeger-span_{DAY1}_01-00-00.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame([row], schema=fx.TRACE_SCHEMA).drop(list(drop)).write_parquet(path)


@pytest.mark.parametrize(
    ("tags", "operation", "peer", "is_error"),
    [
        ([{"key": "span.kind", "type": "string", "value": "client"},
          {"key": "rpc.service", "type": "string", "value": "grpc.health.v1.Health"}], "grpc.health.v1.Health/Check", None, False),
        ([{"key": "span.kind", "type": "string", "value": "client"},
          {"key": "rpc.service", "type": "string", "value": "hipstershop.CurrencyService"}], "Convert", "currencyservice", False),
        ([{"key": "span.kind", "type": "string", "value": "client"},
          {"key": "otel.status_code", "type": "string", "value": "ERROR"}], "/hipstershop.EmailService/Send", "emailservice", True),
        ([{"key": "span.kind", "type": "string", "value": "server"},
          {"key": "http.status_code", "type": "int64", "value": "404"}], "hipstershop.ShippingService/GetQuote", None, False),
        ([], "no tags at all", None, False),
    ],
)
def test_peer_and_error_variants(tmp_path: Path, tags: list[dict], operation: str, peer, is_error: bool) -> None:
    _one_span_file(tmp_path, tags=tags, operation=operation)
    frame = read_traces(tmp_path, naming=NAMING, start=utc(2025, 6, 5, 17), end=utc(2025, 6, 5, 17, 30)).frame
    assert frame.height == 1
    row = frame.row(0, named=True)
    assert (row["peer_service"], row["is_error"], row["pod"], row["node"]) == (peer, is_error, "frontend-2", None)


def test_start_time_millis_only(tmp_path: Path) -> None:
    _one_span_file(tmp_path, tags=[], operation="x", drop=("startTime",))
    frame = read_traces(tmp_path, naming=NAMING, start=utc(2025, 6, 5, 17), end=utc(2025, 6, 5, 17, 30)).frame
    assert frame["start"].to_list() == [utc(2025, 6, 5, 17, 5)]
