"""Done-when of issue 26 (item 3): the simulator's telemetry, exported to each foreign format by
bench/export.py and imported back by preprocess.formats, gives the canonical frames
it came from, column for column (for the columns each format carries: docs/formats/*.md).

The simulator's spans state no language: the fixture gives some services one (an OpenTelemetry
SDK's and a Jaeger client's), so the raw ``sdk_language`` column is compared too where it travels.
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from bench import export as ex
from preprocess.formats import FormatResult, make_reader

# Service -> the language its instrumentation states, as written (telemetry.sdk.language; jaeger.version).
STATED = {"cartservice": "dotnet", "frontend": "go", "emailservice": "Python-4.8.0"}


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pl.DataFrame]:
    """Canonical frames of a two-case simulated release, as preprocess.readers reads them, some services'
    spans stating their language."""
    frames = ex.simulated_frames(tmp_path_factory.mktemp("sim"))
    for name, frame in frames.items():
        assert frame.height > 0, name
    assert frames["spans"]["sdk_language"].null_count() == frames["spans"].height  # the simulator states none
    frames["spans"] = frames["spans"].with_columns(
        pl.col("service").replace_strict(STATED, default=None, return_dtype=pl.Utf8).alias("sdk_language"))
    assert set(frames["spans"]["sdk_language"].drop_nulls().unique()) == set(STATED.values())
    return frames


def assert_same(imported: pl.DataFrame | None, expected: pl.DataFrame) -> None:
    assert imported is not None
    assert imported.schema == expected.schema
    order = list(expected.columns)
    assert_frame_equal(imported.sort(order, nulls_last=True), expected.sort(order, nulls_last=True))


def read(fmt: str, *paths: Path) -> FormatResult:
    result = make_reader(fmt).read(list(paths))
    assert result.issues == [], [str(i) for i in result.issues[:5]]
    return result


@pytest.mark.parametrize("gz", [False, True])
def test_otlp_json_traces_logs_metrics(original: dict[str, pl.DataFrame], tmp_path: Path, gz: bool) -> None:
    suffix = ".json.gz" if gz else ".json"
    traces = ex.write_otlp_json(tmp_path / f"traces{suffix}", ex.otlp_trace_requests(original["spans"]), gz=gz)
    logs = ex.write_otlp_json(tmp_path / f"logs{suffix}", ex.otlp_log_requests(original["logs"]), gz=gz)
    metrics = ex.write_otlp_json(tmp_path / f"metrics{suffix}",
                                 ex.otlp_metric_requests(apm=original["apm"], infra=original["infra"]), gz=gz)
    result = read("otlp", traces, logs, metrics)
    for name in ("spans", "logs", "apm", "infra"):
        assert_same(getattr(result, name), original[name])


@pytest.mark.parametrize("framing", ["fixed32", "varint"])
def test_otlp_protobuf(original: dict[str, pl.DataFrame], tmp_path: Path, framing: str) -> None:
    spans = original["spans"].head(3000)
    logs = original["logs"].head(3000)
    infra = original["infra"].filter(pl.col("family") == "infra_node")
    traces = ex.write_otlp_proto(tmp_path / "traces.binpb", ex.otlp_trace_requests(spans, per_request=700),
                                 framing=framing)
    log_file = ex.write_otlp_proto(tmp_path / "logs.binpb", ex.otlp_log_requests(logs), framing=framing)
    metrics = ex.write_otlp_proto(tmp_path / "metrics.binpb", ex.otlp_metric_requests(apm=None, infra=infra),
                                  framing=framing)
    result = read("otlp", traces, log_file, metrics)
    assert_same(result.spans, spans)
    assert_same(result.logs, logs)
    assert_same(result.infra, infra)


def test_otlp_protobuf_single_message(original: dict[str, pl.DataFrame], tmp_path: Path) -> None:
    spans = original["spans"].head(500)
    path = ex.write_otlp_proto(tmp_path / "one.pb", ex.otlp_trace_requests(spans), framing="none")
    assert_same(read("otlp", path).spans, spans)


def test_jaeger_json(original: dict[str, pl.DataFrame], tmp_path: Path) -> None:
    path = tmp_path / "jaeger.json"
    path.write_text(json.dumps(ex.jaeger_document(original["spans"])))
    assert_same(read("jaeger", path).spans, original["spans"])


def test_tempo_trace_documents(original: dict[str, pl.DataFrame], tmp_path: Path) -> None:
    # One trace document per line, as a script that saves Tempo's answers one by one writes them.
    path = tmp_path / "tempo.jsonl"
    path.write_text("".join(json.dumps(document) + "\n" for _, _, document in ex.tempo_traces(original["spans"])))
    assert_same(read("tempo", path).spans, original["spans"])


def test_zipkin_json(original: dict[str, pl.DataFrame], tmp_path: Path) -> None:
    path = tmp_path / "zipkin.json"
    path.write_text(json.dumps(ex.zipkin_document(original["spans"])))
    # Zipkin has no process; the stated language travels as a span tag, as OpenTelemetry's exporter writes it.
    assert_same(read("zipkin", path).spans, original["spans"])


def test_prometheus_query_range(original: dict[str, pl.DataFrame], tmp_path: Path) -> None:
    path = tmp_path / "query_range.json"
    path.write_text(json.dumps(ex.prometheus_query_range(apm=original["apm"], infra=original["infra"])))
    result = read("prometheus", path)
    assert_same(result.apm, original["apm"])
    assert_same(result.infra, original["infra"])


def test_prometheus_exposition(original: dict[str, pl.DataFrame], tmp_path: Path) -> None:
    infra = original["infra"].filter(pl.col("family") == "infra_pod").head(5000)
    path = tmp_path / "metrics.prom"
    path.write_text(ex.prometheus_exposition(infra=infra))
    assert_same(read("prometheus", path).infra, infra)


def test_loki_query_range(original: dict[str, pl.DataFrame], tmp_path: Path) -> None:
    path = tmp_path / "loki.json"
    path.write_text(json.dumps(ex.loki_query_range(original["logs"])))
    assert_same(read("loki", path).logs, original["logs"])


@pytest.mark.parametrize("nested", [True, False])
def test_ecs_ndjson(original: dict[str, pl.DataFrame], tmp_path: Path, nested: bool) -> None:
    path = tmp_path / "filebeat.ndjson"
    path.write_text("\n".join(ex.ecs_lines(original["logs"], nested=nested)) + "\n")
    assert_same(read("ecs", path).logs, original["logs"])
