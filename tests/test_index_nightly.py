"""Nightly job: partitions, manifest, incremental skip, resume after a kill, bad input, CLI."""
from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime

import polars as pl
import pytest
from typer.testing import CliRunner

from app.cli import _register
from app.cli import app as rca_app
from index import store
from index.build import run_nightly
from preprocess.detect_log import LOG_COUNT_SCHEMA
from preprocess.detect_trace import TraceDetector
from rca.system import bundled_system
from tests.layout_fixtures import write_day

# HipsterShop's [traces] (the bundled system): the simulated and released spans' peer rules.
NAMING = bundled_system().trace

DAY = "2025-06-06"


@pytest.fixture(scope="module")
def raw_day(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("raw")
    write_day(data_dir, DAY)
    return data_dir


def _copy_tree(src, dst):
    for root, _, files in os.walk(src):
        for name in files:
            source = os.path.join(root, name)
            target = os.path.join(dst, os.path.relpath(source, src))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(source, "rb") as a, open(target, "wb") as b:
                b.write(a.read())


def test_builds_every_partition_then_skips_unchanged(raw_day, tmp_path):
    first = run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path)
    assert sorted((o.family, o.status) for o in first) == [("log", "written"), ("metric", "written"),
                                                           ("trace", "written")]
    manifest = json.loads((tmp_path / store.MANIFEST_NAME).read_text())
    assert manifest["schema_version"] == store.SCHEMA_VERSION
    assert set(manifest["partitions"]) == {f"{DAY}/metric", f"{DAY}/log", f"{DAY}/trace"}
    for tables in store.FAMILY_TABLES.values():
        for table in tables:
            assert store.table_path(tmp_path, DAY, table).exists()
    series = pl.read_parquet(store.table_path(tmp_path, DAY, "metric_series"))
    assert {"apm_pod", "apm_service", "infra_pod", "infra_node", "infra_tidb", "infra_tikv", "infra_pd"} == \
        set(series.get_column("kind").unique())
    placement = pl.read_parquet(store.table_path(tmp_path, DAY, "metric_placement"))
    assert set(placement.filter(pl.col("pod") == "cartservice-1").get_column("node")) == {"aiops-k8s-02", "aiops-k8s-03"}
    edges = pl.read_parquet(store.table_path(tmp_path, DAY, "trace_edges"))
    assert ("frontend", "cartservice") in set(edges.select("caller", "callee").iter_rows())

    second = run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path)
    assert {o.status for o in second} == {"skipped"}
    forced = run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path, force=True, families=("trace",))
    assert [o.status for o in forced] == ["written"]
    assert pl.read_parquet(store.table_path(tmp_path, DAY, "trace_edges")).equals(edges)  # idempotent


def test_changed_input_rebuilds_only_its_partition(raw_day, tmp_path):
    data = tmp_path / "data"
    _copy_tree(raw_day, data)
    index = tmp_path / "index"
    run_nightly(naming=NAMING, data_dir=data, index_dir=index)
    hour_file = next((data / DAY / "log-parquet").glob("*_05-*.parquet"))
    frame = pl.read_parquet(hour_file)
    pl.concat([frame, frame.head(5)]).write_parquet(hour_file)
    outcomes = {o.family: o.status for o in run_nightly(naming=NAMING, data_dir=data, index_dir=index)}
    assert outcomes == {"metric": "skipped", "log": "written", "trace": "skipped"}



def test_other_trace_rules_rebuild_only_the_trace_partition(raw_day, tmp_path):
    # The same span files read by another system's [traces] name other peers: the trace
    # partition built under the old rules is stale, though no file changed.
    run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path)
    plain = NAMING.model_copy(update={"db_system": {}})
    outcomes = {o.family: o.status for o in run_nightly(naming=plain, data_dir=raw_day, index_dir=tmp_path)}
    assert outcomes == {"metric": "skipped", "log": "skipped", "trace": "written"}
    again = {o.family: o.status for o in run_nightly(naming=plain, data_dir=raw_day, index_dir=tmp_path)}
    assert again == {"metric": "skipped", "log": "skipped", "trace": "skipped"}


def test_other_detector_knobs_rebuild_only_their_partition(raw_day, tmp_path):
    from preprocess.detect_log import LogParams

    run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path)
    coarser = {"log": LogParams(sim_th=0.3)}  # Drain's similarity: other templates
    outcomes = {o.family: o.status for o in run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path,
                                                        detector_params=coarser)}
    assert outcomes == {"metric": "skipped", "log": "written", "trace": "skipped"}
    default = {o.family: o.status for o in run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path,
                                                       detector_params={"log": LogParams()})}
    assert default["log"] == "written"  # back to the defaults: rebuilt again


def test_other_build_code_rebuilds_every_partition(raw_day, tmp_path, monkeypatch):
    # An upgraded package computes the tables by other code although no file or knob changed:
    # what the old code built is stale (index.code_digest), not served to the new query side.
    import index.build

    run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path)
    monkeypatch.setattr(index.build, "code_digest", lambda roots: "another version")
    outcomes = {o.family: o.status for o in run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path)}
    assert outcomes == {"metric": "written", "log": "written", "trace": "written"}
    again = {o.family: o.status for o in run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path)}
    assert again == {"metric": "skipped", "log": "skipped", "trace": "skipped"}


def test_older_schema_version_is_rebuilt_not_misread(raw_day, tmp_path):
    run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path)
    counts_path = store.table_path(tmp_path, DAY, "log_counts")
    pl.read_parquet(counts_path).drop("example").write_parquet(counts_path)  # as schema version 1 wrote it
    manifest = json.loads((tmp_path / store.MANIFEST_NAME).read_text())
    (tmp_path / store.MANIFEST_NAME).write_text(json.dumps({**manifest, "schema_version": 1}))
    with pytest.raises(store.IndexStoreError, match="schema version 1"):
        store.load_manifest(tmp_path)  # what a query does
    frame, missing = store.load_table(tmp_path, table="log_counts", start=datetime(2025, 6, 5, 16, tzinfo=UTC),
                                      end=datetime(2025, 6, 6, 15, 59, tzinfo=UTC), schema=LOG_COUNT_SCHEMA)
    assert frame.height == 0 and missing == [f"{DAY}/log_counts"]

    assert {o.status for o in run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path)} == {"written"}
    assert store.load_manifest(tmp_path).schema_version == store.SCHEMA_VERSION
    assert "example" in pl.read_parquet(counts_path).columns

def test_kill_during_a_partition_keeps_finished_ones(raw_day, tmp_path, monkeypatch):
    def killed(self, chunks, **_):
        next(iter(chunks))
        raise KeyboardInterrupt  # stands for SIGKILL/Ctrl-C in the middle of the trace partition

    monkeypatch.setattr(TraceDetector, "build", killed)
    finished: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path, on_partition_done=finished.append)
    # Partitions build two at a time: whichever finished (the one built beside the trace
    # partition, at least) is kept; none starts after the interrupt.
    kept = {key.split("/")[1] for key in store.load_manifest(tmp_path).partitions}
    assert kept and "trace" not in kept and kept == {line.split()[1] for line in finished}
    assert not list(tmp_path.rglob("*.tmp"))
    monkeypatch.undo()
    resumed = {o.family: o.status for o in run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path)}
    assert resumed == {f: "skipped" if f in kept else "written" for f in ("metric", "log", "trace")}


def test_unreadable_file_is_named_and_the_rest_continues(raw_day, tmp_path):
    data = tmp_path / "data"
    _copy_tree(raw_day, data)
    bad = next((data / DAY / "trace-parquet").glob("*_07-*.parquet"))
    bad.write_bytes(b"this is not parquet")
    outcomes = {o.family: o for o in run_nightly(naming=NAMING, data_dir=data, index_dir=tmp_path / "index")}
    assert {f: o.status for f, o in outcomes.items()} == {"metric": "written", "log": "written", "trace": "written"}
    assert len(outcomes["trace"].errors) == 1 and bad.name in outcomes["trace"].errors[0]
    assert outcomes["trace"].rows["trace_edges"] > 0
    entry = store.load_manifest(tmp_path / "index").partitions[f"{DAY}/trace"]
    assert [lost.name() for lost in entry.lost_files] == [bad.name] and entry.lost_files[0].hour == 7


def test_unknown_day_is_a_clear_error(raw_day, tmp_path):
    with pytest.raises(FileNotFoundError, match="2030-01-01"):
        run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path, days=["2030-01-01"])


def test_cli_runs_and_prints_summary(raw_day, tmp_path):
    _register()
    runner = CliRunner()
    result = runner.invoke(rca_app, ["preprocess", "--data-dir", str(raw_day), "--index-dir", str(tmp_path), "--all"])
    assert result.exit_code == 0, result.output
    assert "preprocess summary" in result.output and "written" in result.output
    assert re.search(r"\d+\.\d s in all", result.output), result.output  # the run's wall time, apart from each partition's
    again = runner.invoke(rca_app, ["preprocess", "--data-dir", str(raw_day), "--index-dir", str(tmp_path),
                                    "--date", DAY])
    assert again.exit_code == 0 and "skipped" in again.output
    neither = runner.invoke(rca_app, ["preprocess", "--data-dir", str(raw_day), "--index-dir", str(tmp_path)])
    assert neither.exit_code == 2


@pytest.mark.parametrize("how", [{"threads": 2}, {"workers": 2}], ids=["two-threads", "worker-processes"])
def test_partitions_built_at_once_give_the_same_index(raw_day, tmp_path, how):
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    run_nightly(naming=NAMING, data_dir=raw_day, index_dir=serial, threads=1)
    outcomes = run_nightly(naming=NAMING, data_dir=raw_day, index_dir=parallel, **how)
    assert {o.status for o in outcomes} == {"written"}
    for tables in store.FAMILY_TABLES.values():
        for table in tables:
            assert pl.read_parquet(store.table_path(parallel, DAY, table)).equals(
                pl.read_parquet(store.table_path(serial, DAY, table))), table
    # The manifest lists partitions in key order, whichever finished first.
    written = list(json.loads((parallel / store.MANIFEST_NAME).read_text())["partitions"])
    assert written == sorted(store.load_manifest(serial).partitions)


@pytest.mark.slow
def test_sigkill_mid_run_then_resume(tmp_path):
    """A real kill of the CLI process: finished partitions survive, the rerun completes the rest."""
    import signal

    from tests.nightly_process import preprocess_past_first_partition

    data = tmp_path / "data"
    for day in ("2025-06-06", "2025-06-07", "2025-06-08"):
        write_day(data, day)
    index = tmp_path / "index"
    process = preprocess_past_first_partition(data_dir=data, index_dir=index, timeout_s=120)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done_before = set(store.load_manifest(index).partitions)
    assert done_before  # at least one partition finished before the kill

    outcomes = run_nightly(naming=NAMING, data_dir=data, index_dir=index)
    statuses = {f"{o.day}/{o.family}": o.status for o in outcomes}
    assert all(statuses[key] == "skipped" for key in done_before)
    assert len(store.load_manifest(index).partitions) == 9
    assert not list(index.rglob(".*.tmp"))


def test_the_nightly_job_does_not_import_what_only_scoring_needs():
    """ruptures brings scipy.stats (~0.8 s of `rca preprocess`'s start): only the scoring of a window uses it."""
    import subprocess
    import sys

    probe = ("import sys\nimport index.cli, index.build\n"
             "print(sorted(m for m in ('ruptures', 'scipy', 'statsmodels', 'chromadb') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_nightly_job_does_not_import_pandas(tmp_path):
    """pyarrow's ``to_numpy`` and ``pa.array`` import pandas on first use (~0.3 s of `rca preprocess`,
    with the import lock held): the readers go between arrow and numpy by the arrays' buffers."""
    import subprocess
    import sys

    write_day(tmp_path / "data", DAY)
    probe = ("import sys\nfrom pathlib import Path\nfrom index.build import run_nightly\n"
             "from rca.system import bundled_system\n"
             f"outcomes = run_nightly(naming=bundled_system().trace, data_dir=Path({str(tmp_path / 'data')!r}), index_dir=Path({str(tmp_path / 'index')!r}))\n"
             "print(sorted(o.status for o in outcomes), 'pandas' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "['written', 'written', 'written'] False"


def test_newest_telemetry_is_the_newest_minute_any_table_holds(raw_day, tmp_path):
    """What `--since` counts back from and `--listen` waits for: None before the first partition."""
    from index.status import newest_telemetry

    assert newest_telemetry(tmp_path) is None
    run_nightly(naming=NAMING, data_dir=raw_day, index_dir=tmp_path)
    newest = max(pl.read_parquet(table).get_column("time").max()
                 for table in store.day_path(tmp_path, DAY).glob("*.parquet")
                 if "time" in pl.read_parquet_schema(table))
    expected = newest if newest.tzinfo is not None else newest.replace(tzinfo=UTC)
    assert newest_telemetry(tmp_path) == expected
