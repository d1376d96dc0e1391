"""``rca system infer --mesh-calls URL``: the calls an Istio mesh counted join the drafted call graph.

A loopback fake Prometheus (``tests/fake_http.py``'s ``FakeServer``) answers the instant query;
the dataset is a few minutes of APM for four services, one of them a store. A real Prometheus with
backfilled Istio series is in ``tests/test_prometheus_server.py``.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from app.cli import app
from preprocess.dataset_writer import write_frames
from preprocess.mesh_calls import mesh_query
from preprocess.schema import APM_SCHEMA
from rca.system import load_system
from tests.fake_http import Answer, FakeServer

runner = CliRunner()
T0 = datetime(2025, 6, 5, 8, 0, tzinfo=UTC)
SERVICES = ("frontend", "cart", "checkout", "redis-cart")
NEWEST = T0 + timedelta(minutes=9)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mesh") / "data"
    rows = [{"time": T0 + timedelta(minutes=m), "object_type": "service", "object_id": service, "request": 60.0}
            for m in range(10) for service in SERVICES]
    write_frames(out, apm=pl.DataFrame(rows, schema=APM_SCHEMA))
    return out


def _sample(caller: str, callee: str, count: float | str) -> dict[str, Any]:
    return {"metric": {"source_workload": caller, "destination_workload": callee},
            "value": [NEWEST.timestamp(), str(count)]}


def _vector(*samples: dict[str, Any]) -> Answer:
    def answer(path: str, params: dict[str, str]) -> tuple[int, Any]:
        assert path == "/api/v1/query"
        return 200, {"status": "success", "data": {"resultType": "vector", "result": list(samples)}}
    return answer


def _infer(dataset: Path, out: Path, *more: str) -> Any:
    return runner.invoke(app, ["system", "infer", "--data-dir", str(dataset), "--out", str(out), *more])


def test_mesh_calls_join_the_draft_known_workloads_only(serve: Callable[[Answer], FakeServer], dataset: Path,
                                                        tmp_path: Path) -> None:
    server = serve(_vector(
        _sample("frontend", "checkout", 50), _sample("frontend", "cart", 900), _sample("cart", "redis-cart", 700),
        _sample("unknown", "frontend", 5000),  # a caller outside the mesh
        _sample("checkout", "unknown", 3),
        _sample("frontend", "ad", 40),  # a workload the data does not show
        _sample("checkout", "cart", 0),  # no call in the window
    ))
    out = tmp_path / "system.toml"
    result = _infer(dataset, out, "--mesh-calls", server.url, "--mesh-since", "2h", "--header", "X-Scope-OrgID: shop")
    assert result.exit_code == 0, result.output

    (seen,) = server.requests
    assert seen.params["query"] == mesh_query(since=timedelta(hours=2))
    assert float(seen.params["time"]) == NEWEST.timestamp()  # the dataset's newest minute, not now
    assert seen.headers["x-scope-orgid"] == "shop"

    spec = load_system(out)
    assert list(spec.calls) == [("frontend", "cart"), ("frontend", "checkout")]  # most calls first
    assert ("cart", "redis-cart") in spec.storage_calls  # a stateful callee goes to storage
    assert "unknown" not in spec.services and "ad" not in spec.services
    text = out.read_text(encoding="utf-8")
    assert "# From the service mesh, not the spans (calls here and in storage): frontend -> cart, " \
           "cart -> redis-cart, frontend -> checkout." in text
    assert f"{mesh_query(since=timedelta(hours=2))}" in text
    assert "# The mesh also names workloads that are no service here (their calls not added): ad." in text
    assert "no call seen reaches" not in text  # redis-cart is reached now
    assert "3 call edge(s) from the mesh" in result.output and "ad (listed in [calls])" in result.output


@pytest.mark.parametrize("answer, named", [
    (lambda path, params: (400, {"status": "error", "errorType": "bad_data", "error": "parse error"}),
     "HTTP 400: bad_data: parse error"),
    (lambda path, params: (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}),
     "resultType 'matrix', expected vector"),
    (lambda path, params: (200, {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}}),
     "a sample without its labels or [time, value]"),
])
def test_an_error_or_malformed_answer_exits_2_naming_the_url(serve: Callable[[Answer], FakeServer], dataset: Path,
                                                             tmp_path: Path, answer: Answer, named: str) -> None:
    server = serve(answer)
    out = tmp_path / "system.toml"
    result = _infer(dataset, out, "--mesh-calls", server.url)
    assert result.exit_code == 2, result.output
    assert f"{server.url}/api/v1/query" in result.output and named in result.output
    assert not out.exists()


def test_bad_mesh_options_are_usage_errors(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "system.toml"
    since = _infer(dataset, out, "--mesh-calls", "http://127.0.0.1:9", "--mesh-since", "yesterday")
    assert since.exit_code == 2 and "--mesh-since" in since.output
    header = _infer(dataset, out, "--header", "X-Scope-OrgID: shop")
    assert header.exit_code == 2 and "--mesh-calls" in header.output
    url = _infer(dataset, out, "--mesh-calls", "prometheus:9090")
    assert url.exit_code == 2 and "expected http(s)://" in url.output
