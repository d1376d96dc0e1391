"""The engine seam of the nightly job (no Ray needed): choice, errors, chain order, CLI flags."""
from __future__ import annotations

import sys
import time

import pytest
from typer.testing import CliRunner

from app.cli import _register
from app.cli import app as rca_app
from index.engine_local import LocalEngine
from index.engines import DEFAULT_THREADS, PartitionResult, PartitionTask, make_engine, ordered_chains
from rca.errors import InputError
from rca.settings import load_settings
from rca.system import bundled_system

# A task's trace naming (the bundled HipsterShop's): these tests build nothing from spans.
NAMING = bundled_system().trace


def _task(tmp_path, day: str, family: str, chain: str | None = None) -> PartitionTask:
    return PartitionTask(naming=NAMING, day=day, family=family, data_dir=tmp_path, index_dir=tmp_path, chain=chain)


def timed(task: PartitionTask) -> PartitionResult:
    """Work that only records when it ran (module level: the pool pickles it by reference)."""
    started = time.time()
    time.sleep(0.05)
    return PartitionResult(task=task, rows={"started_ms": int(started * 1000), "ended_ms": int(time.time() * 1000)})


def test_make_engine_picks_and_refuses(tmp_path, monkeypatch):
    assert isinstance(make_engine("local", workers=2), LocalEngine)
    with pytest.raises(InputError, match="unknown preprocess engine 'spark'"):
        make_engine("spark", workers=1)
    with pytest.raises(InputError, match="--ray-address is only used with --engine ray"):
        make_engine("local", workers=1, ray_address="head:6379")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the distributed extra were not installed
    with pytest.raises(InputError, match=r"pip install '\.\[distributed\]'"):
        make_engine("ray", workers=2)


def test_chains_keep_their_order_and_free_tasks_stay_free(tmp_path):
    tasks = [_task(tmp_path, "d1", "metric"), _task(tmp_path, "d1", "log", "log"),
             _task(tmp_path, "d2", "metric"), _task(tmp_path, "d2", "log", "log")]
    free, chains = ordered_chains(tasks)
    assert [t.name for t in free] == ["d1/metric", "d2/metric"]
    assert {name: [t.name for t in chain] for name, chain in chains.items()} == {"log": ["d1/log", "d2/log"]}


@pytest.mark.parametrize("workers", [1, 2])
def test_local_engine_runs_every_task_and_the_chain_in_order(tmp_path, workers):
    tasks = [_task(tmp_path, day, family, "log" if family == "log" else None)
             for day in ("d1", "d2", "d3") for family in ("metric", "log", "trace")]
    results = list(LocalEngine(workers=workers).run(tasks, work=timed))
    assert sorted(r.task.name for r in results) == sorted(t.name for t in tasks)
    chain = sorted((r for r in results if r.task.chain), key=lambda r: r.rows["started_ms"])
    assert [r.task.day for r in chain] == ["d1", "d2", "d3"]
    for before, after in zip(chain, chain[1:], strict=False):
        assert after.rows["started_ms"] >= before.rows["ended_ms"]  # one at a time


def broken(task: PartitionTask) -> PartitionResult:
    """Work with a bug in one family: the engine must not swallow it."""
    if task.family == "trace":
        raise RuntimeError("a bug in the trace build")
    return timed(task)


def test_one_worker_builds_two_partitions_at_once_and_a_chain_one_at_a_time(tmp_path):
    tasks = [_task(tmp_path, day, family, "log" if family == "log" else None)
             for day in ("d1", "d2") for family in ("metric", "log", "trace")]
    results = list(LocalEngine(workers=1, threads=2).run(tasks, work=timed))
    assert sorted(r.task.name for r in results) == sorted(t.name for t in tasks)
    spans = {r.task.name: (r.rows["started_ms"], r.rows["ended_ms"]) for r in results}
    # The first two tasks of the list start together; the chain's second waits for its first.
    assert spans["d1/log"][0] < spans["d1/metric"][1] and spans["d1/metric"][0] < spans["d1/log"][1]
    assert spans["d2/log"][0] >= spans["d1/log"][1]
    # Never more than two at once.
    events = sorted([(s, 1) for s, _ in spans.values()] + [(e, -1) for _, e in spans.values()],
                    key=lambda x: (x[0], x[1]))
    running = [sum(step for _, step in events[:i + 1]) for i in range(len(events))]
    assert max(running) == 2


def test_one_thread_builds_in_the_order_given(tmp_path):
    tasks = [_task(tmp_path, "d1", family) for family in ("metric", "log", "trace")]
    results = list(LocalEngine(workers=1, threads=1).run(tasks, work=timed))
    assert [r.task.name for r in results] == ["d1/metric", "d1/log", "d1/trace"]
    starts = [r.rows["started_ms"] for r in results]
    assert all(later >= r.rows["ended_ms"] for r, later in zip(results, starts[1:], strict=False))


def test_a_bug_in_a_partition_built_on_a_thread_propagates_after_the_running_one(tmp_path):
    tasks = [_task(tmp_path, "d1", family) for family in ("trace", "metric", "log")]
    yielded: list[str] = []
    with pytest.raises(RuntimeError, match="a bug in the trace build"):
        for result in LocalEngine(workers=1, threads=2).run(tasks, work=broken):
            yielded.append(result.task.name)
    assert yielded == ["d1/metric"]  # built beside the failing one: kept; d1/log never started
    with pytest.raises(ValueError, match="threads must be >= 1"):
        LocalEngine(workers=1, threads=0)


def test_engine_settings_and_cli_flags(tmp_path, monkeypatch):
    settings = load_settings(config_path=None, environ={"RCA_PREPROCESS__ENGINE": "ray",
                                                        "RCA_PREPROCESS__RAY_ADDRESS": "head:6379"})
    assert (settings.preprocess.engine, settings.preprocess.ray_address) == ("ray", "head:6379")
    assert load_settings(config_path=None, environ={}).preprocess.engine == "local"
    assert load_settings(config_path=None, environ={}).preprocess.threads == DEFAULT_THREADS == 2
    assert load_settings(config_path=None, environ={"RCA_PREPROCESS__THREADS": "1"}).preprocess.threads == 1

    _register()
    runner = CliRunner()
    data = tmp_path / "data"
    (data / "2025-06-06").mkdir(parents=True)
    base = ["preprocess", "--data-dir", str(data), "--index-dir", str(tmp_path / "index"), "--all"]
    no_threads = runner.invoke(rca_app, [*base, "--threads", "0"])
    assert no_threads.exit_code == 2 and "--threads" in no_threads.output
    bad = runner.invoke(rca_app, [*base, "--engine", "spark"])
    assert bad.exit_code == 2 and "engine" in bad.output
    monkeypatch.setitem(sys.modules, "ray", None)
    missing = runner.invoke(rca_app, [*base, "--engine", "ray"])
    assert missing.exit_code == 2 and "needs Ray" in missing.output


def test_ctrl_c_while_two_partitions_build_keeps_both_and_starts_no_other(tmp_path, monkeypatch):
    from index import engine_local

    real_wait, calls = engine_local.wait, []

    def interrupted(futures, **kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise KeyboardInterrupt  # as SIGINT lands in the main thread while it waits
        return real_wait(futures, **kwargs)

    monkeypatch.setattr(engine_local, "wait", interrupted)
    tasks = [_task(tmp_path, "d1", family) for family in ("trace", "log", "metric")]
    yielded: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        for result in LocalEngine(workers=1, threads=2).run(tasks, work=timed):
            yielded.append(result.task.name)
    assert sorted(yielded) == ["d1/log", "d1/trace"]  # both finished and handed on; d1/metric never started
