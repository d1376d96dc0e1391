"""Simulated release: file layout, schemas, real-layout variants and determinism."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from simulate.simulator import SimulationOptions, simulate

DAY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
HOUR_RE = re.compile(r"^(log_filebeat-server|trace_jaeger-span)_(\d{4}-\d{2}-\d{2})_(\d{2})-(00|59)-00\.parquet$")
INFRA_LABELS = ["time", "cf", "device", "instance", "kpi_key", "kpi_name", "kubernetes_node", "mountpoint",
                "namespace", "object_type", "pod"]
APM_COLUMNS = ["time", "object_id", "object_type", "request", "response", "rrt", "rrt_max", "error", "client_error",
               "server_error", "timeout", "error_ratio", "client_error_ratio", "server_error_ratio"]


def _schedule(path: Path) -> Path:
    """Two synthetic faults: the second spans CST 17:00 (an hour file named 17-59-00)."""
    lines = [
        {"fault_category": "stress test", "fault_type": "cpu stress", "instance_type": "pod", "service": "emailservice",
         "instance": "emailservice-1", "source": "", "destination": "", "start_time": "2025-06-06T08:10:02Z",
         "end_time": "2025-06-06T08:25:02Z", "uuid": "aaaa0001-1", "key_observations": [], "key_metrics": [],
         "fault_description": []},
        {"fault_category": "dns fault", "fault_type": "dns error", "instance_type": "service",
         "service": "checkoutservice", "instance": "checkoutservice", "source": "", "destination": "",
         "start_time": "2025-06-06T09:10:05Z", "end_time": "2025-06-06T09:22:05Z", "uuid": "aaaa0002-2",
         "key_observations": [], "key_metrics": [], "fault_description": []},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("simulate_layout")
    simulate(SimulationOptions(out_dir=root / "out", schedule=_schedule(root / "gt.jsonl"), seed=7))
    return root / "out"


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.startswith(".")}


def test_day_and_hour_file_names(release: Path) -> None:
    days = [p.name for p in release.iterdir() if p.is_dir()]
    assert days == ["2025-06-06"]
    for family in ("log-parquet", "trace-parquet"):
        names = sorted(p.name for p in (release / "2025-06-06" / family).iterdir())
        matches = [HOUR_RE.match(n) for n in names]
        assert all(matches), names
        # 07:00..09:xx UTC -> CST 15..17; every file carries its CST day and hour.
        assert sorted(int(m.group(3)) for m in matches) == [15, 16, 17]
        assert {m.group(2) for m in matches} == {"2025-06-06"}
        assert any(m.group(4) == "59" for m in matches)


def test_metric_files(release: Path) -> None:
    metric = release / "2025-06-06" / "metric-parquet"
    assert len(list((metric / "infra" / "infra_pod").glob("infra_pod_*_2025-06-06.parquet"))) == 9
    assert len(list((metric / "infra" / "infra_node").glob("*.parquet"))) == 16
    assert len(list((metric / "infra" / "infra_tidb").glob("*.parquet"))) == 16
    assert len(list((metric / "other").glob("infra_tikv_*.parquet"))) == 18
    assert len(list((metric / "other").glob("infra_pd_*.parquet"))) == 17
    assert (metric / "apm" / "pod" / "pod_adservice-0_2025-06-06.parquet").exists()
    assert (metric / "apm" / "service" / "service_redis-cart_2025-06-06.parquet").exists()
    assert (metric / "apm" / "pod_ns_hipstershop_2025-06-06.parquet").exists()
    assert len(list((metric / "apm" / "pod").glob("*deleted*"))) == 1


def test_infra_schema_null_strings_and_time_variants(release: Path) -> None:
    encodings = set()
    for path in (release / "2025-06-06" / "metric-parquet").rglob("infra_*.parquet"):
        table = pq.read_table(path)
        assert table.column_names[:11] == INFRA_LABELS, path
        assert table.column_names[-2:] == ["sql_type", "type"]
        value_column = table.column_names[11]
        assert table.column("kpi_key")[0].as_py() == value_column
        assert table.schema.field(value_column).type == pa.float64()
        assert table.schema.field("time").type == pa.string()
        assert table.column("cf").null_count == 0 and table.column("cf")[0].as_py() == "null"
        first = table.column("time")[0].as_py()
        encodings.add("Z" if first.endswith("Z") else ("+00:00" if first.endswith("+00:00") else "naive"))
    assert encodings == {"Z", "+00:00", "naive"}


def test_apm_schema_and_time_variants(release: Path) -> None:
    kinds = set()
    for path in (release / "2025-06-06" / "metric-parquet" / "apm").rglob("*.parquet"):
        table = pq.read_table(path)
        assert table.column_names == APM_COLUMNS, path
        assert table.schema.field("request").type == pa.int64()
        assert table.schema.field("rrt").type == pa.float64()
        kinds.add(str(table.schema.field("time").type))
    assert kinds == {"string", "timestamp[ns, tz=UTC]"}


def test_trace_and_log_schema(release: Path) -> None:
    trace = next((release / "2025-06-06" / "trace-parquet").glob("*_16-00-00.parquet"))
    table = pq.read_table(trace)
    assert table.column_names == ["traceID", "spanID", "flags", "operationName", "references", "startTime",
                                  "startTimeMillis", "duration", "tags", "logs", "process"]
    assert table.schema.field("startTime").type == pa.int64()
    start = table.column("startTime").to_pylist()
    # µs since epoch inside CST 16:00-17:00 of 2025-06-06 (= 08:00-09:00 UTC).
    assert 1749196800_000000 <= min(start) and max(start) < 1749200400_000000
    assert all(len(t) == 32 for t in table.column("traceID").to_pylist()[:100])
    services = {p["serviceName"] for p in table.column("process").to_pylist()}
    assert "redis" in services and "adservice" not in services and "paymentservice" not in services
    log = pq.read_table(next((release / "2025-06-06" / "log-parquet").glob("*_16-00-00.parquet")))
    assert log.column_names == ["k8_namespace", "@timestamp", "agent_name", "k8_pod", "k8_node_name", "message"]
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", log.column("@timestamp")[0].as_py())


def test_cases_files(release: Path) -> None:
    cases = json.loads((release / "input.json").read_text())
    assert [c["uuid"] for c in cases] == ["aaaa0001-1", "aaaa0002-2"]
    assert "2025-06-06T08:10:02Z" in cases[0]["Anomaly Description"]
    truth = [json.loads(x) for x in (release / "groundtruth.jsonl").read_text().splitlines()]
    assert truth[1]["fault_type"] == "dns error" and truth[1]["end_time"] == "2025-06-06T09:22:05Z"


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    a = simulate(SimulationOptions(out_dir=tmp_path / "a", cases=1, seed=11))
    simulate(SimulationOptions(out_dir=tmp_path / "b", cases=1, seed=11))
    simulate(SimulationOptions(out_dir=tmp_path / "c", cases=1, seed=12))
    da, db, dc = _digest(tmp_path / "a"), _digest(tmp_path / "b"), _digest(tmp_path / "c")
    assert da == db
    assert len(a) == 1
    shared = set(da) & set(dc)
    traces = [k for k in shared if "trace-parquet" in k]
    assert traces and all(da[k] != dc[k] for k in traces)


def test_rerun_skips_finished_days(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    options = SimulationOptions(out_dir=tmp_path / "r", cases=1, seed=3)
    simulate(options)
    before = _digest(tmp_path / "r")
    with caplog.at_level("INFO", logger="simulate.simulator"):
        simulate(options)
    assert "already complete" in caplog.text
    assert _digest(tmp_path / "r") == before
