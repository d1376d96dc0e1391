"""``rca import zipkin --url``: whole traces pulled from Zipkin's ``/api/v2/traces``.

The fake Zipkin on 127.0.0.1 (tests/fake_http.py) keeps the server's rules the pull depends on
(zipkin2 ``QueryRequest``): ``endTs`` and ``lookback`` in milliseconds, both ends inclusive; a
trace is in the range when its root span's start is (its first span's, without a root); at most
``limit`` traces, the newest first; ``serviceName`` keeps the traces with a span of that service;
a trace comes whole, every span, wherever they start. The dataset the command wrote is read back
with ``preprocess.readers``; a rerun must ask the server nothing.
"""
from __future__ import annotations

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


def _us(instant: datetime) -> int:
    return int(instant.timestamp()) * 1_000_000 + instant.microsecond


def zipkin_trace(number: int, start: datetime, *, lasts: timedelta = timedelta(milliseconds=900),
                 service: str = "cart") -> list[dict[str, Any]]:
    """frontend's server span, its client call, and ``service``'s server span, which begins ``lasts`` after
    the root less a tenth of a second (so a long trace has a span starting long after its root)."""
    trace_id = f"{number + 1:032x}"
    root, call, served = (f"{3 * number + k:016x}" for k in (1, 2, 3))
    at, length = _us(start), lasts // timedelta(microseconds=1)
    late = max(0, length - 100_000)

    def span(span_id: str, parent: str | None, name: str, kind: str, who: str, begin: int,
             duration: int) -> dict[str, Any]:
        return {"traceId": trace_id, "id": span_id, **({"parentId": parent} if parent else {}), "name": name,
                "kind": kind, "timestamp": at + begin, "duration": duration,
                "localEndpoint": {"serviceName": who}, "tags": {"k8s.pod.name": f"{who}-0"}}

    return [span(root, None, "get /", "SERVER", "frontend", 0, length + 50_000),
            span(call, root, "getcart", "CLIENT", "frontend", late - 10_000, 40_000),
            span(served, call, "getcart", "SERVER", service, late, 20_000)]


def _began(trace: list[dict[str, Any]]) -> int:
    """Zipkin's instant of a trace (``QueryRequest.test``): its root's start, else its first span's."""
    roots = [span["timestamp"] for span in trace if "parentId" not in span]
    return roots[0] if roots else min(span["timestamp"] for span in trace)


def zipkin_with(traces: list[list[dict[str, Any]]]) -> Answer:
    def zipkin(path: str, params: dict[str, str]) -> tuple[int, Any]:
        if path != "/api/v2/traces":
            return 404, {"status": 404, "error": "Not Found", "path": path}
        end_ms, lookback_ms, limit = int(params["endTs"]), int(params["lookback"]), int(params.get("limit", 10))
        service = params.get("serviceName")
        found = [t for t in traces if (end_ms - lookback_ms) * 1000 <= _began(t) <= end_ms * 1000
                 and (service is None or any(s["localEndpoint"]["serviceName"] == service for s in t))]
        found.sort(key=_began, reverse=True)  # the newest first: nearest to endTs
        return 200, found[:limit]
    return zipkin


def _spans(out: Path) -> list[tuple[str, str, str]]:
    frame = read_traces(out, start=T0 - timedelta(hours=1), end=END + timedelta(hours=1),
                        naming=bundled_system().trace).frame
    return sorted(zip(frame["trace_id"].to_list(), frame["span_id"].to_list(), frame["service"].to_list()))


def _expected(traces: list[list[dict[str, Any]]]) -> list[tuple[str, str, str]]:
    return sorted((s["traceId"], s["id"], s["localEndpoint"]["serviceName"]) for t in traces for s in t)


def _pull(server: FakeServer, out: Path, *more: str) -> Any:
    return runner.invoke(app, ["import", "zipkin", "--url", server.url, "--start", "2025-06-05T00:00:00Z",
                               "--end", "2025-06-05T02:00:00Z", "--limit", "5", "--out", str(out), *more])


def test_zipkin_splits_full_chunks_keeps_border_traces_whole_and_a_rerun_asks_nothing(
        serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    # Three traces in the first hour, one of them begun a second before its end and lasting two minutes;
    # twelve within ten minutes of the second hour: its chunk comes back full and is halved.
    traces = [zipkin_trace(0, T0 + timedelta(minutes=5)), zipkin_trace(1, T0 + timedelta(minutes=30)),
              zipkin_trace(2, T0 + timedelta(minutes=59, seconds=59), lasts=timedelta(minutes=2))]
    traces += [zipkin_trace(3 + n, T0 + timedelta(hours=1, minutes=30, seconds=50 * n)) for n in range(12)]
    server = serve(zipkin_with(traces))
    out = tmp_path / "data"
    result = _pull(server, out)
    assert result.exit_code == 0, result.output
    assert _spans(out) == _expected(traces) and len(_spans(out)) == 45
    asked = [(int(r.params["endTs"]) - int(r.params["lookback"]), int(r.params["endTs"])) for r in server.requests]
    assert len(asked) > 2 and "split" in result.output  # more than the two hourly chunks
    assert asked[0] == (_us(T0) // 1000, _us(T0 + timedelta(hours=1)) // 1000 - 1)  # [first, stop - 1 ms]
    assert all("serviceName" not in r.params for r in server.requests)  # every trace, whatever its services

    seen = len(server.requests)
    again = _pull(server, out)
    assert again.exit_code == 0, again.output
    assert len(server.requests) == seen  # every chunk on disk: not one request
    assert _spans(out) == _expected(traces)


def test_services_are_asked_each_on_its_own(serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    traces = [zipkin_trace(n, T0 + timedelta(minutes=10 + n), service=("cart", "email", "ads")[n]) for n in range(3)]
    server = serve(zipkin_with(traces))
    out = tmp_path / "data"
    result = _pull(server, out, "--service", "cart", "--service", "email")
    assert result.exit_code == 0, result.output
    assert _spans(out) == _expected(traces[:2])
    assert sorted({r.params["serviceName"] for r in server.requests}) == ["cart", "email"]


def test_a_chunk_still_full_at_the_smallest_size_is_a_named_loss(serve: Callable[[Answer], FakeServer],
                                                                 tmp_path: Path) -> None:
    burst = T0 + timedelta(minutes=10)
    server = serve(zipkin_with([zipkin_trace(n, burst + timedelta(microseconds=n)) for n in range(6)]))
    out = tmp_path / "data"
    result = _pull(server, out)
    assert result.exit_code == 3, result.output
    assert "LOST" in result.output and "the smallest chunk" in result.output and "raise --limit" in result.output
    assert len({trace for trace, _, _ in _spans(out)}) == 5


def test_an_answer_that_is_no_list_of_traces_is_an_error_naming_the_request(serve: Callable[[Answer], FakeServer],
                                                                            tmp_path: Path) -> None:
    server = serve(lambda path, params: (200, [{"traceId": "ab", "id": "cd"}]))  # spans, not traces
    result = _pull(server, tmp_path / "data")
    assert result.exit_code == 2, result.output
    assert "/api/v2/traces" in result.output and "is not a trace (a list of spans)" in result.output


@pytest.mark.parametrize(("body", "shown"), [
    ("endTs should be positive", "endTs should be positive"),  # Zipkin on Armeria: the text
    ({"timestamp": "2025-06-05T00:00:00.000+0000", "status": 400, "error": "Bad Request",  # on Spring Boot
      "message": "lookback should be positive", "path": "/api/v2/traces"}, "Bad Request: lookback should be positive"),
])
def test_a_refusal_shows_the_servers_own_words(serve: Callable[[Answer], FakeServer], tmp_path: Path,
                                               body: Any, shown: str) -> None:
    server = serve(lambda path, params: (400, body))
    result = _pull(server, tmp_path / "data")
    assert result.exit_code == 2, result.output
    assert "400" in result.output and shown in result.output


def test_a_saved_page_reads_as_a_file_too(serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    traces = [zipkin_trace(n, T0 + timedelta(minutes=10 + n)) for n in range(2)]
    pulled = tmp_path / "pulled"
    assert _pull(serve(zipkin_with(traces)), pulled).exit_code == 0
    (page,) = [p for p in (pulled / ".pulled" / "zipkin").glob("*.json")
               if json.loads(p.read_text(encoding="utf-8"))["traces"]]
    out = tmp_path / "data"
    result = runner.invoke(app, ["import", "zipkin", str(page), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert _spans(out) == _expected(traces)


def test_sources_zipkin_is_configured_and_checked(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[sources.zipkin]\nurl = "http://zipkin:9411"\nservices = ["frontend"]\nlimit = 200\n',
                      encoding="utf-8")
    settings = load_settings(config_path=config, environ={})
    assert settings.sources.configured() == ["zipkin"]
    (source,) = configured_sources(settings.sources, start=T0, end=END)
    assert (source.fmt, source.url, source.option) == ("zipkin", "http://zipkin:9411", "sources.zipkin.url")
    config.write_text('[sources.zipkin]\nurl = "http://zipkin:9411"\nlimit = 0\n', encoding="utf-8")
    with pytest.raises(SettingsError, match="sources.zipkin.limit"):
        load_settings(config_path=config, environ={})


def test_a_simulated_release_pulled_from_zipkin_is_the_release(serve: Callable[[Answer], FakeServer],
                                                                tmp_path: Path) -> None:
    """Every span of a simulated two-case release, served by the fake Zipkin and pulled back whole (split
    wherever a chunk came back full), reads as the release's own spans."""
    from polars.testing import assert_frame_equal

    from bench.export import simulated_frames, zipkin_document

    spans = simulated_frames(tmp_path / "sim")["spans"]
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for span in zipkin_document(spans):
        by_trace.setdefault(span["traceId"], []).append(span)
    traces = list(by_trace.values())
    began = sorted(_began(t) for t in traces)
    first = datetime.fromtimestamp(began[0] // 1_000_000, UTC)
    last = datetime.fromtimestamp(began[-1] // 1_000_000 + 1, UTC)
    server = serve(zipkin_with(traces))
    out = tmp_path / "pulled"
    result = runner.invoke(app, ["import", "zipkin", "--url", server.url, "--start", first.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                 "--end", last.strftime("%Y-%m-%dT%H:%M:%SZ"), "--limit", "200", "--out", str(out)])
    assert result.exit_code == 0, result.output
    window = {"start": first - timedelta(minutes=1), "end": last + timedelta(hours=1), "naming": bundled_system().trace}
    pulled = read_traces(out, **window).frame
    released = read_traces(tmp_path / "sim", **window).frame
    order = list(released.columns)
    assert pulled.height == released.height == spans.height
    assert_frame_equal(pulled.select(order).sort(order, nulls_last=True), released.sort(order, nulls_last=True))
