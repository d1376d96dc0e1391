"""``rca import prometheus|loki|jaeger --url``: pulling a range from live query APIs.

Real HTTP servers on 127.0.0.1 (``http.server`` in a thread) implement just enough of each API
to hold the client to the servers' rules: Prometheus refuses a range of more than 11,000 steps
(400, Prometheus' error JSON), and, given a ``--query.max-samples``, a query that would load more
points than that (422, Prometheus' own "too many samples" error); Loki answers at most ``limit``
lines (and refuses a limit above its maximum, and, given a ``max_query_length``, a longer range),
forward in time, several lines sharing a timestamp across the page borders;
Jaeger answers at most ``limit`` traces. Every test reads the dataset the command wrote back
with ``preprocess.readers`` and counts the requests each server saw.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from app.cli import app
from preprocess.formats import make_reader
from preprocess.formats.pull import PROMETHEUS_TOO_MANY_SAMPLES, HalvedChunks, prometheus_chunks, prometheus_halves
from preprocess.formats.pull_http import PullClient, PullError, parse_header
from preprocess.readers import read_infra, read_logs, read_traces
from rca.system import bundled_system
from tests.fake_http import Answer, FakeServer

pytestmark = pytest.mark.usefixtures("fast_retries")
runner = CliRunner()
T0 = datetime(2025, 6, 5, 0, 0, tzinfo=UTC)


def _rca(*args: str) -> Any:
    return runner.invoke(app, ["import", *args])


def _dataset_files(out: Path) -> dict[str, str]:
    """Every file of the dataset (the pulled pages left out) and a hash of its content."""
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and ".pulled" not in p.parts}


def _iso(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- Prometheus

PROM_METRIC = "container_memory_working_set_bytes"
PROM_PODS = ("frontend-0", "cart-0")
PROM_MAX_STEPS = 11_000


def _ms(text: str) -> int:
    return int(Decimal(text) * 1000)


def _prom_value(pod: str, at_ms: int) -> float:
    return float(PROM_PODS.index(pod) * 1000 + (at_ms // 60_000) % 97)


def prometheus(path: str, params: dict[str, str]) -> tuple[int, Any]:
    if path != "/api/v1/query_range":
        return 404, "404 page not found"
    if params["query"] != PROM_METRIC:
        return 400, {"status": "error", "errorType": "bad_data",
                     "error": f'invalid parameter "query": 1:5: parse error: unexpected "(" in {params["query"]!r}'}
    start, end, step = _ms(params["start"]), _ms(params["end"]), _ms(params["step"])
    if (end - start) // step > PROM_MAX_STEPS:  # Prometheus' check (api.go), on integer durations
        return 400, {"status": "error", "errorType": "bad_data",
                     "error": "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the "
                              "query resolution (?step=XX)"}
    result = [{"metric": {"__name__": PROM_METRIC, "pod": pod, "namespace": "prod", "node": "node-1"},
               "values": [[t / 1000, repr(_prom_value(pod, t))] for t in range(start, end + 1, step)]}
              for pod in PROM_PODS]
    return 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}


PROM_END = T0 + timedelta(days=8)  # 11,520 one-minute steps: two chunks


def _prom_args(server: FakeServer, out: Path, *more: str) -> list[str]:
    return ["prometheus", "--url", server.url, "--query", PROM_METRIC, "--start", _iso(T0), "--end", _iso(PROM_END),
            "--step", "60s", "--out", str(out), *more]


def test_the_fake_prometheus_refuses_more_than_11000_steps(serve: Callable[[Answer], FakeServer]) -> None:
    server = serve(prometheus)
    answer = httpx.get(f"{server.url}/api/v1/query_range", params={
        "query": PROM_METRIC, "start": str(T0.timestamp()), "end": str(PROM_END.timestamp()), "step": "60"})
    assert answer.status_code == 400 and "11,000 points" in answer.json()["error"]


@pytest.mark.parametrize("end, step", [(10, 4), (7, 7), (9, 100)])
def test_halved_chunks_cover_the_range_once_whatever_is_split(end: int, step: int) -> None:
    chunks = HalvedChunks(start=0, end=end, step=step, smallest=1)
    kept = []
    for first, stop in chunks:
        if chunks.can_split(first, stop):  # every chunk "too full" until a unit long
            chunks.split(first, stop)
            continue
        kept.append((first, stop))
    assert kept == [(at, at + 1) for at in range(end)]


def test_prometheus_chunks_keep_the_grid_and_the_limit() -> None:
    chunks = prometheus_chunks(start_ms=0, end_ms=25_000 * 60_000, step_ms=60_000)
    assert [(b - a) // 60_000 for a, b in chunks] == [11_000, 11_000, 2_998]
    points = [t for a, b in chunks for t in range(a, b + 1, 60_000)]
    assert points == list(range(0, 25_000 * 60_000 + 1, 60_000))  # each point once, none missing


def test_prometheus_pull_splits_under_the_limit_and_a_rerun_fetches_nothing(
        serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    server = serve(prometheus)
    out = tmp_path / "data"
    result = _rca(*_prom_args(server, out))
    assert result.exit_code == 0, result.output
    assert server.paths() == ["/api/v1/query_range"] * 2  # 11,520 steps: two chunks, none refused
    for seen in server.requests:
        assert (_ms(seen.params["end"]) - _ms(seen.params["start"])) // 60_000 <= PROM_MAX_STEPS

    infra = read_infra(out, start=T0, end=PROM_END).frame.filter(pl.col("kpi_key") == "pod_memory_working_set_bytes")
    grid = [T0 + timedelta(minutes=m) for m in range(8 * 24 * 60 + 1)]
    for pod in PROM_PODS:
        rows = infra.filter(pl.col("component") == pod).sort("time")
        assert rows["time"].to_list() == grid  # every step once: no gap, no duplicate at the chunk border
        expected = [_prom_value(pod, int(t.timestamp() * 1000)) for t in grid]
        assert rows["value"].to_list() == expected
    assert len(list((out / ".pulled" / "prometheus").glob("*.json"))) == 2

    before = _dataset_files(out)
    again = _rca(*_prom_args(server, out))
    assert again.exit_code == 0, again.output
    assert len(server.requests) == 2  # nothing fetched again
    assert "2 already on disk" in again.output
    assert _dataset_files(out) == before


def test_an_interrupted_pull_resumes_where_it_stopped(serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    server = serve(prometheus)
    server.fail_at = {2: 400}  # the second chunk is refused (not retried): the pull stops there
    out = tmp_path / "data"
    failed = _rca(*_prom_args(server, out))
    assert failed.exit_code == 2 and "HTTP 400" in failed.output
    assert len(list((out / ".pulled" / "prometheus").glob("*.json"))) == 1  # the first chunk is kept
    resumed = _rca(*_prom_args(server, out))
    assert resumed.exit_code == 0, resumed.output
    assert len(server.requests) == 3  # only the missing chunk was asked for again
    assert read_infra(out, start=T0, end=PROM_END).frame.height == 2 * (8 * 24 * 60 + 1)


def test_a_chunk_that_had_not_settled_is_fetched_again(serve: Callable[[Answer], FakeServer],
                                                       tmp_path: Path) -> None:
    # A range reaching (nearly) now: its last chunk may still be missing late samples, so it is not reused.
    end = datetime.now(UTC).replace(second=0, microsecond=0)
    server = serve(prometheus)
    args = ["prometheus", "--url", server.url, "--query", PROM_METRIC, "--since", "10m", "--end", _iso(end),
            "--out", str(tmp_path / "data")]
    assert _rca(*args).exit_code == 0
    again = _rca(*args)
    assert again.exit_code == 0, again.output
    assert len(server.requests) == 2 and "0 already on disk" in again.output
    assert read_infra(tmp_path / "data", start=end - timedelta(minutes=10), end=end).frame.height == 2 * 11


def test_a_500_then_200_is_retried(serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    server = serve(prometheus)
    server.fail_at = {1: 500}
    result = _rca(*_prom_args(server, tmp_path / "data"))
    assert result.exit_code == 0, result.output
    assert len(server.requests) == 3  # the first chunk twice, the second once
    assert server.requests[0].params == server.requests[1].params


def test_a_400_shows_the_servers_error_text(serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    server = serve(prometheus)
    result = _rca("prometheus", "--url", server.url, "--query", "rate(", "--since", "1h", "--out",
                  str(tmp_path / "data"))
    assert result.exit_code == 2
    assert "HTTP 400" in result.output and "parse error" in result.output and "bad_data" in result.output
    assert f"{server.url}/api/v1/query_range" in result.output
    assert len(server.requests) == 1  # a client error is not retried
    assert not (tmp_path / "data" / ".pulled" / "prometheus").exists() or \
        not list((tmp_path / "data" / ".pulled" / "prometheus").glob("*.json"))


def test_headers_are_sent_and_never_shown(serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    server = serve(prometheus)
    out = tmp_path / "data"
    result = _rca(*_prom_args(server, out, "--header", "Authorization: Bearer s3cret-token"))
    assert result.exit_code == 0, result.output
    assert {r.headers.get("authorization") for r in server.requests} == {"Bearer s3cret-token"}
    assert "s3cret" not in result.output
    assert not any("s3cret" in p.read_text() for p in (out / ".pulled").rglob("*.json"))


# --------------------------------------------------------------------------- Prometheus: too many samples

# Prometheus 2.42's answer to a query over its --query.max-samples (promql.ErrTooManySamples), verbatim.
TOO_MANY_SAMPLES = {"status": "error", "errorType": "execution",
                    "error": "query processing would load too many samples into memory in query execution"}
SHORT_END = T0 + timedelta(minutes=100)  # 101 one-minute steps: one chunk, unless the server refuses it


def prometheus_with_max_samples(max_samples: int) -> Answer:
    """``prometheus`` with a ``--query.max-samples``: an answer of more points than that is refused (422)."""
    def answer(path: str, params: dict[str, str]) -> tuple[int, Any]:
        status, body = prometheus(path, params)
        if status == 200 and sum(len(s["values"]) for s in body["data"]["result"]) > max_samples:
            return 422, TOO_MANY_SAMPLES
        return status, body
    return answer


def _short_args(server: FakeServer, out: Path) -> list[str]:
    return ["prometheus", "--url", server.url, "--query", PROM_METRIC, "--start", _iso(T0), "--end", _iso(SHORT_END),
            "--step", "60s", "--out", str(out)]


def _points(chunk: tuple[int, int], step: int) -> list[int]:
    return list(range(chunk[0], chunk[1] + 1, step))


def _halved_to_single_steps(chunk: tuple[int, int], step: int) -> list[tuple[int, int]]:
    if (chunk[1] - chunk[0]) // step == 0:
        return [chunk]
    left, right = prometheus_halves(start_ms=chunk[0], end_ms=chunk[1], step_ms=step)
    return _halved_to_single_steps(left, step) + _halved_to_single_steps(right, step)


def test_the_fake_refuses_too_many_samples_with_prometheus_own_error() -> None:
    assert TOO_MANY_SAMPLES["error"].startswith(PROMETHEUS_TOO_MANY_SAMPLES)


@pytest.mark.parametrize("points", [2, 3, 5, 7, 11, 101, 11_001])
@pytest.mark.parametrize("off_grid_ms", [0, 1, 59_999])
def test_halves_keep_the_grid_for_odd_and_even_step_counts(points: int, off_grid_ms: int) -> None:
    step = 60_000
    chunk = (1_000, 1_000 + (points - 1) * step + off_grid_ms)  # an end between two steps keeps its last point
    left, right = prometheus_halves(start_ms=chunk[0], end_ms=chunk[1], step_ms=step)
    assert len(_points(left, step)) - len(_points(right, step)) in (0, 1)  # halves, the odd point to the first
    assert right[0] == left[1] + step and right[1] == chunk[1]  # the next piece starts a step after the last point
    assert _points(left, step) + _points(right, step) == _points(chunk, step)
    # Halved again and again, down to single steps: every point of the chunk once, in order.
    singles = _halved_to_single_steps(chunk, step)
    assert [p for piece in singles for p in _points(piece, step)] == _points(chunk, step)
    assert len(singles) == points
    with pytest.raises(ValueError, match="single step"):
        prometheus_halves(start_ms=0, end_ms=step - 1, step_ms=step)


def test_a_chunk_refused_for_too_many_samples_is_halved_and_its_pieces_resume(
        serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    # 2 series x 101 steps = 202 points; the server loads at most 60: 101 -> 51 + 50 -> 4 pieces of 25 or 26 steps.
    server = serve(prometheus_with_max_samples(60))
    server.fail_at = {4: 400}  # the whole chunk and its first half refused, the first quarter had, then a failure
    out = tmp_path / "data"
    failed = _rca(*_short_args(server, out))
    assert failed.exit_code == 2 and "HTTP 400" in failed.output
    # Kept: the two refusals (so a rerun goes straight to the halves) and the first piece.
    assert sorted(bool(json.loads(p.read_text())["rca_pull"].get("split"))
                  for p in (out / ".pulled" / "prometheus").glob("*.json")) == [False, True, True]

    result = _rca(*_short_args(server, out))
    assert result.exit_code == 0, result.output
    t0, minute = int(T0.timestamp() * 1000), 60_000
    ranges = [(_ms(r.params["start"]), _ms(r.params["end"])) for r in server.requests]
    assert ranges[:4] == [(t0, t0 + 100 * minute), (t0, t0 + 50 * minute), (t0, t0 + 25 * minute),
                          (t0 + 26 * minute, t0 + 50 * minute)]
    # Resumed from what was on disk: only the failed quarter, then the second half, refused and halved.
    assert ranges[4:] == [(t0 + 26 * minute, t0 + 50 * minute), (t0 + 51 * minute, t0 + 100 * minute),
                          (t0 + 51 * minute, t0 + 75 * minute), (t0 + 76 * minute, t0 + 100 * minute)]
    assert "piece 4" in result.output and "too many samples" in result.output

    pieces = [(_ms(m["params"]["start"]), _ms(m["params"]["end"]))
              for m in (json.loads(p.read_text())["rca_pull"] for p in (out / ".pulled" / "prometheus").glob("*.json"))
              if not m.get("split")]
    grid = [int(T0.timestamp() * 1000) + m * 60_000 for m in range(101)]
    assert sorted(t for piece in pieces for t in _points(piece, 60_000)) == grid  # every step once, none twice

    # The same frames as a pull the server answered in one request.
    whole = tmp_path / "whole"
    assert _rca(*_short_args(serve(prometheus), whole)).exit_code == 0
    assert_frame_equal(read_infra(out, start=T0, end=SHORT_END).frame.sort("component", "time"),
                       read_infra(whole, start=T0, end=SHORT_END).frame.sort("component", "time"))

    requests, before = len(server.requests), _dataset_files(out)
    again = _rca(*_short_args(server, out))
    assert again.exit_code == 0, again.output
    assert len(server.requests) == requests and "0 page(s) fetched" in again.output  # the refusals are kept too
    assert _dataset_files(out) == before


def test_a_single_step_still_refused_names_the_query_and_the_instant(
        serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    server = serve(prometheus_with_max_samples(1))  # 2 series: not even one step fits
    result = _rca(*_short_args(server, tmp_path / "data"))
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    assert "single step" in output and PROM_METRIC in output and _iso(T0) in output
    assert TOO_MANY_SAMPLES["error"] in output and "--query.max-samples" in output and "narrower" in output
    assert len(server.requests) == 8  # refused at 101, 51, 26, 13, 7, 4 and 2 steps, then at the first step alone
    assert (_ms(server.requests[-1].params["start"]), _ms(server.requests[-1].params["end"])) == \
        (int(T0.timestamp() * 1000),) * 2


@pytest.mark.parametrize(("status", "error"), [
    (422, {"status": "error", "errorType": "execution",
           "error": "found duplicate series for the match group {pod=\"cart-0\"} on the right hand-side"}),
    (400, {"status": "error", "errorType": "bad_data", "error": TOO_MANY_SAMPLES["error"]}),
    (422, "query processing would load too many samples into memory in query execution"),  # not Prometheus' JSON
])
def test_another_refusal_is_not_split(serve: Callable[[Answer], FakeServer], tmp_path: Path, status: int,
                                      error: Any) -> None:
    server = serve(lambda path, params: (status, error))
    result = _rca(*_short_args(server, tmp_path / "data"))
    assert result.exit_code == 2 and f"HTTP {status}" in result.output
    assert len(server.requests) == 1  # not halved, not retried
    assert not list((tmp_path / "data").rglob("*.json"))


# --------------------------------------------------------------------------- Loki

LOKI_MAX = 5  # the server's max_entries_limit_per_query
STREAMS = ({"namespace": "prod", "pod": "frontend-0", "node": "node-1", "container": "server"},
           {"namespace": "prod", "pod": "cart-0", "node": "node-2", "container": "server"},
           {"namespace": "other", "pod": "batch-0", "node": "node-1", "container": "job"})
BASE_NS = int(T0.timestamp()) * 10**9 + 3_600 * 10**9


def _loki_lines() -> list[tuple[int, int, str]]:
    """(stream, ns, line): triples of lines share a timestamp, so every page border falls among them."""
    lines = []
    for i in range(40):
        ns = BASE_NS + (i // 3) * 1_000_000 + 7  # sub-microsecond digits, as a real Loki has
        lines.append((i % 3 if i % 3 < 2 else 0, ns, f"line {i} of {i // 3}"))
        if i % 4 == 0:
            lines.append((2, ns, f"other namespace {i}"))
    lines.append((0, BASE_NS + 99_000_000, "same text"))  # one text in two streams at one instant: two lines
    lines.append((1, BASE_NS + 99_000_000, "same text"))
    return lines


def loki_with(lines: list[tuple[int, int, str]]) -> Answer:
    def loki(path: str, params: dict[str, str]) -> tuple[int, Any]:
        if path != "/loki/api/v1/query_range":
            return 404, "404 page not found"
        limit = int(params.get("limit", 100))
        if limit > LOKI_MAX:
            return 400, f"max entries limit per query exceeded, limit > max_entries_limit ({limit} > {LOKI_MAX})"
        if params.get("direction") != "forward":
            return 400, "this fake only pages forward"
        wanted = dict(re.findall(r'(\w+)="([^"]*)"', params["query"]))
        start, end = int(params["start"]), int(params["end"])
        chosen = sorted(((ns, stream, seq, line) for seq, (stream, ns, line) in enumerate(lines)
                         if start <= ns < end and all(STREAMS[stream].get(k) == v for k, v in wanted.items())))
        streams: dict[int, list[list[str]]] = {}
        for ns, stream, _, line in chosen[:limit]:
            streams.setdefault(stream, []).append([str(ns), line])
        return 200, {"status": "success", "data": {"resultType": "streams", "stats": {"summary": {}},
                                                   "result": [{"stream": STREAMS[s], "values": v}
                                                              for s, v in streams.items()]}}
    return loki


def _loki_args(server: FakeServer, out: Path, *, limit: int = LOKI_MAX) -> list[str]:
    return ["loki", "--url", server.url, "--query", '{namespace="prod"}', "--start", _iso(T0),
            "--end", _iso(T0 + timedelta(hours=2)), "--limit", str(limit), "--out", str(out)]


def _expected_logs(lines: list[tuple[int, int, str]]) -> list[tuple[str, datetime, str]]:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return sorted((STREAMS[s]["pod"], epoch + timedelta(microseconds=ns // 1000), line)
                  for s, ns, line in lines if STREAMS[s]["namespace"] == "prod")


def _logs(out: Path) -> list[tuple[str, datetime, str]]:
    frame = read_logs(out, start=T0, end=T0 + timedelta(hours=2)).frame
    return sorted(zip(frame["pod"].to_list(), frame["time"].to_list(), frame["message"].to_list()))


def test_loki_pages_across_shared_timestamps_lose_and_repeat_nothing(
        serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    lines = _loki_lines()
    server = serve(loki_with(lines))
    out = tmp_path / "data"
    result = _rca(*_loki_args(server, out))
    assert result.exit_code == 0, result.output
    expected = _expected_logs(lines)
    assert len(expected) == 42 and _logs(out) == expected
    # The saved pages themselves hold every line once (the dataset writer's dedup is not what saves us).
    pulled = sorted((out / ".pulled" / "loki").glob("*.json"))
    read = make_reader("loki").read(pulled)
    assert read.issues == [] and read.logs is not None and read.logs.height == len(expected)
    requests = len(server.requests)
    assert requests == len(pulled) and requests > len(expected) // LOKI_MAX
    for earlier, later in zip(server.requests, server.requests[1:]):
        assert int(later.params["start"]) > int(earlier.params["start"])  # always forward

    before = _dataset_files(out)
    again = _rca(*_loki_args(server, out))
    assert again.exit_code == 0, again.output
    assert len(server.requests) == requests and _dataset_files(out) == before


def test_more_lines_in_one_nanosecond_than_the_limit_is_reported_as_loss(
        serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    crowded = BASE_NS + 5_000_000
    lines = [(0, BASE_NS, "before"), *((i % 2, crowded, f"burst {i}") for i in range(7)), (1, crowded + 1000, "after")]
    server = serve(loki_with(lines))
    out = tmp_path / "data"
    result = _rca(*_loki_args(server, out))
    assert result.exit_code == 3, result.output
    assert "LOST" in result.output and "5 or more lines at" in result.output
    messages = [m for _, _, m in _logs(out)]
    assert "before" in messages and "after" in messages
    assert sum(m.startswith("burst") for m in messages) == LOKI_MAX


def loki_refusing_longer_than(max_length: timedelta, lines: list[tuple[int, int, str]]) -> Answer:
    """Loki with a ``max_query_length``: a longer range is refused with Loki's text, as Loki does (HTTP 400)."""
    inner = loki_with(lines)

    def loki(path: str, params: dict[str, str]) -> tuple[int, Any]:
        length_ns = int(params["end"]) - int(params["start"])
        if length_ns > max_length // timedelta(microseconds=1) * 1000:
            return 400, (f"the query time range exceeds the limit (query length: {length_ns // 10**9}s, "
                         f"limit: {max_length.total_seconds():.0f}s)")
        return inner(path, params)
    return loki


def test_a_range_longer_than_lokis_max_query_length_is_halved_and_read_once(
        serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    lines = _loki_lines()
    server = serve(loki_refusing_longer_than(timedelta(minutes=20), lines))
    out = tmp_path / "data"
    result = _rca(*_loki_args(server, out))  # two hours: refused, halved down to 15-minute ranges
    assert result.exit_code == 0, result.output
    assert _logs(out) == _expected_logs(lines)
    refused = [r for r in server.requests if int(r.params["end"]) - int(r.params["start"]) > 20 * 60 * 10**9]
    assert len(refused) == 1 + 2 + 4  # 2 h, then both 1 h halves, then the four 30-minute quarters
    assert all(int(r.params["end"]) - int(r.params["start"]) <= 15 * 60 * 10**9
               for r in server.requests if r not in refused)

    before, requests = _dataset_files(out), len(server.requests)
    again = _rca(*_loki_args(server, out))  # the refusals were saved: straight to the pieces, which are saved too
    assert again.exit_code == 0, again.output
    assert len(server.requests) == requests and _dataset_files(out) == before


def test_a_range_loki_refuses_even_at_a_minute_is_an_error_naming_the_query(
        serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    server = serve(loki_refusing_longer_than(timedelta(seconds=10), _loki_lines()))
    result = _rca(*_loki_args(server, tmp_path / "data"))
    assert result.exit_code == 2
    assert "the server refuses even" in result.output and "the query time range exceeds the limit" in result.output
    assert len(server.requests) <= 8 + 1  # halved from two hours down to a minute, not further


def test_a_limit_above_the_servers_is_refused_with_its_text(serve: Callable[[Answer], FakeServer],
                                                             tmp_path: Path) -> None:
    server = serve(loki_with(_loki_lines()))
    result = _rca(*_loki_args(server, tmp_path / "data", limit=100))
    assert result.exit_code == 2
    assert "HTTP 400" in result.output and "max entries limit per query exceeded" in result.output


# --------------------------------------------------------------------------- Jaeger

SERVICES = ("cart", "frontend")


def _trace(number: int, start_us: int) -> dict[str, Any]:
    trace_id = f"{number:032x}"
    root, child = f"{2 * number + 1:016x}", f"{2 * number + 2:016x}"
    tag = [{"key": "span.kind", "type": "string", "value": "server"}]
    return {"traceID": trace_id, "processes": {
        "p1": {"serviceName": "frontend", "tags": [{"key": "name", "type": "string", "value": "frontend-0"}]},
        "p2": {"serviceName": "cart", "tags": [{"key": "name", "type": "string", "value": "cart-0"}]}},
        "spans": [
            {"traceID": trace_id, "spanID": root, "operationName": "GET /", "references": [],
             "startTime": start_us, "duration": 900, "tags": tag, "processID": "p1"},
            {"traceID": trace_id, "spanID": child, "operationName": "GetCart",
             "references": [{"refType": "CHILD_OF", "traceID": trace_id, "spanID": root}],
             "startTime": start_us + 100, "duration": 500, "tags": tag, "processID": "p2"}]}


def jaeger_with(traces: list[dict[str, Any]]) -> Answer:
    def jaeger(path: str, params: dict[str, str]) -> tuple[int, Any]:
        if path == "/api/services":
            return 200, {"data": list(SERVICES), "total": len(SERVICES), "limit": 0, "offset": 0, "errors": None}
        if path != "/api/traces":
            return 404, "404 page not found"
        start, end, limit = int(params["start"]), int(params["end"]), int(params.get("limit", 20))
        found = [t for t in traces if any(t["processes"][s["processID"]]["serviceName"] == params["service"]
                                          and start <= s["startTime"] <= end for s in t["spans"])]
        found.sort(key=lambda t: -t["spans"][0]["startTime"])  # newest first, as Jaeger answers
        return 200, {"data": found[:limit], "total": len(found[:limit]), "limit": 0, "offset": 0, "errors": None}
    return jaeger


def _us(instant: datetime) -> int:
    return int(instant.timestamp()) * 1_000_000


def _jaeger_args(server: FakeServer, out: Path, *more: str) -> list[str]:
    return ["jaeger", "--url", server.url, "--start", _iso(T0), "--end", _iso(T0 + timedelta(hours=2)),
            "--limit", "5", "--out", str(out), *more]


def _spans(out: Path) -> list[tuple[str, str, str]]:
    frame = read_traces(out, start=T0, end=T0 + timedelta(hours=2), naming=bundled_system().trace).frame
    return sorted(zip(frame["trace_id"].to_list(), frame["span_id"].to_list(), frame["service"].to_list()))


def test_jaeger_splits_full_chunks_and_a_rerun_asks_only_for_the_services(
        serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    # Three traces in the first hour; twelve within ten minutes of the second: that hour comes back full.
    starts = [_us(T0) + m * 60_000_000 for m in (5, 20, 40)]
    starts += [_us(T0 + timedelta(hours=1, minutes=30)) + s * 50_000_000 for s in range(12)]
    traces = [_trace(n, at) for n, at in enumerate(starts)]
    server = serve(jaeger_with(traces))
    out = tmp_path / "data"
    result = _rca(*_jaeger_args(server, out))
    assert result.exit_code == 0, result.output
    expected = sorted((t["traceID"], s["spanID"], t["processes"][s["processID"]]["serviceName"])
                      for t in traces for s in t["spans"])
    assert _spans(out) == expected and len(expected) == 30
    trace_requests = [r for r in server.requests if r.path == "/api/traces"]
    assert {r.params["service"] for r in trace_requests} == set(SERVICES)  # every service, from /api/services
    assert len(trace_requests) > 2 * 2  # more than the two hourly chunks per service: full ones were split
    assert "split" in result.output

    requests = len(server.requests)
    before = _dataset_files(out)
    again = _rca(*_jaeger_args(server, out))
    assert again.exit_code == 0, again.output
    assert server.paths()[requests:] == ["/api/services"]  # the service list only; no trace fetched again
    assert _dataset_files(out) == before

    named = _rca(*_jaeger_args(server, out, "--service", "frontend"))
    assert named.exit_code == 0, named.output
    assert len(server.requests) == requests + 1  # nothing at all: the service is named, its chunks on disk


def test_jaeger_warns_when_the_smallest_chunk_is_still_full(serve: Callable[[Answer], FakeServer],
                                                            tmp_path: Path) -> None:
    burst = _us(T0 + timedelta(minutes=10))
    server = serve(jaeger_with([_trace(n, burst + n) for n in range(6)]))
    out = tmp_path / "data"
    result = _rca(*_jaeger_args(server, out, "--service", "frontend"))
    assert result.exit_code == 3, result.output
    assert "LOST" in result.output and "the smallest chunk" in result.output
    assert len({trace for trace, _, _ in _spans(out)}) == 5


# --------------------------------------------------------------------------- the command line and the client


def test_url_and_sources_are_exclusive(tmp_path: Path) -> None:
    export = tmp_path / "export.json"
    export.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}))
    both = _rca("prometheus", str(export), "--url", "http://127.0.0.1:9", "--query", "up", "--since", "1h",
                "--out", str(tmp_path / "data"))
    assert both.exit_code == 2 and "not both" in both.output
    neither = _rca("loki", "--out", str(tmp_path / "data"))
    assert neither.exit_code == 2 and "--url" in neither.output
    stray = _rca("jaeger", str(export), "--since", "1h", "--out", str(tmp_path / "data"))
    assert stray.exit_code == 2 and "only apply with --url" in stray.output
    no_range = _rca("loki", "--url", "http://127.0.0.1:9", "--query", "{a=\"b\"}", "--out", str(tmp_path / "data"))
    assert no_range.exit_code == 2 and "--since" in no_range.output
    bad_since = _rca("loki", "--url", "http://127.0.0.1:9", "--query", "{a=\"b\"}", "--since", "soon",
                     "--out", str(tmp_path / "data"))
    assert bad_since.exit_code == 2 and "duration" in bad_since.output


def test_file_mode_is_unchanged(tmp_path: Path) -> None:
    export = tmp_path / "export.json"
    export.write_text(json.dumps(prometheus("/api/v1/query_range", {
        "query": PROM_METRIC, "start": str(T0.timestamp()), "end": str(T0.timestamp() + 600), "step": "60"})[1]))
    result = _rca("prometheus", str(export), "--out", str(tmp_path / "data"))
    assert result.exit_code == 0, result.output
    assert read_infra(tmp_path / "data", start=T0, end=T0 + timedelta(minutes=10)).frame.height == 2 * 11


def test_a_response_over_the_size_limit_is_refused(serve: Callable[[Answer], FakeServer]) -> None:
    server = serve(prometheus)
    with PullClient(server.url, max_bytes=1000) as client, pytest.raises(PullError, match="too large") as caught:
        client.get_json("/api/v1/query_range", params={"query": PROM_METRIC, "start": "1749081600",
                                                       "end": "1749085200", "step": "60"})
    assert f"{server.url}/api/v1/query_range" in str(caught.value)


def test_a_connection_refused_is_retried_then_named(tmp_path: Path) -> None:
    with PullClient("http://127.0.0.1:9", retries=2) as client, pytest.raises(PullError, match="3 attempts") as caught:
        client.get_json("/api/services")
    assert "http://127.0.0.1:9/api/services" in str(caught.value) and client.requests == 3


def test_header_parsing_and_password_redaction() -> None:
    assert parse_header("Authorization:  Bearer a:b ") == ("Authorization", "Bearer a:b")
    with pytest.raises(ValueError, match="Name: value") as caught:
        parse_header("Authorization Bearer s3cret")  # no colon: the first word is shown, never the rest
    assert "Authorization" in str(caught.value) and "s3cret" not in str(caught.value)
    with pytest.raises(PullError) as refused, PullClient("ftp://host") as _:
        pass
    assert "http(s)" in str(refused.value)
