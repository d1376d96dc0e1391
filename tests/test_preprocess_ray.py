"""The nightly job on Ray: the same index as the local engine, named failures, retried dead workers.

Starts one local Ray cluster (2 CPUs) for the module. The dataset is two small simulated
days (tests/layout_fixtures.py), so the log chain carries Drain3 state from one day to the next.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from index import store
from index.build import run_nightly, run_partition_task
from index.engines import PartitionResult, PartitionTask
from tests.layout_fixtures import write_day
from tests.test_preprocess_engines import timed

ray = pytest.importorskip("ray")

from index.engine_ray import RayEngine  # noqa: E402  (needs ray)
from preprocess.detect_log import MINER_STATE_NAME  # noqa: E402
from rca.system import bundled_system  # noqa: E402

# HipsterShop's [traces] (the bundled system): the simulated and released spans' peer rules.
NAMING = bundled_system().trace

DAYS = ("2025-06-06", "2025-06-07")


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=128 * 1024 * 1024, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def raw_days(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("raw")
    for day in DAYS:
        write_day(data_dir, day)
    return data_dir


@pytest.fixture(scope="module")
def local_index(raw_days, tmp_path_factory):
    index_dir = tmp_path_factory.mktemp("local")
    outcomes = run_nightly(naming=NAMING, data_dir=raw_days, index_dir=index_dir)
    assert {o.status for o in outcomes} == {"written"}
    return index_dir


def _index_files(index_dir: Path) -> dict[str, bytes]:
    """Every table of the index (per partition and the template table), by relative path."""
    return {str(p.relative_to(index_dir)): p.read_bytes() for p in sorted(index_dir.rglob("*.parquet"))}


def test_ray_index_is_byte_identical_to_local(ray_cluster, raw_days, local_index, tmp_path):
    outcomes = run_nightly(naming=NAMING, data_dir=raw_days, index_dir=tmp_path, engine=RayEngine(workers=2))
    assert sorted((o.day, o.family, o.status) for o in outcomes) == sorted(
        (day, family, "written") for day in DAYS for family in store.PARTITION_FAMILIES)

    local_files, ray_files = _index_files(local_index), _index_files(tmp_path)
    day_tables = sum(len(tables) for tables in store.FAMILY_TABLES.values())
    assert len(local_files) == len(DAYS) * day_tables + 1  # + the index-wide log templates
    assert local_files.keys() == ray_files.keys()
    for name, data in local_files.items():
        assert ray_files[name] == data, name
    # The miner state the next night starts from is the same too, so template ids stay equal.
    assert (tmp_path / MINER_STATE_NAME).read_bytes() == (local_index / MINER_STATE_NAME).read_bytes()

    local_manifest, ray_manifest = store.load_manifest(local_index), store.load_manifest(tmp_path)
    assert local_manifest.partitions.keys() == ray_manifest.partitions.keys()
    for key, entry in local_manifest.partitions.items():
        assert ray_manifest.partitions[key].model_dump(exclude={"written_at"}) == \
            entry.model_dump(exclude={"written_at"}), key

    again = run_nightly(naming=NAMING, data_dir=raw_days, index_dir=tmp_path, engine=RayEngine(workers=2))
    assert {o.status for o in again} == {"skipped"}  # the manifest logic is the local job's


def test_failing_partitions_are_named_and_the_others_finish(ray_cluster, raw_days, tmp_path):
    state = tmp_path / MINER_STATE_NAME
    state.write_bytes(b"not a Drain3 state")  # a corrupt stored artefact: every log partition fails on it
    outcomes = run_nightly(naming=NAMING, data_dir=raw_days, index_dir=tmp_path, engine=RayEngine(workers=2))
    by_family: dict[str, set[str]] = {}
    for o in outcomes:
        by_family.setdefault(o.family, set()).add(o.status)
    assert by_family == {"metric": {"written"}, "trace": {"written"}, "log": {"failed"}}
    for o in outcomes:
        if o.status == "failed":
            assert len(o.errors) == 1 and str(state) in o.errors[0] and "miner state" in o.errors[0]
    assert set(store.load_manifest(tmp_path).partitions) == {
        f"{day}/{family}" for day in DAYS for family in ("metric", "trace")}

    state.unlink()  # repaired: the next run builds only what failed
    resumed = run_nightly(naming=NAMING, data_dir=raw_days, index_dir=tmp_path, engine=RayEngine(workers=2))
    assert {(o.family, o.status) for o in resumed} == {("metric", "skipped"), ("trace", "skipped"),
                                                      ("log", "written")}


def crash_once(task: PartitionTask) -> PartitionResult:
    """Work that kills its worker process the first time it sees a trace partition."""
    marker = task.index_dir.parent / f"crashed-{task.day}-{task.family}"
    if task.family == "trace" and not marker.exists():
        marker.touch()
        os._exit(1)  # the worker dies as if killed: no exception reaches Ray
    return run_partition_task(task)


def _tasks(raw_days: Path, index_dir: Path) -> list[PartitionTask]:
    index_dir.mkdir()
    return [PartitionTask(naming=NAMING, day=DAYS[0], family=family, data_dir=raw_days, index_dir=index_dir)
            for family in ("metric", "trace")]


def test_a_dead_worker_is_retried(ray_cluster, raw_days, tmp_path):
    results = list(RayEngine(workers=2, max_retries=2).run(_tasks(raw_days, tmp_path / "index"), work=crash_once))
    assert (tmp_path / f"crashed-{DAYS[0]}-trace").exists()  # it did die once
    assert sorted((r.task.family, r.failure) for r in results) == [("metric", None), ("trace", None)]
    assert store.table_path(tmp_path / "index", DAYS[0], "trace_edges").exists()


def test_a_worker_that_keeps_dying_fails_its_partition_by_name(ray_cluster, raw_days, tmp_path):
    results = {r.task.family: r for r in
               RayEngine(workers=2, max_retries=0).run(_tasks(raw_days, tmp_path / "index"), work=crash_once)}
    assert results["metric"].failure is None
    assert results["trace"].failure is not None and "worker lost" in results["trace"].failure


def test_ray_runs_the_log_chain_one_day_after_the_other(ray_cluster, tmp_path):
    tasks = [PartitionTask(naming=NAMING, day=day, family=family, data_dir=tmp_path, index_dir=tmp_path,
                           chain="log" if family == "log" else None)
             for day in ("d1", "d2", "d3", "d4") for family in ("metric", "log", "trace")]
    results = list(RayEngine(workers=2).run(tasks, work=timed))
    assert sorted(r.task.name for r in results) == sorted(t.name for t in tasks)
    chain = sorted((r for r in results if r.task.chain), key=lambda r: r.rows["started_ms"])
    assert [r.task.day for r in chain] == ["d1", "d2", "d3", "d4"]
    for before, after in zip(chain, chain[1:], strict=False):
        assert after.rows["started_ms"] >= before.rows["ended_ms"]


@pytest.mark.slow
def test_killed_ray_driver_resumes_like_the_local_job(raw_days, tmp_path):
    """SIGKILL of `rca preprocess --engine ray` mid-run: its local cluster goes with it, finished
    partitions survive, and the rerun builds only the rest."""
    import signal

    import psutil

    from tests.nightly_process import preprocess_past_first_partition

    index = tmp_path / "index"
    process = preprocess_past_first_partition("--engine", "ray", "--workers", "2", data_dir=raw_days,
                                              index_dir=index, timeout_s=300)
    cluster = psutil.Process(process.pid).children(recursive=True)
    assert cluster  # gcs_server, raylet, workers
    process.send_signal(signal.SIGKILL)
    process.wait()
    done_before = set(store.load_manifest(index).partitions)
    assert done_before and len(done_before) < len(DAYS) * len(store.PARTITION_FAMILIES)
    _, alive = psutil.wait_procs(cluster, timeout=60)
    # GCS, raylet and every worker (what could still write into the index) share the driver's
    # fate; Ray's dashboard and runtime-env agents may linger as orphans (known, see README).
    lingering = {p.pid: p.name() for p in alive if p.is_running()}
    assert set(lingering.values()) <= {"ray::DashboardAgent", "ray::RuntimeEnvAgent"}, lingering
    for proc in alive:
        proc.kill()

    outcomes = run_nightly(naming=NAMING, data_dir=raw_days, index_dir=index)
    statuses = {f"{o.day}/{o.family}": o.status for o in outcomes}
    assert all(statuses[key] == "skipped" for key in done_before)
    assert len(store.load_manifest(index).partitions) == len(DAYS) * len(store.PARTITION_FAMILIES)
    assert not list(index.rglob(".*.tmp"))
