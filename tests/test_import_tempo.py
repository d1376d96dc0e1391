"""``rca import tempo``: Grafana Tempo's trace JSON from files, or pulled from its API with ``--url``.

The fake Tempo on 127.0.0.1 (tests/fake_http.py) keeps Tempo's rules that the pull depends on:
``/api/search`` finds at most ``limit`` trace ids of a range given in whole seconds, and gives ids
only; ``/api/traces/<id>`` gives one trace as ``{"batches": [...]}`` with base64 ids (protobuf's JSON),
or 404 for an id it does not hold. The dataset the command wrote is read back with
``preprocess.readers``; a rerun must ask the server nothing.
"""
from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from app.cli import app
from preprocess.formats.pull_sources import configured_sources
from preprocess.readers import read_traces
from rca.settings import SettingsError, load_settings
from rca.system import bundled_system
from tests.fake_http import Answer, FakeServer

pytestmark = pytest.mark.usefixtures("fast_retries")
runner = CliRunner()
T0 = datetime(2025, 6, 5, 0, 0, tzinfo=UTC)
END = T0 + timedelta(hours=2)


def _b64(hex_id: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_id)).decode()


def _attribute(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def tempo_trace(number: int, start: datetime, *, ids: str = "base64") -> dict[str, Any]:
    """One trace as Tempo's ``/api/traces/<id>`` gives it: frontend's server span, its client call to cart,
    cart's server span; ids in base64 (what Tempo writes) or hex (OTLP/JSON)."""
    trace_id = f"{number + 1:032x}"
    root, call, served = (f"{3 * number + k:016x}" for k in (1, 2, 3))
    spell = _b64 if ids == "base64" else (lambda value: value)
    at = int(start.timestamp()) * 10**9

    def span(span_id: str, parent: str | None, name: str, kind: str, begin: int, length: int) -> dict[str, Any]:
        return {"traceId": spell(trace_id), "spanId": spell(span_id), **({"parentSpanId": spell(parent)} if parent else {}),
                "name": name, "kind": kind, "startTimeUnixNano": str(at + begin),
                "endTimeUnixNano": str(at + begin + length), "attributes": [], "status": {}}

    def batch(service: str, pod: str, spans: list[dict[str, Any]]) -> dict[str, Any]:
        return {"resource": {"attributes": [_attribute("service.name", service), _attribute("k8s.pod.name", pod)]},
                "scopeSpans": [{"scope": {"name": "test"}, "spans": spans}]}

    return {"trace_id": trace_id, "start": start, "batches": [
        batch("frontend", "frontend-0", [span(root, None, "GET /", "SPAN_KIND_SERVER", 0, 900_000),
                                         span(call, root, "GetCart", "SPAN_KIND_CLIENT", 100_000, 600_000)]),
        batch("cart", "cart-0", [span(served, call, "GetCart", "SPAN_KIND_SERVER", 150_000, 500_000)])]}


def tempo_with(traces: list[dict[str, Any]], *, gone: frozenset[str] = frozenset()) -> Answer:
    """Tempo's search and trace-by-id APIs over ``traces``; the ids in ``gone`` are found by the search only."""
    by_id = {trace["trace_id"]: trace for trace in traces}

    def tempo(path: str, params: dict[str, str]) -> tuple[int, Any]:
        if path == "/api/search":
            start, end, limit = int(params["start"]), int(params["end"]), int(params.get("limit", 20))
            assert params["q"] and params["spss"] == "1"
            found = [t for t in traces if start <= t["start"].timestamp() < end]
            return 200, {"traces": [{"traceID": t["trace_id"].lstrip("0"), "rootServiceName": "frontend",
                                     "startTimeUnixNano": str(int(t["start"].timestamp()) * 10**9)}
                                    for t in found[:limit]], "metrics": {"inspectedTraces": len(found)}}
        if path.startswith("/api/traces/"):
            trace_id = path.removeprefix("/api/traces/").rjust(32, "0")
            if trace_id in gone or trace_id not in by_id:
                return 404, "trace not found"
            return 200, {"batches": by_id[trace_id]["batches"]}
        return 404, "404 page not found"
    return tempo


def _spans(out: Path) -> list[tuple[str, str, str, str | None]]:
    frame = read_traces(out, start=T0, end=END, naming=bundled_system().trace).frame
    return sorted(zip(frame["trace_id"].to_list(), frame["span_id"].to_list(), frame["service"].to_list(),
                      frame["parent_span_id"].to_list()))


def _expected(traces: list[dict[str, Any]]) -> list[tuple[str, str, str, str | None]]:
    rows = []
    for trace in traces:
        number = int(trace["trace_id"], 16) - 1
        root, call, served = (f"{3 * number + k:016x}" for k in (1, 2, 3))
        rows += [(trace["trace_id"], root, "frontend", None), (trace["trace_id"], call, "frontend", root),
                 (trace["trace_id"], served, "cart", call)]
    return sorted(rows)


def _pull(server: FakeServer, out: Path, *more: str) -> Any:
    return runner.invoke(app, ["import", "tempo", "--url", server.url, "--start", "2025-06-05T00:00:00Z",
                               "--end", "2025-06-05T02:00:00Z", "--limit", "5", "--out", str(out), *more])


def test_tempo_splits_full_searches_fetches_each_trace_once_and_a_rerun_asks_nothing(
        serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    # Three traces in the first hour; twelve within ten minutes of the second: its search comes back full.
    starts = [T0 + timedelta(minutes=m) for m in (5, 20, 40)]
    starts += [T0 + timedelta(hours=1, minutes=30, seconds=50 * s) for s in range(12)]
    traces = [tempo_trace(n, at) for n, at in enumerate(starts)]
    server = serve(tempo_with(traces))
    out = tmp_path / "data"
    result = _pull(server, out)
    assert result.exit_code == 0, result.output
    assert _spans(out) == _expected(traces) and len(traces) * 3 == 45
    searches = [r for r in server.requests if r.path == "/api/search"]
    fetches = [r for r in server.requests if r.path.startswith("/api/traces/")]
    assert len(searches) > 2 and "split" in result.output  # more than the two hourly chunks
    assert sorted(r.path for r in fetches) == sorted(f"/api/traces/{t['trace_id'].lstrip('0')}" for t in traces)
    for fetch in fetches:  # the trace is looked up around its chunk, in whole seconds
        assert int(fetch.params["start"]) < int(fetch.params["end"])

    seen = len(server.requests)
    again = _pull(server, out)
    assert again.exit_code == 0, again.output
    assert len(server.requests) == seen  # every chunk on disk: not one request
    assert _spans(out) == _expected(traces)


def test_a_trace_the_search_finds_but_tempo_cannot_give_is_a_named_loss(serve: Callable[[Answer], FakeServer],
                                                                         tmp_path: Path) -> None:
    traces = [tempo_trace(n, T0 + timedelta(minutes=10 + n)) for n in range(3)]
    server = serve(tempo_with(traces, gone=frozenset({traces[1]["trace_id"]})))
    out = tmp_path / "data"
    result = _pull(server, out)
    assert result.exit_code == 3, result.output  # finished, with data loss
    assert "LOST" in result.output and "not found by id" in result.output
    assert traces[1]["trace_id"].lstrip("0") in result.output
    assert _spans(out) == _expected([traces[0], traces[2]])


def test_a_full_search_at_the_smallest_chunk_is_a_loss(serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    burst = T0 + timedelta(minutes=10)
    server = serve(tempo_with([tempo_trace(n, burst) for n in range(6)]))
    result = _pull(server, tmp_path / "data")
    assert result.exit_code == 3, result.output
    assert "the smallest chunk" in result.output and "raise --limit" in result.output


def test_a_search_answer_without_trace_ids_is_an_error_naming_the_request(serve: Callable[[Answer], FakeServer],
                                                                          tmp_path: Path) -> None:
    server = serve(lambda path, params: (200, {"traces": [{"traceID": "not-hex"}]}))
    result = _pull(server, tmp_path / "data")
    assert result.exit_code == 2, result.output
    assert "/api/search" in result.output and "not a hexadecimal trace id" in result.output


@pytest.mark.parametrize("envelope", ["batches", "v2", "otlp"])
@pytest.mark.parametrize("ids", ["base64", "hex"])
def test_trace_files_are_read_in_each_envelope(tmp_path: Path, envelope: str, ids: str) -> None:
    trace = tempo_trace(0, T0 + timedelta(minutes=3), ids=ids)
    document = {"batches": {"batches": trace["batches"]},
                "v2": {"trace": {"resourceSpans": trace["batches"]}, "status": "complete"},
                "otlp": {"resourceSpans": trace["batches"]}}[envelope]
    export = tmp_path / "trace.json"
    export.write_text(json.dumps(document, indent=2), encoding="utf-8")
    out = tmp_path / "data"
    result = runner.invoke(app, ["import", "tempo", str(export), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert _spans(out) == _expected([trace])


def test_a_file_that_is_no_trace_is_named_with_its_field(tmp_path: Path) -> None:
    export = tmp_path / "search.json"
    export.write_text(json.dumps({"traces": [{"traceID": "ab"}]}), encoding="utf-8")
    result = runner.invoke(app, ["import", "tempo", str(export), "--out", str(tmp_path / "data")])
    assert result.exit_code in (2, 3), result.output
    assert "search.json" in result.output and "resourceSpans" in result.output


def test_sources_tempo_is_configured_and_checked(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[sources.tempo]\nurl = "http://tempo:3200"\nquery = \'{ resource.k8s.namespace.name = "shop" }\'\n'
                      "limit = 200\n", encoding="utf-8")
    settings = load_settings(config_path=config)
    assert settings.sources.configured() == ["tempo"]
    (source,) = configured_sources(settings.sources, start=T0, end=END)
    assert (source.fmt, source.url, source.option) == ("tempo", "http://tempo:3200", "sources.tempo.url")
    config.write_text('[sources.tempo]\nurl = "http://tempo:3200"\nlimit = 0\n', encoding="utf-8")
    with pytest.raises(SettingsError, match="sources.tempo.limit"):
        load_settings(config_path=config)


def test_a_simulated_release_pulled_from_tempo_is_the_release(serve: Callable[[Answer], FakeServer],
                                                               tmp_path: Path) -> None:
    """Every span of a simulated two-case release, served by the fake Tempo and pulled back whole (the search
    split wherever it came back full), reads as the release's own spans."""
    from polars.testing import assert_frame_equal

    from bench.export import simulated_frames, tempo_traces

    spans = simulated_frames(tmp_path / "sim")["spans"]
    served = tempo_traces(spans)
    traces = [{"trace_id": trace_id, "start": datetime.fromtimestamp(start_ns // 10**9, UTC), "batches": doc["batches"]}
              for trace_id, start_ns, doc in served]
    server = serve(tempo_with(traces))
    first, last = traces[0]["start"], traces[-1]["start"] + timedelta(seconds=1)
    out = tmp_path / "pulled"
    result = runner.invoke(app, ["import", "tempo", "--url", server.url, "--start", first.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                 "--end", last.strftime("%Y-%m-%dT%H:%M:%SZ"), "--limit", "200", "--out", str(out)])
    assert result.exit_code == 0, result.output
    pulled = read_traces(out, start=first - timedelta(minutes=1), end=last + timedelta(hours=1),
                         naming=bundled_system().trace).frame
    released = read_traces(tmp_path / "sim", start=first - timedelta(minutes=1), end=last + timedelta(hours=1),
                           naming=bundled_system().trace).frame
    order = list(released.columns)
    assert pulled.height == released.height == spans.height
    assert_frame_equal(pulled.select(order).sort(order, nulls_last=True), released.sort(order, nulls_last=True))
