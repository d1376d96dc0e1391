"""Done-when of issue 26 (item 3), end to end: the simulator's telemetry exported to OTLP JSON, and
to Jaeger + Prometheus query_range + Loki JSON, imported with ``rca import`` gives an evidence index
equal table for table to the one built from the same canonical frames written directly (the
parquet path), and the same diagnosis candidates for every case.

The TiDB families (infra_tidb / tikv / pd) are left out of both sides: the dataset writer takes
infra_pod and infra_node only (preprocess/dataset_writer.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from diagnose.cases import load_cases
from index.build import run_nightly
from index.query import query_window
from preprocess.dataset_writer import write_frames
from preprocess.importers import app
from tests import format_exporters as ex

runner = CliRunner()
WRITABLE_FAMILIES = ("infra_pod", "infra_node")


def _index(data_dir: Path, index_dir: Path) -> dict[str, pl.DataFrame]:
    outcomes = run_nightly(data_dir=data_dir, index_dir=index_dir)
    assert all(o.status == "written" for o in outcomes), [(o.day, o.family, o.status) for o in outcomes]
    return {str(p.relative_to(index_dir)): pl.read_parquet(p) for p in sorted(index_dir.rglob("*.parquet"))}


def _import(fmt: str, files: list[Path], out: Path) -> None:
    result = runner.invoke(app, [fmt, *map(str, files), "--out", str(out)])
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_imported_formats_give_the_parquet_paths_index_and_candidates(tmp_path: Path) -> None:
    frames = ex.simulated_frames(tmp_path / "sim")
    frames["infra"] = frames["infra"].filter(pl.col("family").is_in(WRITABLE_FAMILIES))
    write_frames(tmp_path / "parquet", **frames)
    expected = _index(tmp_path / "parquet", tmp_path / "index-parquet")
    assert expected

    exports = tmp_path / "exports"
    exports.mkdir()
    otlp = [ex.write_otlp_json(exports / "traces.json.gz", ex.otlp_trace_requests(frames["spans"]), gz=True),
            ex.write_otlp_json(exports / "logs.json", ex.otlp_log_requests(frames["logs"])),
            ex.write_otlp_json(exports / "metrics.json",
                               ex.otlp_metric_requests(apm=frames["apm"], infra=frames["infra"]))]
    _import("otlp", otlp, tmp_path / "otlp")
    jaeger, prometheus, loki = exports / "jaeger.json", exports / "prometheus.json", exports / "loki.json"
    jaeger.write_text(json.dumps(ex.jaeger_document(frames["spans"])))
    prometheus.write_text(json.dumps(ex.prometheus_query_range(apm=frames["apm"], infra=frames["infra"])))
    loki.write_text(json.dumps(ex.loki_query_range(frames["logs"])))
    mixed = tmp_path / "mixed"
    for fmt, path in (("jaeger", jaeger), ("prometheus", prometheus), ("loki", loki)):
        _import(fmt, [path], mixed)  # three exports of one incident merge into one dataset

    cases = load_cases(tmp_path / "sim" / "input.json")
    assert cases
    for name, data_dir in (("otlp", tmp_path / "otlp"), ("mixed", mixed)):
        tables = _index(data_dir, tmp_path / f"index-{name}")
        assert tables.keys() == expected.keys(), name
        for table, frame in expected.items():
            assert_frame_equal(tables[table], frame, check_row_order=False, check_exact=True)
        for case in cases:
            want = query_window(tmp_path / "index-parquet", start=case.start, end=case.end)
            got = query_window(tmp_path / f"index-{name}", start=case.start, end=case.end)
            assert [c.component for c in got.candidates] == [c.component for c in want.candidates], case.uuid
            assert want.candidates, case.uuid
