"""``rca import nezha`` on the vendored slice of Nezha (tests/data/nezha_slice): a clone and a bare snapshot.

Truth comes from the slice's source files themselves (fault lists, CSV rows), read here with
the csv module, independently of preprocess/nezha.py.
"""
from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from preprocess import nezha
from preprocess.importers import app
from preprocess.readers import read_apm, read_infra, read_logs, read_traces
from rca.system import bundled_system
from tests.nezha_fixtures import OB_DAY, SLICE, TT_DAY, bare_snapshot, clone, set_faults

# The bundled [traces]: the imported spans name their peers by peer.service, which every naming takes first.
NAMING = bundled_system().trace

GT_KEYS = {"fault_category", "fault_type", "instance_type", "service", "instance", "source", "destination",
           "start_time", "end_time", "uuid", "key_observations", "key_metrics", "fault_description"}
OB_TRUTH = [  # (inject_time, pod, fault type)
    ("2022-08-22T05:09:50Z", "checkoutservice-578fcf4766-9csqn", "code error"),
    ("2022-08-22T05:18:09Z", "currencyservice-cf787dd48-vpjrd", "cpu stress"),
    ("2022-08-22T05:27:06Z", "currencyservice-cf787dd48-vpjrd", "network delay"),
]
TT_TRUTH = [
    ("2023-01-29T09:21:39Z", "ts-basic-service-5dc8d4f9fd-46997", "code error"),
    ("2023-01-29T09:25:39Z", "ts-basic-service-5dc8d4f9fd-46997", "jvm exception"),
]
OB_HOUR = (datetime(2022, 8, 22, 4, 59, tzinfo=UTC), datetime(2022, 8, 22, 5, 59, 59, tzinfo=UTC))
TT_HOUR = (datetime(2023, 1, 29, 9, 0, tzinfo=UTC), datetime(2023, 1, 29, 9, 59, 59, tzinfo=UTC))


def _import(source: Path, out: Path, *args: str):
    return CliRunner().invoke(app, ["nezha", str(source), "--out", str(out), *args])


def _truths(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "groundtruth.jsonl").read_text().splitlines() if line.strip()]


def _source_rows(day: str, path: str) -> list[dict[str, str]]:
    return list(csv.DictReader((SLICE / "rca_data" / day / path).open(encoding="utf-8")))


def _clone_with_line_edited(tmp_path: Path, file: str, *, line: int, edit: Callable[[str], str]) -> Path:
    """A clone of the slice whose ``rca_data/<OB_DAY>/<file>`` has its line ``line`` (0 = header) edited."""
    root = clone(tmp_path)
    target = root / "rca_data" / OB_DAY / file
    lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[line] = edit(lines[line])
    target.write_text("".join(lines), encoding="utf-8")
    return root


@pytest.fixture(params=["clone", "bare"])
def source(request, tmp_path) -> Path:
    return clone(tmp_path) if request.param == "clone" else bare_snapshot(tmp_path)


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    """Both systems of the slice imported into one dataset (read-only for the tests that share it)."""
    out = tmp_path_factory.mktemp("nezha") / "data"
    for system in ("onlineboutique", "trainticket"):
        result = _import(SLICE, out, "--system", system)
        assert result.exit_code == 0, result.output
    return out


# --------------------------------------------------------------------------- cases and ground truth


@pytest.mark.parametrize(("system", "truth"), [("onlineboutique", OB_TRUTH), ("trainticket", TT_TRUTH)])
def test_import_writes_one_case_and_one_truth_per_injection(source, tmp_path, system, truth):
    out = tmp_path / "data"
    result = _import(source, out, "--system", system)
    assert result.exit_code == 0, result.output
    cases = json.loads((out / "input.json").read_text())
    truths = _truths(out)
    assert len(cases) == len(truths) == len(truth)
    assert [c["uuid"] for c in cases] == [t["uuid"] for t in truths]
    assert len({t["uuid"] for t in truths}) == len(truth)
    for record, case, (start, pod, fault_type) in zip(truths, cases, truth):
        assert GT_KEYS <= set(record), GT_KEYS - set(record)
        service = pod.rsplit("-", 2)[0]
        assert record["fault_type"] == fault_type
        assert record["instance"] == [service, pod] and record["service"] == service
        assert record["start_time"] == start
        end = datetime.strptime(start, "%Y-%m-%dT%H:%M:%SZ") + timedelta(minutes=3)
        assert record["end_time"] == end.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert record["key_metrics"] and record["key_observations"] == []
        # The case names the same window, in the 2025 input's sentence.
        assert f"from {start} to {record['end_time']}" in case["Anomaly Description"]


@pytest.mark.parametrize(("system", "pod", "inject_type", "fault_type"), [
    ("onlineboutique", "currencyservice-cf787dd48-vpjrd", "cpu_contention", "cpu stress"),
    ("onlineboutique", "currencyservice-cf787dd48-vpjrd", "cpu_consumed", "cpu stress"),
    ("onlineboutique", "currencyservice-cf787dd48-vpjrd", "network_delay", "network delay"),
    ("onlineboutique", "checkoutservice-578fcf4766-9csqn", "return", "code error"),
    ("onlineboutique", "checkoutservice-578fcf4766-9csqn", "exception", "code error"),  # Go: no JVM
    ("onlineboutique", "adservice-5f6585d649-fnmft", "exception", "jvm exception"),  # OB's Java service
    ("trainticket", "ts-basic-service-5dc8d4f9fd-46997", "exception", "jvm exception"),
    ("trainticket", "ts-basic-service-5dc8d4f9fd-46997", "return", "code error"),
])
def test_fault_types_are_mapped(tmp_path, system, pod, inject_type, fault_type):
    root = clone(tmp_path)
    day = OB_DAY if system == "onlineboutique" else TT_DAY
    inject = f"{day} 09:40:00" if system == "trainticket" else f"{day} 05:40:00"
    set_faults(root, day, [{"inject_time": inject, "inject_timestamp": "0", "inject_pod": pod,
                            "inject_type": inject_type}])
    result = _import(root, tmp_path / "data", "--system", system)
    assert result.exit_code == 0, result.output
    (record,) = _truths(tmp_path / "data")
    assert (record["fault_type"], record["nezha_inject_type"]) == (fault_type, inject_type)


# --------------------------------------------------------------------------- telemetry read back


def test_spans_read_back_with_kind_and_peer(imported):
    spans = read_traces(imported, naming=NAMING, start=OB_HOUR[0], end=OB_HOUR[1]).frame
    rows = _source_rows(OB_DAY, "trace/05_19_trace.csv") + _source_rows(OB_DAY, "trace/05_20_trace.csv")
    # The two minute files repeat spans at their border: each span once.
    assert spans.height == len({(r["TraceID"], r["SpanID"]) for r in rows}) < len(rows)
    assert spans.select("trace_id", "span_id").is_unique().all()
    by_id = {r["span_id"]: r for r in spans.iter_rows(named=True)}
    # frontend's call to productcatalogservice: a client span whose child is productcatalogservice's server span.
    call = by_id["90a2b4bb64746b9d"]
    assert (call["service"], call["span_kind"], call["peer_service"]) == ("frontend", "client", "productcatalogservice")
    assert call["pod"] == "frontend-579b9bff58-t2dbm"
    served = [s for s in by_id.values() if s["parent_span_id"] == "90a2b4bb64746b9d"]
    assert served and all((s["service"], s["span_kind"]) == ("productcatalogservice", "server") for s in served)
    root = by_id["836638f727709508"]
    assert (root["span_kind"], root["parent_span_id"], root["peer_service"]) == ("server", None, None)
    ads = by_id["d800f1fcc4ba6f8f"]
    assert (ads["span_kind"], ads["peer_service"]) == ("client", "adservice")
    assert by_id["b80c208086603533"]["span_kind"] == "internal"  # AdServiceImpl/getAds inside adservice
    # Times and durations: the source's nanoseconds, to the microsecond.
    source_row = next(r for r in rows if r["SpanID"] == "90a2b4bb64746b9d")
    assert call["start"] == datetime.fromtimestamp(int(source_row["StartTimeUnixNano"]) // 1000 / 1e6, UTC)
    assert call["duration_us"] == int(source_row["Duration"])
    kinds = spans.group_by("span_kind").len()
    assert set(kinds.get_column("span_kind")) <= {"client", "server", "internal"}
    # Every client span names a peer other than itself.
    clients = spans.filter(pl.col("span_kind") == "client")
    assert clients.height > 50 and clients.get_column("peer_service").null_count() == 0
    assert clients.filter(pl.col("peer_service") == pl.col("service")).height == 0


def test_trainticket_spans_link_services(imported):
    spans = read_traces(imported, naming=NAMING, start=TT_HOUR[0], end=TT_HOUR[1]).frame
    assert spans.height == len(_source_rows(TT_DAY, "trace/09_22_trace.csv"))
    clients = spans.filter(pl.col("span_kind") == "client")
    assert clients.height > 0
    assert set(clients.get_column("peer_service")) >= {"ts-basic-service"}
    assert all(s.startswith("ts-") for s in spans.get_column("service").unique())


def test_the_days_fault_free_minute_is_imported_beside_the_incidents(imported):
    """construct_data/<day>: Nezha's fault-free reference minute (08:50 on the TrainTicket day) is telemetry
    like any other: its spans and lines land at their own time, before the day's first kept injection."""
    construct = SLICE / "construct_data" / TT_DAY
    span_rows = list(csv.DictReader((construct / "trace" / "08_50_trace.csv").open(encoding="utf-8")))
    log_rows = list(csv.DictReader((construct / "log" / "08_50_log.csv").open(encoding="utf-8")))
    first = min(datetime.fromtimestamp(int(r["StartTimeUnixNano"]) / 1e9, UTC) for r in span_rows)
    last = max(datetime.fromtimestamp(int(r["StartTimeUnixNano"]) / 1e9, UTC) for r in span_rows)
    spans = read_traces(imported, naming=NAMING, start=first, end=last).frame
    assert spans.height == len({(r["TraceID"], r["SpanID"]) for r in span_rows}) > 0
    assert set(spans.get_column("trace_id")) == {r["TraceID"] for r in span_rows}
    lines = read_logs(imported, start=datetime(2023, 1, 29, 8, 30, tzinfo=UTC),
                      end=datetime(2023, 1, 29, 8, 59, tzinfo=UTC)).frame
    assert lines.height == len(log_rows)
    assert set(lines.get_column("pod")) == {r["PodName"] for r in log_rows}


def test_an_absent_fault_free_minute_is_counted_not_fatal(tmp_path):
    """The public snapshot lacks OnlineBoutique's construct minutes (03_51): named absent, nothing else lost."""
    absent = [f"construct_data/{TT_DAY}/trace/08_50_trace.csv", f"construct_data/{TT_DAY}/log/08_50_log.csv"]
    result = _import(bare_snapshot(tmp_path, absent=absent), tmp_path / "data", "--system", "trainticket")
    assert result.exit_code == 0, result.output
    assert "2 file(s) absent from the snapshot, 0 unreadable" in result.output
    assert len(_truths(tmp_path / "data")) == 2
    assert read_traces(tmp_path / "data", naming=NAMING, start=TT_HOUR[0], end=TT_HOUR[1]).frame.height > 0


def test_logs_are_unwrapped_from_the_container_json(imported):
    logs = read_logs(imported, start=OB_HOUR[0], end=OB_HOUR[1]).frame
    rows = _source_rows(OB_DAY, "log/05_19_log.csv")
    assert logs.height == len(rows)
    assert logs.filter(pl.col("message").str.starts_with('{"log"')).height == 0
    first = rows[0]
    line = json.loads(first["Log"])["log"].rstrip("\n")
    match = logs.filter((pl.col("pod") == first["PodName"]) & (pl.col("message") == line))
    assert match.height == 1
    assert match.item(0, "node") == first["Node"] and "service" not in logs.columns
    assert match.item(0, "time") == datetime.fromtimestamp(int(first["TimeUnixNano"]) / 1e9, UTC)
    assert set(logs.get_column("pod")) == {r["PodName"] for r in rows}


def test_infra_pod_kpis_in_release_units(imported):
    infra = read_infra(imported, start=OB_HOUR[0], end=OB_HOUR[1], families=["infra_pod"]).frame
    assert {"pod_cpu_usage", "pod_memory_working_set_bytes", "pod_network_receive_bytes",
            "pod_network_transmit_bytes"} <= set(infra.get_column("kpi_key"))
    pod = "currencyservice-cf787dd48-vpjrd"
    row = next(r for r in _source_rows(OB_DAY, f"metric/{pod}_metric.csv") if r["Time"].startswith("2022-08-22 05:20"))
    at = datetime(2022, 8, 22, 5, 20, tzinfo=UTC)
    mine = infra.filter((pl.col("component") == pod) & (pl.col("time") == at))
    values = dict(zip(mine.get_column("kpi_key"), mine.get_column("value")))
    assert values["pod_cpu_usage"] == pytest.approx(float(row["CpuUsageRate(%)"]))
    assert values["pod_cpu_usage"] > 100  # the cpu_contention injected at 05:18:09
    assert values["pod_memory_working_set_bytes"] == pytest.approx(float(row["MemoryUsage(Mi)"]) * 2**20)
    # One row a minute per pod and KPI.
    assert infra.filter(pl.col("kpi_key") == "pod_cpu_usage").group_by("component").len().get_column("len").to_list() \
        == [60] * 4


def test_without_mesh_leaves_only_the_edge_latency_out(imported, tmp_path):
    """--without-mesh: the day as a system without a service mesh shows it; every other row is the same."""
    result = _import(SLICE, tmp_path / "data", "--system", "onlineboutique", "--without-mesh")
    assert result.exit_code == 0, result.output
    mesh_kpis = {"rrt_client_p50", "rrt_server_p50", "caller_wait_ratio_p50"}
    full = read_infra(imported, start=OB_HOUR[0], end=OB_HOUR[1], families=["infra_pod"]).frame
    bare = read_infra(tmp_path / "data", start=OB_HOUR[0], end=OB_HOUR[1], families=["infra_pod"]).frame
    assert set(full.get_column("kpi_key")) & mesh_kpis == mesh_kpis
    assert not set(bare.get_column("kpi_key")) & mesh_kpis
    assert bare.height == full.filter(~pl.col("kpi_key").is_in(list(mesh_kpis))).height > 0
    assert len(_truths(tmp_path / "data")) == 3


def test_without_traces_leaves_only_the_spans_out(imported, tmp_path):
    """--without-traces: the day as a system without tracing shows it (metrics and logs only)."""
    result = _import(SLICE, tmp_path / "data", "--system", "onlineboutique", "--without-traces")
    assert result.exit_code == 0, result.output
    bare = tmp_path / "data"
    assert read_traces(imported, naming=NAMING, start=OB_HOUR[0], end=OB_HOUR[1]).frame.height > 0
    assert read_traces(bare, naming=NAMING, start=OB_HOUR[0], end=OB_HOUR[1], report_missing=False).frame.height == 0
    full_infra = read_infra(imported, start=OB_HOUR[0], end=OB_HOUR[1], families=["infra_pod"]).frame
    assert read_infra(bare, start=OB_HOUR[0], end=OB_HOUR[1], families=["infra_pod"]).frame.equals(full_infra)
    assert read_logs(bare, start=OB_HOUR[0], end=OB_HOUR[1]).frame.height == \
        read_logs(imported, start=OB_HOUR[0], end=OB_HOUR[1]).frame.height
    assert len(_truths(bare)) == 3


def test_without_metrics_leaves_every_metric_file_out(imported, tmp_path):
    """--without-metrics: the day as a system with traces and logs only shows it (no metric, no mesh)."""
    result = _import(SLICE, tmp_path / "data", "--system", "onlineboutique", "--without-metrics")
    assert result.exit_code == 0, result.output
    bare = tmp_path / "data"
    assert read_infra(imported, start=OB_HOUR[0], end=OB_HOUR[1], families=["infra_pod"]).frame.height > 0
    assert read_infra(bare, start=OB_HOUR[0], end=OB_HOUR[1], families=["infra_pod"]).frame.height == 0
    assert read_apm(bare, start=OB_HOUR[0], end=OB_HOUR[1]).frame.height == 0
    assert read_traces(bare, naming=NAMING, start=OB_HOUR[0], end=OB_HOUR[1]).frame.equals(
        read_traces(imported, naming=NAMING, start=OB_HOUR[0], end=OB_HOUR[1]).frame)
    assert read_logs(bare, start=OB_HOUR[0], end=OB_HOUR[1]).frame.height == \
        read_logs(imported, start=OB_HOUR[0], end=OB_HOUR[1]).frame.height
    assert len(_truths(bare)) == 3


def test_without_metrics_a_java_system_still_knows_its_services(tmp_path):
    """TrainTicket runs on the JVM throughout: with no metric file to list its services, the spans
    and logs do, and a thrown exception is still a JVM exception."""
    result = _import(SLICE, tmp_path / "data", "--system", "trainticket", "--without-metrics")
    assert result.exit_code == 0, result.output
    got = [(t["start_time"], t["instance"][1], t["fault_type"]) for t in _truths(tmp_path / "data")]
    assert got == TT_TRUTH


def test_keep_traces_keeps_whole_traces_and_nothing_else_changes(imported, tmp_path):
    """--keep-traces 0.5: the day as a deployment that samples half its traces records it."""
    result = _import(SLICE, tmp_path / "data", "--system", "onlineboutique", "--keep-traces", "0.5")
    assert result.exit_code == 0, result.output
    full = read_traces(imported, naming=NAMING, start=OB_HOUR[0], end=OB_HOUR[1]).frame
    kept = read_traces(tmp_path / "data", naming=NAMING, start=OB_HOUR[0], end=OB_HOUR[1]).frame
    kept_ids = set(kept.get_column("trace_id"))
    assert 0 < len(kept_ids) < full.get_column("trace_id").n_unique()
    # Every span of a kept trace, none of another.
    assert kept.height == full.filter(pl.col("trace_id").is_in(list(kept_ids))).height
    full_infra = read_infra(imported, start=OB_HOUR[0], end=OB_HOUR[1], families=["infra_pod"]).frame
    assert read_infra(tmp_path / "data", start=OB_HOUR[0], end=OB_HOUR[1], families=["infra_pod"]).frame.equals(full_infra)
    assert len(_truths(tmp_path / "data")) == 3
    refused = _import(SLICE, tmp_path / "zero", "--system", "onlineboutique", "--keep-traces", "0")
    assert refused.exit_code == 2 and "--keep-traces" in refused.output


@pytest.mark.parametrize(("kpi", "file"), [("rrt_client_p50", "source_50.csv"), ("rrt_server_p50", "destination_50.csv")])
def test_edge_latency_is_the_callee_pods_latency_as_each_side_measures_it(imported, kpi, file):
    infra = read_infra(imported, start=OB_HOUR[0], end=OB_HOUR[1], families=["infra_pod"]).frame
    edges = infra.filter(pl.col("kpi_key") == kpi)
    pods = {"checkoutservice": "checkoutservice-578fcf4766-9csqn", "currencyservice": "currencyservice-cf787dd48-vpjrd",
            "adservice": "adservice-5f6585d649-fnmft"}
    # The slice's callees; frontend calls but is never called, and the callees whose pod
    # files the slice left out have no pod to carry the KPI.
    assert set(edges.get_column("component")) == set(pods.values())
    rows = _source_rows(OB_DAY, f"metric/{file}")
    for service, pod in pods.items():
        for row in rows:
            cells = [float(v) for k, v in row.items() if k.endswith(f"_{service}") and v != ""]
            at = datetime.strptime(row["time"][:16], "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
            mine = edges.filter((pl.col("component") == pod) & (pl.col("time") == at)).get_column("value")
            if not cells:  # no such calls that minute: absent, not zero
                assert mine.len() == 0
                continue
            # One value a minute: the slowest caller's median, in the release's microseconds.
            assert mine.max() == pytest.approx(max(cells) * 1e6)


def test_edge_ratio_is_the_callers_wait_over_the_callees_own_time(imported):
    """caller_wait_ratio_p50: per pair and minute the caller's median over the callee's, the largest over callers."""
    infra = read_infra(imported, start=OB_HOUR[0], end=OB_HOUR[1], families=["infra_pod"]).frame
    ratios = infra.filter(pl.col("kpi_key") == "caller_wait_ratio_p50")
    client = {(r["time"][:16], k): float(v) for r in _source_rows(OB_DAY, "metric/source_50.csv")
              for k, v in r.items() if k not in ("time", "timestamp") and v != ""}
    server = {(r["time"][:16], k): float(v) for r in _source_rows(OB_DAY, "metric/destination_50.csv")
              for k, v in r.items() if k not in ("time", "timestamp") and v != ""}
    checked = 0
    for service, pod in (("checkoutservice", "checkoutservice-578fcf4766-9csqn"),
                         ("currencyservice", "currencyservice-cf787dd48-vpjrd")):
        by_minute: dict[str, list[float]] = {}
        for (minute, pair), value in client.items():
            if pair.endswith(f"_{service}") and server.get((minute, pair), 0.0) > 0:
                by_minute.setdefault(minute, []).append(value / server[minute, pair])
        assert by_minute
        mine_minutes = ratios.filter(pl.col("component") == pod).get_column("time").to_list()
        assert sorted(mine_minutes) == sorted(datetime.strptime(m, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
                                              for m in by_minute)
        for minute, values in by_minute.items():
            at = datetime.strptime(minute, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
            mine = ratios.filter((pl.col("component") == pod) & (pl.col("time") == at)).get_column("value")
            assert mine.to_list() == [pytest.approx(max(values))]  # a ratio: no unit
            checked += 1
    assert checked >= 60


def test_malformed_edge_file_is_named_and_the_rest_imported(tmp_path):
    root = _clone_with_line_edited(tmp_path, "metric/source_50.csv", line=3,
                                   edit=lambda text: "noon" + text[text.index(","):])
    out = tmp_path / "data"
    result = _import(root, out)
    assert result.exit_code == 3, result.output
    assert "rca_data/2022-08-22/metric/source_50.csv" in result.output and "line 4" in result.output
    infra = read_infra(out, start=OB_HOUR[0], end=OB_HOUR[1], families=["infra_pod"]).frame
    assert infra.filter(pl.col("kpi_key") == "rrt_client_p50").height == 0
    assert infra.filter(pl.col("kpi_key") == "rrt_server_p50").height > 0
    assert infra.filter(pl.col("kpi_key") == "caller_wait_ratio_p50").height == 0  # one side alone: no ratio
    assert len(_truths(out)) == 3


@pytest.mark.parametrize(("edit", "words"), [
    # the third field: frontend_currencyservice, a pair the slice imports
    (lambda line: ",".join([*line.split(",")[:2], "fast", *line.split(",")[3:]]),
     ["line 4", "frontend_currencyservice 'fast' is not a number"]),
    (lambda line: line.rstrip("\n") + ",0.1\n", ["line 4", "fields, the header has"]),
])
def test_edge_file_with_a_bad_cell_or_row_is_named(tmp_path, edit, words):
    root = _clone_with_line_edited(tmp_path, "metric/destination_50.csv", line=3, edit=edit)
    result = _import(root, tmp_path / "data")
    assert result.exit_code == 3, result.output
    assert "rca_data/2022-08-22/metric/destination_50.csv" in result.output
    assert all(word in result.output for word in words), result.output


def test_a_callee_without_a_pod_file_is_reported_not_dropped_silently(caplog):
    # The slice keeps 4 of OnlineBoutique's 10 pod files: the pairs whose callee has none are named.
    with caplog.at_level("WARNING", logger="preprocess.nezha"):
        nezha.read_day(nezha.Source(SLICE), day=OB_DAY)
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "source_50.csv: columns" in warned and "frontend_productcatalogservice" in warned
    assert "frontend_checkoutservice" not in warned  # checkoutservice has its pod file


def test_apm_pod_and_service_rows(imported):
    apm = read_apm(imported, start=OB_HOUR[0], end=OB_HOUR[1]).frame
    pods = apm.filter(pl.col("object_type") == "pod")
    services = apm.filter(pl.col("object_type") == "service")
    assert set(pods.get_column("object_id")) == {"adservice-5f6585d649-fnmft", "checkoutservice-578fcf4766-9csqn",
                                                  "currencyservice-cf787dd48-vpjrd", "frontend-579b9bff58-t2dbm"}
    assert set(services.get_column("object_id")) == {"adservice", "checkoutservice", "currencyservice", "frontend"}
    frontend = next(r for r in _source_rows(OB_DAY, "metric/frontend-579b9bff58-t2dbm_metric.csv")
                    if r["Time"].startswith("2022-08-22 05:30"))
    at = datetime(2022, 8, 22, 5, 30, tzinfo=UTC)
    row = pods.filter((pl.col("object_id") == "frontend-579b9bff58-t2dbm") & (pl.col("time") == at)).row(0, named=True)
    assert row["request"] == pytest.approx(float(frontend["PodWorkload(Ops)"]) * 60)
    assert row["rrt"] == pytest.approx(float(frontend["PodServerLatencyP90(s)"]) * 1e6)
    # PodSuccessRate(%) is 0 in every row of the source: not measured, not 100 % errors.
    assert pods.get_column("error_ratio").null_count() == pods.height
    # adservice's TimeStamp column is 200,000,000 s ahead; its rows still sit at their Time.
    ads = pods.filter(pl.col("object_id") == "adservice-5f6585d649-fnmft")
    assert ads.height == 60
    service = services.filter((pl.col("object_id") == "frontend") & (pl.col("time") == at))
    assert service.item(0, "request") == pytest.approx(row["request"])


def test_timestamp_column_is_not_trusted(imported):
    rows = _source_rows(OB_DAY, "metric/adservice-5f6585d649-fnmft_metric.csv")
    at = [datetime.strptime(r["Time"][:19], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC) for r in rows]
    offsets = [int(r["TimeStamp"]) - int(t.timestamp()) for r, t in zip(rows, at)]
    # The source's habit, in the slice: TimeStamp is about 200,000,000 s (6.3 years) ahead of Time.
    assert all(200_000_000 <= o < 200_100_000 for o in offsets) and offsets.count(200_000_000) > len(rows) // 2
    apm = read_apm(imported, start=OB_HOUR[0], end=OB_HOUR[1], level="pod").frame
    ads = apm.filter(pl.col("object_id") == "adservice-5f6585d649-fnmft").get_column("time").to_list()
    assert ads == [t.replace(second=0) for t in at]
    assert not [p.name for p in imported.iterdir() if p.name.startswith("2028")]  # where TimeStamp would put them


# --------------------------------------------------------------------------- merging, errors


def test_rerun_changes_nothing(source, tmp_path):
    out = tmp_path / "data"
    assert _import(source, out).exit_code == 0

    def snapshot() -> dict[str, object]:
        files: dict[str, object] = {}
        for path in sorted(out.rglob("*")):
            if path.suffix == ".parquet":
                files[str(path.relative_to(out))] = pl.read_parquet(path)
            elif path.is_file():
                files[str(path.relative_to(out))] = path.read_bytes()
        return files

    before = snapshot()
    result = _import(source, out)
    assert result.exit_code == 0, result.output
    after = snapshot()
    assert list(after) == list(before)
    for name, value in before.items():
        if isinstance(value, pl.DataFrame):
            assert value.equals(after[name]), name
        else:
            assert value == after[name], name


def test_two_systems_merge_into_one_dataset(imported):
    truths = _truths(imported)
    assert [t["start_time"] for t in truths] == sorted(t for t, _, _ in OB_TRUTH + TT_TRUTH)
    assert len(json.loads((imported / "input.json").read_text())) == 5


def test_malformed_metric_file_is_named_and_the_rest_imported(tmp_path):
    root = _clone_with_line_edited(tmp_path, "metric/currencyservice-cf787dd48-vpjrd_metric.csv", line=5,
                                   edit=lambda text: "yesterday at noon" + text[text.index(","):])
    out = tmp_path / "data"
    result = _import(root, out)
    assert result.exit_code == 3, result.output
    assert "rca_data/2022-08-22/metric/currencyservice-cf787dd48-vpjrd_metric.csv" in result.output
    assert "Time" in result.output and "yesterday at noon" in result.output
    apm = read_apm(out, start=OB_HOUR[0], end=OB_HOUR[1], level="pod").frame
    assert set(apm.get_column("object_id")) == {"adservice-5f6585d649-fnmft", "checkoutservice-578fcf4766-9csqn",
                                                 "frontend-579b9bff58-t2dbm"}
    assert read_traces(out, naming=NAMING, start=OB_HOUR[0], end=OB_HOUR[1]).frame.height > 0
    assert len(_truths(out)) == 3


def test_absent_blobs_are_counted_not_fatal(tmp_path):
    absent = [f"rca_data/{OB_DAY}/trace/05_28_trace.csv", f"rca_data/{OB_DAY}/log/05_20_log.csv"]
    result = _import(bare_snapshot(tmp_path, absent=absent), tmp_path / "data")
    assert result.exit_code == 0, result.output
    assert "2 file(s) absent from the snapshot, 0 unreadable" in result.output
    assert len(_truths(tmp_path / "data")) == 3


@pytest.mark.parametrize(("args", "words"), [
    (["--system", "sockshop"], ["--system 'sockshop'", "onlineboutique", "trainticket"]),
    (["--day", "2022-09-01"], ["no OnlineBoutique day 2022-09-01", "it holds 2022-08-22"]),
    (["--day", TT_DAY], ["no OnlineBoutique day 2023-01-29", "it holds 2022-08-22"]),
    (["--system", "trainticket", "--day", OB_DAY], ["no TrainTicket day 2022-08-22", "it holds 2023-01-29"]),
])
def test_unknown_system_or_day_fails_clearly(source, tmp_path, args, words):
    out = tmp_path / "data"
    result = _import(source, out, *args)
    assert result.exit_code == 2, result.output
    for word in words:
        assert word in result.output, result.output
    assert not out.exists()


def test_not_a_nezha_repository_fails_clearly(tmp_path):
    result = _import(tmp_path, tmp_path / "data")
    assert result.exit_code == 2
    assert "neither a Nezha clone" in result.output


def test_log_lines_without_a_unix_time_keep_their_timestamp(imported):
    """TrainTicket writes Go's zero time as TimeUnixNano on some ERROR lines; their Timestamp is right."""
    rows = _source_rows(TT_DAY, "log/09_21_log.csv")
    zero = [r for r in rows if r["TimeUnixNano"] == "-6795364578871345152"]
    assert len(zero) == 5  # ERROR lines of ts-travel2-service and ts-travel-service, the lines a diagnosis needs
    logs = read_logs(imported, start=TT_HOUR[0], end=TT_HOUR[1]).frame
    assert logs.height == len(rows)
    for row in zero:
        at = datetime.strptime(row["Timestamp"], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)
        line = json.loads(row["Log"])["log"].rstrip("\n")
        found = logs.filter((pl.col("pod") == row["PodName"]) & (pl.col("message") == line))
        assert found.get_column("time").to_list() == [at]
    assert not [p.name for p in imported.iterdir() if p.name < "2000"]  # nothing filed under 1754


# --------------------------------------------------------------------------- TraStrainer's trace minutes


def _trastrainer(tmp_path: Path, *, day: str = OB_DAY) -> Path:
    """A TraStrainer tree whose one hipster batch holds, for ``day``'s injections, a minute Nezha kept
    (05:19, the same spans) and a minute it did not (05:29: 05:19's spans ten minutes later, new ids)."""
    batch = tmp_path / "trastrainer" / "data" / "dataset" / "hipster" / "batches" / "batch1"
    (batch / "trace").mkdir(parents=True)
    labels = (SLICE / "rca_data" / OB_DAY / f"{OB_DAY}-fault_list.json").read_text(encoding="utf-8")
    (batch / "label.json").write_text(labels.replace(OB_DAY, day), encoding="utf-8")
    kept = SLICE / "rca_data" / OB_DAY / "trace" / "05_19_trace.csv"
    shutil.copy(kept, batch / "trace" / "05_19_trace.csv")
    rows = list(csv.DictReader(kept.open(encoding="utf-8")))
    with (batch / "trace" / "05_29_trace.csv").open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            shift = 600 * 10**9
            writer.writerow({**row, "TraceID": row["TraceID"] + "-later",
                             "StartTimeUnixNano": int(row["StartTimeUnixNano"]) + shift,
                             "EndTimeUnixNano": int(row["EndTimeUnixNano"]) + shift})
    return tmp_path / "trastrainer"


def _span_minutes(out: Path) -> dict[str, int]:
    spans = read_traces(out, naming=NAMING, start=OB_HOUR[0], end=OB_HOUR[1]).frame
    return dict(spans.group_by(pl.col("start").dt.strftime("%H:%M")).len().iter_rows())


def test_trastrainer_adds_the_trace_minutes_nezha_did_not_keep(tmp_path):
    plain, more = tmp_path / "plain", tmp_path / "more"
    assert _import(SLICE, plain, "--day", OB_DAY).exit_code == 0
    extra = bare_snapshot(tmp_path, source=_trastrainer(tmp_path), name="trastrainer.git")
    result = _import(SLICE, more, "--day", OB_DAY, "--more-traces", str(extra))
    assert result.exit_code == 0, result.output
    assert "data/dataset/hipster/batches/batch1/trace" in result.output
    before, after = _span_minutes(plain), _span_minutes(more)
    added = {m: n for m, n in after.items() if after[m] != before.get(m)}
    # every span of the later minute file is new, and 05:19's file again adds nothing (a span counts once)
    assert set(added) <= {"05:28", "05:29"} and not set(before) & set(added)
    assert sum(added.values()) == len(_source_rows(OB_DAY, "trace/05_19_trace.csv"))
    assert _truths(more) == _truths(plain)  # the cases are Nezha's


def test_a_trastrainer_batch_of_another_day_adds_nothing(tmp_path):
    plain, more = tmp_path / "plain", tmp_path / "more"
    assert _import(SLICE, plain, "--day", OB_DAY).exit_code == 0
    result = _import(SLICE, more, "--day", OB_DAY, "--more-traces", str(_trastrainer(tmp_path, day="2022-08-23")))
    assert result.exit_code == 0, result.output
    assert "no batch of that day" in result.output
    assert _span_minutes(more) == _span_minutes(plain)
