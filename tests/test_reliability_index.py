"""Issue 16, nightly-job side: a bad file, a second writer, a killed parent or worker, a damaged table.

Each test reproduces one defect of the issue; the comment under its name says what happened before.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from app.cli import _register
from app.cli import app as rca_app
from index import store
from index.build import run_nightly
from index.lock import IndexBusyError, writer_lock
from index.query import query_window
from preprocess.readers import read_logs
from rca.system import bundled_system
from tests.layout_fixtures import write_day

# HipsterShop's [traces] (the bundled system): the simulated and released spans' peer rules.
NAMING = bundled_system().trace

DAY = "2025-06-06"  # CST; UTC 2025-06-05 16:00 .. 2025-06-06 16:00
DAY_START = datetime(2025, 6, 5, 16, tzinfo=UTC)
CPU_FILE = f"metric-parquet/infra/infra_pod/infra_pod_pod_cpu_usage_{DAY}.parquet"


@pytest.fixture(scope="module")
def raw_day(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("raw")
    write_day(data_dir, DAY)
    return data_dir


@pytest.fixture()
def data(raw_day, tmp_path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(raw_day, target)
    return target


def _truncate(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _no_columns(path: Path) -> None:
    pl.DataFrame({"unrelated": [1, 2]}).write_parquet(path)


def _odd_time(path: Path) -> None:
    pl.read_parquet(path).with_columns(pl.lit("06/05/2025 4pm").alias("time")).write_parquet(path)


@pytest.mark.parametrize("damage", [_truncate, _empty, _no_columns, _odd_time], ids=lambda f: f.__name__[1:])
def test_bad_metric_file_costs_that_file_only(data, tmp_path, damage):
    """Defect 1: one bad infra file used to discard every infra file of the day, exit 0, silently."""
    bad = data / DAY / CPU_FILE
    damage(bad)
    outcomes = {o.family: o for o in run_nightly(naming=NAMING, data_dir=data, index_dir=tmp_path / "index", families=("metric",))}
    metric = outcomes["metric"]
    assert metric.status == "written" and metric.data_loss
    assert [f.name() for f in metric.lost_files] == [bad.name] and metric.lost_files[0].source == "infra"
    series = pl.read_parquet(store.table_path(tmp_path / "index", DAY, "metric_series"))
    infra_pod = series.filter(pl.col("kind") == "infra_pod")
    assert set(infra_pod.get_column("kpi").unique()) == {"pod_processes"}  # the other KPI file survived
    assert {"infra_node", "infra_tidb", "infra_tikv", "infra_pd"} <= set(series.get_column("kind").unique())
    placement = pl.read_parquet(store.table_path(tmp_path / "index", DAY, "metric_placement"))
    assert set(placement.filter(pl.col("pod") == "cartservice-1").get_column("node")) == {"aiops-k8s-02", "aiops-k8s-03"}
    entry = store.load_manifest(tmp_path / "index").partitions[f"{DAY}/metric"]
    assert [f.name() for f in entry.lost_files] == [bad.name]


def test_data_loss_has_its_exit_status_and_a_rerun_still_reports_it(data, tmp_path):
    """Defect 1: exit 0, and a rerun reported the partition as plainly skipped."""
    _truncate(data / DAY / CPU_FILE)
    _register()
    runner = CliRunner()
    args = ["preprocess", "--data-dir", str(data), "--index-dir", str(tmp_path / "index"), "--date", DAY]
    first = runner.invoke(rca_app, args)
    assert first.exit_code == 3, first.output
    assert "data loss" in first.output and "infra_pod_pod_cpu_usage" in first.output
    again = runner.invoke(rca_app, args)
    assert again.exit_code == 3 and "skipped" in again.output and "infra_pod_pod_cpu_usage" in again.output


def test_data_status_tells_the_model_what_is_missing(data, tmp_path):
    """Defect 1: the prompt never said data was missing; now each modality has a typed status in words."""
    _truncate(data / DAY / CPU_FILE)
    (data / DAY / "trace-parquet" / f"trace_jaeger-span_{DAY}_02-00-00.parquet").write_bytes(b"not parquet")
    index = tmp_path / "index"
    run_nightly(naming=NAMING, data_dir=data, index_dir=index)
    # CST 02:00-03:00 = UTC 18:00-19:00; the window reaches into it.
    result = query_window(index, start=DAY_START + timedelta(hours=1, minutes=40), end=DAY_START + timedelta(hours=2, minutes=20))
    status = {s.modality: s for s in result.data_status}
    assert status["log"].state == "ok"
    assert status["metric"].state == "partial" and [f.name() for f in status["metric"].lost_files] == [CPU_FILE.rsplit("/", 1)[1]]
    assert status["trace"].state == "partial"
    assert status["trace"].gaps == [(DAY_START + timedelta(hours=2), DAY_START + timedelta(hours=2, minutes=20))]
    words = result.data_gaps()
    assert "no trace data 18:00-18:20 UTC" in words[1]
    assert "1 file(s) unreadable (infra_pod_pod_cpu_usage" in words[0]


def test_second_writer_is_refused_naming_the_holder(raw_day, tmp_path):
    """Defect 3: two runs on one index both exited 0 and mixed their template ids."""
    index = tmp_path / "index"
    with writer_lock(index):
        with pytest.raises(IndexBusyError, match=rf"pid {os.getpid()}"):
            run_nightly(naming=NAMING, data_dir=raw_day, index_dir=index)
        _register()
        result = CliRunner().invoke(rca_app, ["preprocess", "--data-dir", str(raw_day), "--index-dir", str(index),
                                              "--date", DAY])
        assert result.exit_code == 4 and "--wait" in result.output and f"pid {os.getpid()}" in result.output
    assert not (index / store.MANIFEST_NAME).exists()  # the refused run wrote nothing


def test_second_writer_waits_with_wait(raw_day, tmp_path):
    index = tmp_path / "index"
    released = threading.Event()

    def hold() -> None:
        with writer_lock(index):
            time.sleep(1.0)
        released.set()

    holder = threading.Thread(target=hold)
    holder.start()
    time.sleep(0.2)
    outcomes = run_nightly(naming=NAMING, data_dir=raw_day, index_dir=index, families=("trace",), wait_for_lock=True)
    holder.join()
    assert released.is_set() and [o.status for o in outcomes] == ["written"]


def test_lock_of_a_killed_writer_does_not_block(raw_day, tmp_path):
    """A writer killed with -9 leaves the lock file, not the lock."""
    index = tmp_path / "index"
    index.mkdir()
    script = f"from index.lock import writer_lock\nimport time\nwith writer_lock({str(index)!r}):\n    time.sleep(60)\n"
    process = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": os.getcwd()})
    lock_file = index / ".writer.lock"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (lock_file.exists() and lock_file.read_bytes()):
        time.sleep(0.05)  # the holder writes its pid once it has the lock
    with pytest.raises(IndexBusyError, match=f"pid {process.pid}"):
        run_nightly(naming=NAMING, data_dir=raw_day, index_dir=index, families=("trace",))
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert [o.status for o in run_nightly(naming=NAMING, data_dir=raw_day, index_dir=index, families=("trace",))] == ["written"]


_ORPHAN_SCRIPT = textwrap.dedent("""
    import multiprocessing, os, sys, time
    from concurrent.futures import ProcessPoolExecutor
    from pathlib import Path
    from rca.lifeline import die_with_parent

    def task(folder):
        Path(folder, "worker.pid").write_text(str(os.getpid()))
        time.sleep(4)
        Path(folder, "late-write").write_text("written after the parent died")

    if __name__ == "__main__":
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(1, mp_context=context, initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
            pool.submit(task, sys.argv[1]).result()
""")


def test_worker_dies_with_its_parent(tmp_path):
    """Defect 7: after kill -9 of the parent, a worker wrote into the index 20 s later, then idled forever."""
    script = tmp_path / "parent.py"
    script.write_text(_ORPHAN_SCRIPT)
    parent = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env={**os.environ, "PYTHONPATH": os.getcwd()})
    pid_file = tmp_path / "worker.pid"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not pid_file.exists():
        time.sleep(0.05)
    worker = int(pid_file.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    time.sleep(5)
    assert not (tmp_path / "late-write").exists()
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)


def test_killed_worker_fails_its_partition_with_a_message(tmp_path):
    """Defect 4: a killed worker surfaced as a BrokenProcessPool traceback."""
    data = tmp_path / "data"
    days = ("2025-06-06", "2025-06-07", "2025-06-08")
    for day in days:
        write_day(data, day)
    killer_done = threading.Event()

    def kill_first_worker() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            children = multiprocessing.active_children()
            if children:
                time.sleep(0.5)  # let it start a partition
                os.kill(children[0].pid, signal.SIGKILL)
                break
            time.sleep(0.02)
        killer_done.set()

    killer = threading.Thread(target=kill_first_worker)
    killer.start()
    outcomes = run_nightly(naming=NAMING, data_dir=data, index_dir=tmp_path / "index", workers=2, families=("metric", "trace"))
    killer.join()
    failed = [o for o in outcomes if o.status == "failed"]
    assert failed and all("worker process died" in o.errors[0] for o in failed)
    rerun = run_nightly(naming=NAMING, data_dir=data, index_dir=tmp_path / "index", families=("metric", "trace"))
    assert {o.status for o in rerun if f"{o.day}/{o.family}" in {f"{f.day}/{f.family}" for f in failed}} == {"written"}


def test_damaged_index_table_is_named_and_rebuilt_without_force(raw_day, tmp_path):
    """Defect 4: a corrupt table gave a traceback naming no file; a rerun did not notice it."""
    index = tmp_path / "index"
    run_nightly(naming=NAMING, data_dir=raw_day, index_dir=index)
    edges = store.table_path(index, DAY, "trace_edges")
    _truncate(edges)
    with pytest.raises(store.IndexStoreError, match="trace_edges.parquet.*rca preprocess --date 2025-06-06"):
        query_window(index, start=DAY_START + timedelta(hours=2), end=DAY_START + timedelta(hours=2, minutes=20))
    outcomes = {o.family: o.status for o in run_nightly(naming=NAMING, data_dir=raw_day, index_dir=index)}
    assert outcomes == {"metric": "skipped", "log": "skipped", "trace": "written"}
    query_window(index, start=DAY_START + timedelta(hours=2), end=DAY_START + timedelta(hours=2, minutes=20))


def test_log_file_without_pod_column_is_a_lost_file_not_silent(data, tmp_path):
    """Defect 8: a log file missing k8_pod was accepted and its lines got no pod."""
    path = data / DAY / "log-parquet" / f"log_filebeat-server_{DAY}_04-00-00.parquet"
    pl.read_parquet(path).drop("k8_pod").write_parquet(path)
    (outcome,) = run_nightly(naming=NAMING, data_dir=data, index_dir=tmp_path / "index", families=("log",))
    assert [(f.name(), f.hour) for f in outcome.lost_files] == [(path.name, 4)]
    assert "k8_pod" in outcome.lost_files[0].reason
    counts = pl.read_parquet(store.table_path(tmp_path / "index", DAY, "log_counts"))
    assert counts.filter(pl.col("pod").is_null()).height == 0


def test_non_utf8_strings_cost_those_strings_only(data, tmp_path):
    """Defect 8: four non-UTF-8 strings dropped a whole hour of logs."""
    path = data / DAY / "log-parquet" / f"log_filebeat-server_{DAY}_06-00-00.parquet"
    table = pq.read_table(path)
    raw = [m.encode() for m in table.column("message").to_pylist()]
    for row in (1, 2, 3, 4):
        raw[row] = b"bad \xff\xfe bytes"
    binary = pa.array(raw, type=pa.binary())
    invalid = pa.Array.from_buffers(pa.string(), len(raw), binary.buffers())  # unchecked, as a broken exporter writes
    pq.write_table(table.set_column(table.schema.get_field_index("message"), "message", invalid), path)

    hour_start = DAY_START + timedelta(hours=6)
    result = read_logs(data, start=hour_start, end=hour_start + timedelta(minutes=59, seconds=59))
    assert result.frame.height == 60 and not result.lost
    assert "4 string value(s) not UTF-8" in result.issues[0].reason
    assert result.frame.get_column("message").str.contains("\ufffd").sum() == 4
    (outcome,) = run_nightly(naming=NAMING, data_dir=data, index_dir=tmp_path / "index", families=("log",))
    assert not outcome.data_loss and outcome.rows["lines_read"] == 24 * 60
    assert any("4 string value(s)" in note for note in outcome.notes)


def test_partial_demo_day_warns_once_per_partition(tmp_path, caplog):
    """Defect 9: a 5-hour demo day printed 44 'missing telemetry' warnings."""
    write_day(tmp_path / "data", DAY, missing_hours=tuple(range(5, 24)))
    with caplog.at_level(logging.WARNING):
        run_nightly(naming=NAMING, data_dir=tmp_path / "data", index_dir=tmp_path / "index")
    about_absent = [r for r in caplog.records if "absent" in r.getMessage() or "missing telemetry" in r.getMessage()]
    assert len(about_absent) == 2, [r.getMessage() for r in about_absent]  # one for logs, one for traces
    assert "19 expected input(s) absent" in about_absent[0].getMessage()
