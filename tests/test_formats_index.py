"""Done-when of issue 26, end to end: the simulator's own parquet release, indexed directly with
``rca preprocess``, and the same telemetry exported to foreign formats and imported with
``rca import`` give evidence indexes equal table for table, and the same diagnosis candidates
for every case.

The reference is the release exactly as ``rca simulate`` writes it (not frames re-written by
preprocess.dataset_writer). Its telemetry is read back with preprocess.readers (canonical frames),
exported by bench/export.py (written from the formats' specifications) and imported:

* OTLP/JSON (the Collector file exporter's one request per line): traces, logs, and metrics,
  APM and every infra family including the TiDB ones (infra_tidb / infra_tikv / infra_pd): a
  metric data point carries its ``family`` as an attribute (docs/formats/prometheus.md, the
  mapping OTLP shares), so nothing of the release is left out;
* Jaeger + Prometheus query_range + Loki, three exports merged into one dataset (Prometheus
  carries the TiDB families the same way, by the ``family`` label);
* the dataset writer itself (what every importer goes through), all families.

Every index table is compared after sorting on its keys (every column that is not a float),
floats with a relative tolerance of 1e-9: nothing in these formats is inherently lossy for the
index (OTLP/JSON writes nanoseconds and shortest-round-trip doubles, Prometheus repr() floats,
the release keeps microseconds), so the tolerance only guards against summation order.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from app.cli import app as rca_app
from bench import export as ex
from diagnose.cases import Case, load_cases
from index.build import run_nightly
from index.query import query_window
from preprocess.dataset_writer import write_frames
from preprocess.importers import app
from rca.system import bundled_system

# HipsterShop's [traces] (the bundled system): the simulated and released spans' peer rules.
NAMING = bundled_system().trace

runner = CliRunner()
TIDB_FAMILIES = ("infra_tidb", "infra_tikv", "infra_pd")


@dataclass(frozen=True)
class Release:
    root: Path  # the simulator's output, as written
    index: Path  # its evidence index, built by ``rca preprocess``
    tables: dict[str, pl.DataFrame]
    frames: dict[str, pl.DataFrame]  # its telemetry read back with preprocess.readers
    cases: list[Case]


def _tables(index_dir: Path) -> dict[str, pl.DataFrame]:
    return {str(p.relative_to(index_dir)): pl.read_parquet(p) for p in sorted(index_dir.rglob("*.parquet"))}


def _index(data_dir: Path, index_dir: Path) -> dict[str, pl.DataFrame]:
    outcomes = run_nightly(naming=NAMING, data_dir=data_dir, index_dir=index_dir)
    assert all(o.status == "written" and not o.data_loss for o in outcomes), \
        [(o.day, o.family, o.status, o.errors, o.lost_files) for o in outcomes]
    return _tables(index_dir)


def _import(fmt: str, files: list[Path], out: Path) -> None:
    result = runner.invoke(app, [fmt, *map(str, files), "--out", str(out)])
    assert result.exit_code == 0, result.output


def _sorted_on_keys(frame: pl.DataFrame) -> pl.DataFrame:
    keys = [name for name, dtype in frame.schema.items() if not dtype.is_float()]
    return frame.sort(keys, nulls_last=True)


def _assert_same_index(name: str, release: Release, index_dir: Path, tables: dict[str, pl.DataFrame]) -> None:
    assert tables.keys() == release.tables.keys(), name
    for table, want in release.tables.items():
        got = tables[table]
        assert got.height == want.height, (name, table, got.height, want.height)
        assert_frame_equal(_sorted_on_keys(got), _sorted_on_keys(want), check_exact=False,
                           rel_tol=1e-9, abs_tol=1e-12)
    for case in release.cases:
        want_q = query_window(release.index, start=case.start, end=case.end)
        got_q = query_window(index_dir, start=case.start, end=case.end)
        assert want_q.candidates, case.uuid
        assert [(c.component, c.level) for c in got_q.candidates] == \
               [(c.component, c.level) for c in want_q.candidates], (name, case.uuid)
        assert [c.score for c in got_q.candidates] == pytest.approx([c.score for c in want_q.candidates],
                                                                    rel=1e-9), (name, case.uuid)


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """A small simulated release, indexed as it was written (``rca preprocess --all``)."""
    base = tmp_path_factory.mktemp("release")
    frames = ex.simulated_frames(base / "sim")
    index_dir = base / "index"
    result = runner.invoke(rca_app, ["preprocess", "--data-dir", str(base / "sim"), "--index-dir", str(index_dir),
                                     "--all"])
    assert result.exit_code == 0, result.output
    tables = _tables(index_dir)
    cases = load_cases(base / "sim" / "input.json")
    assert tables and cases
    # the release holds every infra family, the TiDB ones included, and the index carries them
    assert set(TIDB_FAMILIES) <= set(frames["infra"]["family"].unique())
    series = next(f for name, f in tables.items() if name.endswith("metric_series.parquet"))
    assert set(TIDB_FAMILIES) <= set(series["kind"].unique())
    return Release(root=base / "sim", index=index_dir, tables=tables, frames=frames, cases=cases)


@pytest.mark.slow
def test_otlp_import_of_the_simulators_release_gives_its_index_and_candidates(release: Release,
                                                                              tmp_path: Path) -> None:
    frames = release.frames
    exports = tmp_path / "exports"
    exports.mkdir()
    otlp = [ex.write_otlp_json(exports / "traces.json.gz", ex.otlp_trace_requests(frames["spans"]), gz=True),
            ex.write_otlp_json(exports / "logs.json", ex.otlp_log_requests(frames["logs"])),
            ex.write_otlp_json(exports / "metrics.json",
                               ex.otlp_metric_requests(apm=frames["apm"], infra=frames["infra"]))]
    _import("otlp", otlp, tmp_path / "otlp")
    tables = _index(tmp_path / "otlp", tmp_path / "index-otlp")
    _assert_same_index("otlp", release, tmp_path / "index-otlp", tables)


@pytest.mark.slow
def test_written_frames_and_the_mixed_imports_give_the_releases_index_and_candidates(release: Release,
                                                                                     tmp_path: Path) -> None:
    frames = release.frames
    write_frames(tmp_path / "written", **frames)  # every family, the TiDB ones included
    exports = tmp_path / "exports"
    exports.mkdir()
    jaeger, prometheus, loki = exports / "jaeger.json", exports / "prometheus.json", exports / "loki.json"
    jaeger.write_text(json.dumps(ex.jaeger_document(frames["spans"])))
    prometheus.write_text(json.dumps(ex.prometheus_query_range(apm=frames["apm"], infra=frames["infra"])))
    loki.write_text(json.dumps(ex.loki_query_range(frames["logs"])))
    mixed = tmp_path / "mixed"
    for fmt, path in (("jaeger", jaeger), ("prometheus", prometheus), ("loki", loki)):
        _import(fmt, [path], mixed)  # three exports of one incident merge into one dataset

    for name, data_dir in (("written", tmp_path / "written"), ("mixed", mixed)):
        tables = _index(data_dir, tmp_path / f"index-{name}")
        _assert_same_index(name, release, tmp_path / f"index-{name}", tables)
