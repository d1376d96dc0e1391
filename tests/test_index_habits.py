"""Real telemetry's habits (issue 17, item 4): contaminated and absent baselines, other KPI semantics.

Each world is synthetic with a known root cause; the index is written directly (no simulator).
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from index import store
from index.models import WindowQueryResult
from index.params import IndexParams
from index.query import query_window
from preprocess.detect import MetricParams
from preprocess.detect_log import LOG_COUNT_SCHEMA
from preprocess.detect_metric import SERIES_SCHEMA, metric_series, score_metric_window
from preprocess.detect_trace import EDGE_STATS_SCHEMA
from preprocess.readers import read_apm, read_infra
from preprocess.schema import APM_SCHEMA
from rca.system import bundled_system

SYSTEM = bundled_system()

DAY = "2025-06-06"  # CST day: UTC 2025-06-05 16:00 .. 2025-06-06 16:00
T0 = datetime(2025, 6, 5, 16, 0, tzinfo=UTC)
SERVICES = ("frontend", "cartservice", "checkoutservice", "emailservice")
NODE_OF = {f"{s}-{i}": f"aiops-k8s-0{1 + (k + i) % 3}" for k, s in enumerate(SERVICES) for i in range(3)}
EDGES = (("frontend", "cartservice"), ("frontend", "checkoutservice"), ("checkoutservice", "emailservice"))


def _t(minute: float) -> datetime:
    return T0 + timedelta(minutes=minute)


def build(
    *,
    minutes: int,
    seed: int,
    faults: list[dict],
    cpu_unit: float = 1.0,
    latency: str = "mean",
    day_offset: int = 0,
) -> dict[str, pl.DataFrame]:
    """A day of minutes ``[0, minutes)``; each fault ``{pod, start, end, cpu, errors, rrt}`` multiplies that pod's
    CPU and latency and adds errors for minutes ``[start, end]``. ``cpu_unit`` rescales CPU (1000: millicores);
    ``latency="p99"`` makes rrt a heavy-tailed percentile instead of a mean; ``day_offset`` -1 writes the
    same minutes a day earlier."""
    rng = np.random.default_rng(seed)
    series, counts, edges = [], [], []
    for m in range(minutes):
        t = _t(m) + timedelta(days=day_offset)
        for pod, node in NODE_OF.items():
            hit = [f for f in faults if f["pod"] == pod and f["start"] <= m <= f["end"]]
            cpu_factor = np.prod([f.get("cpu", 1.0) for f in hit]) if hit else 1.0
            rrt_factor = np.prod([f.get("rrt", 1.0) for f in hit]) if hit else 1.0
            errors = sum(f.get("errors", 0.0) for f in hit)
            series.append((t, pod, "infra_pod", "pod_cpu_usage", cpu_unit * rng.normal(0.2, 0.01) * cpu_factor))
            if latency == "p99":
                rrt = 1000 * rng.lognormal(2.0, 0.25) * rrt_factor
            else:
                rrt = rng.normal(1000, 40) * rrt_factor
            series.append((t, pod, "apm_pod", "rrt", rrt))
            series.append((t, pod, "apm_pod", "request", rng.normal(100, 5)))
            series.append((t, pod, "apm_pod", "error", float(rng.poisson(errors)) if errors else 0.0))
            counts.append((t, pod, node, 1, int(rng.poisson(30)), "request complete"))
        for caller, callee in EDGES:
            for i in range(3):
                pod = f"{callee}-{i}"
                p95 = rng.normal(2000, 80)
                edges.append((t, caller, f"{caller}-0", callee, pod, NODE_OF[pod], f"{callee}/Op", 40, 0, p95 / 2, p95,
                              p95 / 1.5, None, None))
    shift = timedelta(days=day_offset)
    placement = pl.DataFrame([(p, n, _t(0) + shift, _t(minutes) + shift) for p, n in NODE_OF.items()],
                             schema={"pod": pl.Utf8, "node": pl.Utf8, "first": SERIES_SCHEMA["time"],
                                     "last": SERIES_SCHEMA["time"]}, orient="row")
    return {
        "metric_series": pl.DataFrame(series, schema=SERIES_SCHEMA, orient="row"),
        "metric_placement": placement,
        "log_counts": pl.DataFrame(counts, schema=LOG_COUNT_SCHEMA, orient="row"),
        "trace_edges": pl.DataFrame(edges, schema=EDGE_STATS_SCHEMA, orient="row"),
    }


def write(index_dir, tables: dict[str, pl.DataFrame], *, day: str = DAY) -> None:
    for table, frame in tables.items():
        store.atomic_write_parquet(frame, store.table_path(index_dir, day, table))
    store.atomic_write_parquet(pl.DataFrame({"template_id": [1], "template": ["request complete"]}),
                               store.index_table_path(index_dir, "log_templates"))


def ranking(result: WindowQueryResult) -> list[str]:
    return [c.component for c in result.candidates]


# --------------------------------------------------------------------------- contaminated baselines

# The previous incident (cartservice-2: errors, CPU and latency up) fills the 30 minutes just before
# the window of the next one (emailservice-1: CPU up 2.5x), ending two minutes before it opens.
PREVIOUS = {"pod": "cartservice-2", "start": 150, "end": 177, "cpu": 3.0, "rrt": 3.0, "errors": 15.0}
CURRENT = {"pod": "emailservice-1", "start": 180, "end": 200, "cpu": 2.5}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("told", [True, False], ids=["exclude_windows", "longer_history"])
def test_contaminated_baseline_does_not_blame_the_previous_incident(tmp_path, seed, told):
    write(tmp_path, build(minutes=240, seed=seed, faults=[PREVIOUS, CURRENT]))
    told_windows = {"exclude_windows": [(_t(PREVIOUS["start"]), _t(PREVIOUS["end"]))]} if told else {}
    result = query_window(tmp_path, start=_t(180) + timedelta(seconds=5), end=_t(200) + timedelta(seconds=5),
                          top_k=5, **told_windows)
    names = ranking(result)
    assert names[0] == "emailservice-1", names
    # The previous incident's recovery is not this window's evidence.
    assert "cartservice-2" not in names[:3], [(c.component, c.score) for c in result.candidates]


def test_without_either_remedy_the_previous_incident_is_blamed(tmp_path):
    """The world above is a real trap: with no older history and no excluded windows it wins."""
    write(tmp_path, build(minutes=240, seed=0, faults=[PREVIOUS, CURRENT]))
    blind = IndexParams(metric=MetricParams(history_minutes=0))
    result = query_window(tmp_path, start=_t(180) + timedelta(seconds=5), end=_t(200) + timedelta(seconds=5),
                          top_k=5, params=blind)
    assert ranking(result)[0] == "cartservice-2"


def test_exclude_windows_that_cover_the_window_itself_are_ignored(tmp_path):
    write(tmp_path, build(minutes=240, seed=3, faults=[CURRENT]))
    window = (_t(180) + timedelta(seconds=5), _t(200) + timedelta(seconds=5))
    result = query_window(tmp_path, start=window[0], end=window[1], top_k=5, exclude_windows=[window])
    assert ranking(result)[0] == "emailservice-1"


# --------------------------------------------------------------------------- a crowded day


def test_a_crowded_day_keeps_the_new_error_line_its_log_history_tells(tmp_path):
    """Other incidents fill the two hours before the window (Nezha injects every few minutes): the metric
    baseline is thin, but the logs recorded all along say the pod never wrote its window's error line."""
    tables = build(minutes=300, seed=4, faults=[])
    error = [(_t(m), "emailservice-1", NODE_OF["emailservice-1"], 2, 12, "failed to send email: <*>")
             for m in range(240, 244)]
    tables["log_counts"] = pl.concat([tables["log_counts"], pl.DataFrame(error, schema=LOG_COUNT_SCHEMA,
                                                                          orient="row")])
    write(tmp_path, tables)
    store.atomic_write_parquet(pl.DataFrame({"template_id": [1, 2],
                                             "template": ["request complete", "failed to send email: <*>"]}),
                               store.index_table_path(tmp_path, "log_templates"))
    others = [(_t(m), _t(m + 3)) for m in range(0, 238, 5)]
    result = query_window(tmp_path, start=_t(240) + timedelta(seconds=5), end=_t(243) + timedelta(seconds=5),
                          top_k=5, exclude_windows=others)
    metric = next(s for s in result.data_status if s.modality == "metric")
    assert metric.baseline_thin, result.data_status
    assert ranking(result)[0] == "emailservice-1", ranking(result)
    logs = [e for e in result.candidates[0].evidence if e.modality == "log"]
    assert logs and logs[0].signal == "new_template" and "failed to send email" in logs[0].text, logs


# --------------------------------------------------------------------------- no history before the window


@pytest.mark.parametrize(("minutes", "seed"), [(60, 0), (60, 1), (11, 0), (11, 1)],
                         ids=["after-0", "after-1", "peers-0", "peers-1"])
def test_window_at_the_start_of_the_data_still_answers_and_says_the_baseline_is_thin(tmp_path, minutes, seed):
    """Recording starts with the incident: minutes after it (when there are any) and the pod's peers are the
    reference; with 11 minutes of data only the peers are."""
    write(tmp_path, build(minutes=minutes, seed=seed, faults=[{"pod": "emailservice-1", "start": 0, "end": 10,
                                                               "cpu": 5.0}]))
    result = query_window(tmp_path, start=_t(0), end=_t(10), top_k=5)
    assert ranking(result) and ranking(result)[0] == "emailservice-1", ranking(result)
    metric = next(s for s in result.data_status if s.modality == "metric")
    assert metric.baseline_thin and metric.baseline_minutes == 0
    words = " ".join(result.data_gaps())
    assert "baseline" in words and "thin" in words, words


def test_a_fault_that_outlasts_its_window_at_the_start_of_the_data_is_found_by_its_peers(tmp_path):
    """The minutes after the window hold the same fault (it outlasts the declared end): they look like the
    window, so the pod's peers are the reference that tells."""
    write(tmp_path, build(minutes=60, seed=7, faults=[{"pod": "emailservice-1", "start": 0, "end": 59, "cpu": 5.0}]))
    result = query_window(tmp_path, start=_t(0), end=_t(10), top_k=5)
    assert ranking(result) and ranking(result)[0] == "emailservice-1", ranking(result)


@pytest.mark.parametrize("seed", [0, 1])
def test_no_history_and_no_peers_that_differ_the_same_hour_yesterday_decides(tmp_path, seed):
    """Recording restarts with a whole service's CPU up 3x and stops at the window's end: its pods agree with
    each other and there are no minutes after, but yesterday's same hour is in the index."""
    write(tmp_path, build(minutes=60, seed=seed + 10, faults=[], day_offset=-1), day="2025-06-05")
    everyone = [{"pod": f"emailservice-{i}", "start": 0, "end": 10, "cpu": 3.0} for i in range(3)]
    write(tmp_path, build(minutes=11, seed=seed, faults=everyone))
    result = query_window(tmp_path, start=_t(0), end=_t(10), top_k=5)
    assert ranking(result)[0] == "emailservice", [(c.component, c.score) for c in result.candidates]
    assert next(s for s in result.data_status if s.modality == "metric").baseline_thin


def test_a_full_baseline_is_not_called_thin(tmp_path):
    write(tmp_path, build(minutes=120, seed=4, faults=[CURRENT | {"start": 70, "end": 90}]))
    result = query_window(tmp_path, start=_t(70), end=_t(90), top_k=5)
    assert not any(s.baseline_thin for s in result.data_status)
    assert not any("thin" in line for line in result.data_gaps())


# --------------------------------------------------------------------------- KPI semantics


def test_all_null_kpi_columns_are_absent_not_series():
    apm = pl.DataFrame({
        "time": [_t(0), _t(1)], "object_type": ["pod"] * 2, "object_id": ["frontend-0"] * 2,
        **{k: [1.0, 2.0] for k in APM_SCHEMA if k not in ("time", "object_type", "object_id")},
    }, schema=APM_SCHEMA).with_columns(pl.lit(None, pl.Float64).alias("timeout"))
    series = metric_series(apm=apm, infra=None)
    assert "timeout" not in set(series.get_column("kpi"))
    assert series.get_column("value").null_count() == 0


def test_a_column_null_in_the_window_is_not_a_silent_component():
    """An error counter that the exporter stops filling (null) while the pod keeps reporting is absent data,
    not a pod that went silent."""
    rng = np.random.default_rng(5)
    rows = []
    for m in range(60):
        rows.append((_t(m), "emailservice-1", "apm_pod", "request", rng.normal(100, 5)))
        rows.append((_t(m), "emailservice-1", "apm_pod", "error", float(rng.poisson(2)) if m < 35 else None))
    frame = metric_series_frame(rows)
    events = score_metric_window(frame, system=SYSTEM, start=_t(35), end=_t(50), baseline_start=_t(5))
    assert events.height == 0, events


def metric_series_frame(rows) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=SERIES_SCHEMA, orient="row")


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("cpu_unit", "latency"), [(1.0, "mean"), (1000.0, "mean"), (0.001, "p99"), (1000.0, "p99")])
def test_ranking_is_scale_invariant(tmp_path, seed, cpu_unit, latency):
    """CPU in cores or millicores, latency as a mean or a heavy-tailed p99: the same pod ranks first."""
    write(tmp_path, build(minutes=120, seed=seed, cpu_unit=cpu_unit, latency=latency,
                          faults=[{"pod": "emailservice-1", "start": 70, "end": 90, "cpu": 3.0, "rrt": 2.0}]))
    result = query_window(tmp_path, start=_t(70), end=_t(90), top_k=5)
    assert ranking(result)[0] == "emailservice-1", [(c.component, c.score) for c in result.candidates]


def test_null_kpi_columns_in_raw_files_are_read_as_absent(tmp_path):
    """A KPI column that is all null, as a real null column or as the placeholder string "null", costs neither
    the file nor a fake series: the other KPIs are read and the null one is absent."""
    day = "2025-06-06"
    times = [_t(m) for m in range(30)]
    n = len(times)
    apm = pl.DataFrame({
        "time": [t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in times], "object_id": ["frontend-0"] * n,
        "object_type": ["pod"] * n, "request": [100] * n, "response": [100] * n, "rrt": [1000.0] * n,
        "rrt_max": [5000] * n, "error": [None] * n, "client_error": [0] * n, "server_error": [0] * n,
        "timeout": ["null"] * n, "error_ratio": [0.0] * n, "client_error_ratio": [0.0] * n,
        "server_error_ratio": [0.0] * n,
    })
    pod_file = tmp_path / day / "metric-parquet" / "apm" / "pod" / f"pod_frontend-0_{day}.parquet"
    pod_file.parent.mkdir(parents=True)
    apm.write_parquet(pod_file)
    labels = {c: ["null"] * n for c in ("cf", "device", "kpi_name", "kubernetes_node", "mountpoint", "namespace",
                                         "object_type", "sql_type", "type")}
    infra = pl.DataFrame({"time": [t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in times], "kpi_key": ["pod_processes"] * n,
                          **labels, "instance": ["aiops-k8s-01"] * n, "pod": ["frontend-0"] * n,
                          "pod_processes": ["null"] * n})
    infra_file = tmp_path / day / "metric-parquet" / "infra" / "infra_pod" / f"infra_pod_pod_processes_{day}.parquet"
    infra_file.parent.mkdir(parents=True)
    infra.write_parquet(infra_file)

    read_apm_rows = read_apm(tmp_path, start=times[0], end=times[-1], level="pod").frame
    read_infra_rows = read_infra(tmp_path, start=times[0], end=times[-1], families=["infra_pod"]).frame
    assert read_apm_rows.height == n and read_infra_rows.height == n
    series = metric_series(apm=read_apm_rows, infra=read_infra_rows)
    kpis = set(series.get_column("kpi"))
    assert {"request", "rrt"} <= kpis
    assert not {"error", "timeout", "pod_processes"} & kpis


def test_thin_baseline_reaches_the_prompt(tmp_path):
    from diagnose.cases import Case
    from diagnose.pipeline import prepare_case
    from index.models import Candidate, EvidenceItem, ModalityStatus
    from rca.settings import load_settings
    from tests.fakes import StaticEvidence, StaticKnowledge

    cpu = EvidenceItem(modality="metric", key="pod_cpu_usage", component="emailservice-1", signal="level",
                       text="pod_cpu_usage up 4.8x (z=50.0) on emailservice-1 from 16:00", magnitude=50.0)
    candidates = [Candidate(component="emailservice-1", level="pod", score=2.6, evidence=[cpu])]

    status = [ModalityStatus(modality="metric", state="ok", baseline_minutes=0, baseline_thin=True),
              ModalityStatus(modality="log", state="ok", baseline_minutes=30)]
    settings = load_settings(environ={}, overrides={"paths": {"runs_dir": tmp_path / "runs"}})
    prepared = prepare_case(Case(uuid="c0", description="x", start=_t(0), end=_t(10)), settings=settings,
                            evidence=StaticEvidence(candidates, data_status=status), knowledge=StaticKnowledge())
    user = prepared.prompt.messages[-1]["content"]
    assert "Gaps: metric baseline 0 min." in user  # the prompt's prefix says what a thin baseline means
    assert "log baseline" not in user


def test_no_candidates_come_with_a_reason(tmp_path):
    write(tmp_path, build(minutes=120, seed=6, faults=[]))
    nothing = query_window(tmp_path, start=_t(60 * 24), end=_t(60 * 24 + 10))  # a day the index does not hold
    assert nothing.candidates == [] and nothing.empty_reason == "the index holds no data for the window"
    quiet = query_window(tmp_path, start=_t(70), end=_t(90))
    assert quiet.candidates or quiet.empty_reason
