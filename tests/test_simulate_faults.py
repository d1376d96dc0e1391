"""Replaying real ground-truth lines: the faults come back unchanged and are visible in the data."""
from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from preprocess.readers import read_apm, read_infra, read_logs, read_traces
from rca.system import bundled_system
from rca.taxonomy import FAULT_TYPES
from rca.timeutil import parse_utc
from simulate.catalogue import load_catalogue
from simulate.simulator import SimulationOptions, simulate

# HipsterShop's [traces] (the bundled system): the simulated and released spans' peer rules.
NAMING = bundled_system().trace

REAL_TRUTH = Path(__file__).resolve().parents[1] / "data" / "reference" / "aiops2025" / "groundtruth.jsonl"
WANTED = ("node memory stress", "node disk fill", "cpu stress", "dns error", "io fault", "network delay",
          "jvm exception", "target port misconfig", "pod kill")


def _first_of_each_type() -> list[dict]:
    chosen: dict[str, dict] = {}
    for line in REAL_TRUTH.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["fault_type"] in WANTED and record["fault_type"] not in chosen:
            if record["fault_type"] == "cpu stress" and record["instance_type"] != "pod":
                continue
            chosen[record["fault_type"]] = record
    return [chosen[t] for t in WANTED]


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict]]:
    if not REAL_TRUTH.exists():
        pytest.skip("real reference ground truth not available")
    root = tmp_path_factory.mktemp("simulate_replay")
    records = _first_of_each_type()
    schedule = root / "schedule.jsonl"
    schedule.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    simulate(SimulationOptions(out_dir=root / "out", schedule=schedule, seed=5))
    return root / "out", {r["fault_type"]: r for r in records}


def _windows(record: dict) -> tuple:
    start, end = parse_utc(record["start_time"]), parse_utc(record["end_time"])
    return start, end, start - timedelta(minutes=40), start - timedelta(minutes=5)


def _ratio(frame: pl.DataFrame, start, end, b0, b1) -> float:
    inside = frame.filter(pl.col("time").is_between(start, end))["value"].mean()
    base = frame.filter(pl.col("time").is_between(b0, b1))["value"].mean()
    return inside / base


def test_catalogue_covers_every_real_fault_type() -> None:
    catalogue = load_catalogue()
    assert set(catalogue) == set(FAULT_TYPES)
    assert {t.instance for t in catalogue["dns error"].targets} <= {"checkoutservice", "checkoutservice-0",
                                                                   "checkoutservice-1", "checkoutservice-2"}
    assert catalogue["io fault"].targets[0].instance == ["tidb-tikv-0", "tidb-tikv"]
    assert catalogue["pod kill"].max_duration_s <= 60
    assert all(t.instance_type == "node" for t in catalogue["node cpu stress"].targets)


def test_replay_reproduces_ground_truth(replay) -> None:
    out, records = replay
    written = [json.loads(x) for x in (out / "groundtruth.jsonl").read_text().splitlines()]
    assert written == list(records.values())
    cases = json.loads((out / "input.json").read_text())
    for case, record in zip(cases, written):
        assert case["uuid"] == record["uuid"]
        assert record["start_time"] in case["Anomaly Description"]
        assert record["end_time"] in case["Anomaly Description"]


@pytest.mark.parametrize("fault_type, kpi", [("node memory stress", "node_memory_usage_rate"),
                                             ("node disk fill", "node_filesystem_usage_rate")])
def test_node_faults_raise_the_node_kpi(replay, fault_type: str, kpi: str) -> None:
    out, records = replay
    record = records[fault_type]
    start, end, b0, b1 = _windows(record)
    frame = read_infra(out, start=b0, end=end, families=["infra_node"], kpis=[kpi]).frame
    target = frame.filter(pl.col("component") == record["instance"])
    other = frame.filter(pl.col("component") != record["instance"])
    assert _ratio(target, start, end, b0, b1) > 1.3
    assert _ratio(other, start, end, b0, b1) < 1.1


def test_pod_cpu_stress_raises_pod_cpu(replay) -> None:
    out, records = replay
    record = records["cpu stress"]
    pod = record["instance"] if isinstance(record["instance"], str) else record["instance"][0]
    start, end, b0, b1 = _windows(record)
    frame = read_infra(out, start=b0, end=end, families=["infra_pod"], kpis=["pod_cpu_usage"]).frame
    assert _ratio(frame.filter(pl.col("component") == pod), start, end, b0, b1) > 3


@pytest.mark.parametrize("fault_type, pattern, pod_prefix", [
    ("dns error", "server misbehaving", "checkoutservice"),
    ("io fault", "Region is unavailable", "productcatalogservice"),
    ("jvm exception", "Injected error", "adservice"),
    ("target port misconfig", "connection refused", ""),
])
def test_fault_logs_appear_in_window_only(replay, fault_type: str, pattern: str, pod_prefix: str) -> None:
    out, records = replay
    start, end, b0, b1 = _windows(records[fault_type])
    logs = read_logs(out, start=b0, end=end).frame
    hits = logs.filter(pl.col("message").str.contains(pattern, literal=True)
                       & pl.col("pod").str.starts_with(pod_prefix))
    inside = hits.filter(pl.col("time").is_between(start, end)).height
    before = hits.filter(pl.col("time").is_between(b0, b1)).height
    assert inside >= 5
    assert inside > 5 * before


def test_network_delay_slows_the_edge(replay) -> None:
    out, records = replay
    record = records["network delay"]
    start, end, b0, b1 = _windows(record)
    spans = read_traces(out, naming=NAMING, start=b0, end=end).frame
    edge = spans.filter((pl.col("service") == record["source"]) & (pl.col("span_kind") == "client")
                        & (pl.col("peer_service") == record["destination"]))
    assert edge.height > 0
    inside = edge.filter(pl.col("start").is_between(start, end))["duration_us"].median()
    before = edge.filter(pl.col("start").is_between(b0, b1))["duration_us"].median()
    assert inside > 3 * before


def test_io_fault_raises_tikv_io(replay) -> None:
    out, records = replay
    start, end, b0, b1 = _windows(records["io fault"])
    frame = read_infra(out, start=b0, end=end, families=["infra_tikv"], kpis=["io_util", "region_pending"]).frame
    assert _ratio(frame.filter(pl.col("kpi_key") == "io_util"), start, end, b0, b1) > 3
    assert frame.filter(pl.col("kpi_key") == "region_pending")["value"].max() > 5


def test_pod_kill_leaves_a_gap_in_pod_metrics(replay) -> None:
    out, records = replay
    record = records["pod kill"]
    start = parse_utc(record["start_time"])
    pods = [record["instance"]] if isinstance(record["instance"], str) else record["instance"]
    pods = [p if p[-1].isdigit() else f"{p}-0" for p in pods]
    frame = read_infra(out, start=start - timedelta(minutes=5), end=start + timedelta(minutes=5),
                       families=["infra_pod"], kpis=["pod_processes"]).frame
    series = frame.filter(pl.col("component") == pods[0])
    assert series["value"].min() == 0
    assert series["value"].max() >= 1
    apm = read_apm(out, start=start - timedelta(minutes=5), end=start + timedelta(minutes=5), level="pod").frame
    assert apm.filter(pl.col("object_id") == pods[0]).height < apm.filter(pl.col("object_id") == "frontend-0").height


def _node_cpu_shift(tmp: Path, difficulty: float) -> float:
    record = {"fault_category": "node fault", "fault_type": "node cpu stress", "instance_type": "node",
              "service": "", "instance": "aiops-k8s-03", "source": "", "destination": "",
              "start_time": "2025-06-06T03:10:00Z", "end_time": "2025-06-06T03:25:00Z", "uuid": "bbbb0001-1",
              "key_observations": [], "key_metrics": [], "fault_description": []}
    schedule = tmp / f"gt_{difficulty}.jsonl"
    schedule.write_text(json.dumps(record) + "\n", encoding="utf-8")
    out = tmp / f"out_{difficulty}"
    simulate(SimulationOptions(out_dir=out, schedule=schedule, seed=1, difficulty=difficulty))
    start, end, b0, b1 = _windows(record)
    frame = read_infra(out, start=b0, end=end, families=["infra_node"], kpis=["node_cpu_usage_rate"]).frame
    return _ratio(frame.filter(pl.col("component") == "aiops-k8s-03"), start, end, b0, b1)


def test_difficulty_shrinks_the_effect(tmp_path: Path) -> None:
    easy, hard = _node_cpu_shift(tmp_path, 1.0), _node_cpu_shift(tmp_path, 4.0)
    assert easy > 2.0
    assert 1.0 < hard < easy
