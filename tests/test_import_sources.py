"""``rca import sources``: every server of ``[sources]`` pulled over one range into one dataset.

Prometheus is the REAL server of tests/test_prometheus_server.py (its backfilled hour, its fixtures: this
module starts its own instance on a copy of the TSDB); Loki and Jaeger are loopback fakes
(tests/fake_http.py) with a few lines and traces in the same hour, and so are Elasticsearch and Tempo
(another stack's logs and traces). The dataset is read back with
``preprocess.readers``; a rerun must fetch nothing. The ``[sources]`` settings' errors name the setting.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from app.cli import app
from preprocess.formats.pull_sources import configured_sources, pull_sources
from preprocess.readers import read_infra, read_logs, read_traces
from rca.settings import SettingsError, load_settings
from rca.system import bundled_system
from tests.fake_http import Answer, FakeServer
from tests.test_import_pull import SERVICES, _trace, jaeger_with
from tests.test_prometheus_server import CALM, END, START, _at, backfilled, prometheus_url  # noqa: F401 (fixtures)

pytestmark = pytest.mark.usefixtures("fast_retries")
runner = CliRunner()
SECRET = "Bearer s3cret-token"
POD_STREAM = {"namespace": "prod", "pod": "frontend-0", "node": "node-1", "container": "server"}
LOG_TIMES = [START + timedelta(minutes=m, seconds=7) for m in (3, 11, 29)]


def _ns(instant: datetime) -> int:
    return int(instant.timestamp()) * 10**9


def loki(path: str, params: dict[str, str]) -> tuple[int, Any]:
    """Three lines of frontend-0 within the range; ``limit`` (5000, Loki's default maximum) holds them all."""
    if path != "/loki/api/v1/query_range":
        return 404, "404 page not found"
    start, end = int(params["start"]), int(params["end"])
    values = [[str(_ns(t)), f"GET /cart took {i}ms"] for i, t in enumerate(LOG_TIMES) if start <= _ns(t) < end]
    return 200, {"status": "success", "data": {"resultType": "streams",
                                               "result": [{"stream": POD_STREAM, "values": values}] if values else []}}


def _us(instant: datetime) -> int:
    return int(instant.timestamp()) * 1_000_000


TRACES = [_trace(n, _us(START + timedelta(minutes=10 + n))) for n in range(3)]


def _config(tmp_path: Path, *, prometheus: str, loki_url: str, jaeger: str, more: str = "") -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f"""
[sources.prometheus]
url = "{prometheus}"
presets = ["kubernetes"]
match = ['namespace="prod"']

[sources.loki]
url = "{loki_url}"
queries = ['{{namespace="prod"}}']
headers = {{ Authorization = "{SECRET}" }}

[sources.jaeger]
url = "{jaeger}"
{more}""", encoding="utf-8")
    return path


def _import(config: Path, out: Path, *more: str) -> Any:
    return runner.invoke(app, ["--config", str(config), "import", "sources", "--start", _iso(START), "--end",
                               _iso(END), "--out", str(out), *more])


def _iso(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def _dataset_files(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and ".pulled" not in p.parts}


def test_every_configured_source_lands_in_one_dataset_and_a_rerun_fetches_nothing(
        prometheus_url: str, serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:  # noqa: F811
    logs, traces = serve(loki), serve(jaeger_with(TRACES))
    config = _config(tmp_path, prometheus=prometheus_url, loki_url=logs.url, jaeger=traces.url)
    out = tmp_path / "data"
    result = _import(config, out)
    assert result.exit_code == 0, result.output
    assert "sources: 3 of 3 pulled into" in result.output
    assert "prometheus: preset kubernetes:" in result.output

    infra = read_infra(out, start=START, end=END).frame
    cpu = infra.filter(pl.col("kpi_key") == "pod_cpu_usage")
    assert _at(cpu, CALM, component="frontend-0") == pytest.approx(25.0)  # the preset's figure, as the CLI's
    assert "batch-0" not in cpu["component"].to_list()  # match = namespace="prod" scoped the pods
    frame = read_logs(out, start=START, end=END).frame
    assert sorted(frame["message"].to_list()) == [f"GET /cart took {i}ms" for i in range(3)]
    assert set(frame["pod"].to_list()) == {"frontend-0"}
    spans = read_traces(out, start=START, end=END, naming=bundled_system().trace).frame
    assert spans.height == 2 * len(TRACES) and set(spans["service"].to_list()) == set(SERVICES)

    # The headers of [sources.loki] go to Loki only, and are never shown.
    assert {r.headers.get("authorization") for r in logs.requests} == {SECRET}
    assert {r.headers.get("authorization") for r in traces.requests} == {None}
    assert "s3cret" not in result.output
    assert not any("s3cret" in p.read_text() for p in (out / ".pulled").rglob("*.json"))

    before, asked = _dataset_files(out), (len(logs.requests), len(traces.requests))
    again = _import(config, out)
    assert again.exit_code == 0, again.output
    assert "prometheus: 0 page(s) fetched" in again.output and "0 request(s)" in again.output
    assert len(logs.requests) == asked[0]
    assert traces.paths()[asked[1]:] == ["/api/services"]  # every service: the list is asked each run
    assert _dataset_files(out) == before


def test_a_source_that_fails_is_named_and_the_others_are_still_imported(
        serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    refusing = serve(lambda path, params: (400, {"status": "error", "errorType": "bad_data", "error": "no"}))
    logs, traces = serve(loki), serve(jaeger_with(TRACES))
    config = _config(tmp_path, prometheus=refusing.url, loki_url=logs.url, jaeger=traces.url)
    out = tmp_path / "data"
    result = _import(config, out)
    assert result.exit_code == 2, result.output
    assert "HTTP 400" in result.output and "sources: 2 of 3 pulled" in result.output
    assert "failed: prometheus" in result.output
    assert read_logs(out, start=START, end=END).frame.height == len(LOG_TIMES)


def test_data_loss_exits_3(serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    # A thousand traces within a millisecond: still full (Jaeger's default limit) at the smallest chunk.
    burst = _us(START + timedelta(minutes=10))
    many = [_trace(n, burst + n) for n in range(1000)]
    config = tmp_path / "config.toml"
    traces = serve(jaeger_with(many))
    config.write_text(f'[sources.jaeger]\nurl = "{traces.url}"\nservices = ["frontend"]\n', encoding="utf-8")
    result = _import(config, tmp_path / "data")
    assert result.exit_code == 3, result.output
    assert "LOST" in result.output and "the smallest chunk" in result.output


def test_no_source_configured_or_no_range_is_a_usage_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text("", encoding="utf-8")
    none = _import(empty, tmp_path / "data")
    assert none.exit_code == 2 and "no source configured" in none.output
    config = tmp_path / "config.toml"
    config.write_text('[sources.jaeger]\nurl = "http://127.0.0.1:9"\n', encoding="utf-8")
    no_range = runner.invoke(app, ["--config", str(config), "import", "sources", "--out", str(tmp_path / "d")])
    assert no_range.exit_code == 2 and "give the range: --start and --end, or --since" in no_range.output


@pytest.mark.parametrize(("toml", "named"), [
    ('[sources.loki]\nqueries = ["{a=\\"b\\"}"]\n', r"setting 'sources\.loki\.url': Field required"),
    ('[sources.jaeger]\nurl = "http://j:16686"\nservces = ["cart"]\n', r"sources\.jaeger\.servces"),
    ('[sources.prometheus]\nurl = "http://p:9090"\n', r"sources\.prometheus.*give presets .* or queries"),
    ('[sources.prometheus]\nurl = "p:9090"\npresets = ["kubernetes"]\n', r"sources\.prometheus\.url.*http\(s\)"),
    ('[sources.loki]\nurl = "http://l:3100"\nqueries = []\n', r"sources\.loki\.queries"),
    ('[sources.loki]\nurl = "http://l:3100"\nqueries = ["{}"]\ntimeout_s = 0\n', r"sources\.loki\.timeout_s"),
    ('[sources.jaeger]\nurl = "http://j:16686"\nheaders = { "Bad Name" = "x" }\n', r"sources\.jaeger\.headers"),
    ('[sources.prometheus]\nurl = "http://p:9090"\npresets = ["x"]\nrate_window = "0"\n',
     r"sources\.prometheus\.rate_window"),
    ('[sources]\nskywalking = {url = "http://s:12800"}\n', r"sources\.skywalking"),
])
def test_config_errors_name_the_setting(tmp_path: Path, toml: str, named: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(toml, encoding="utf-8")
    with pytest.raises(SettingsError, match=named) as caught:
        load_settings(config_path=config, environ={})
    assert str(config) in str(caught.value)


def test_a_cli_config_error_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[sources.loki]\nqueries = ["{}"]\n', encoding="utf-8")
    result = _import(config, tmp_path / "data")
    assert result.exit_code == 2 and "sources.loki.url" in result.output


def test_the_environment_gives_a_source_its_url_and_secret_header(tmp_path: Path) -> None:
    # The file names the source, the environment (a secret store) its URL and token: precedence as any setting.
    config = tmp_path / "config.toml"
    config.write_text('[sources.loki]\nqueries = [\'{namespace="shop",app="cart"}\']\n', encoding="utf-8")
    settings = load_settings(config_path=config, environ={
        "RCA_SOURCES__LOKI__URL": "http://loki:3100", "RCA_SOURCES__LOKI__HEADERS__AUTHORIZATION": SECRET,
        "RCA_SOURCES__JAEGER__URL": "http://jaeger:16686", "RCA_SOURCES__JAEGER__SERVICES": '["cart", "frontend"]'})
    assert settings.sources.loki is not None and settings.sources.jaeger is not None
    assert settings.sources.loki.url == "http://loki:3100"
    assert settings.sources.loki.queries == ['{namespace="shop",app="cart"}']  # a comma is no separator
    assert settings.sources.loki.header_values() == {"authorization": SECRET}
    assert settings.sources.jaeger.services == ["cart", "frontend"]
    assert settings.sources.configured() == ["loki", "jaeger"]
    assert "s3cret" not in repr(settings) and "s3cret" not in str(settings.model_dump())
    # A flag layer wins over both, as for every section.
    flagged = load_settings(config_path=config, environ={"RCA_SOURCES__LOKI__URL": "http://loki:3100"},
                            overrides={"sources": {"loki": {"url": "http://other:3100"}}})
    assert flagged.sources.loki is not None and flagged.sources.loki.url == "http://other:3100"
    with pytest.raises(SettingsError, match=r"^environment: setting 'sources\.jaeger\.url'"):
        load_settings(config_path=config, environ={"RCA_SOURCES__LOKI__URL": "http://loki:3100",
                                                   "RCA_SOURCES__JAEGER__SERVICES": "cart"})


def test_the_library_pulls_without_printing(serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    logs = serve(loki)
    config = tmp_path / "config.toml"
    config.write_text(f'[sources.loki]\nurl = "{logs.url}"\nqueries = [\'{{namespace="prod"}}\']\n',
                      encoding="utf-8")
    settings = load_settings(config_path=config, environ={})
    pulled = pull_sources(configured_sources(settings.sources, start=START, end=END), out=tmp_path / "data")
    assert pulled.failures == {} and pulled.losses == []
    (imported,) = pulled.imports
    assert imported.fmt == "loki" and imported.pulled.fetched == 1 and imported.rows == {"logs": len(LOG_TIMES)}
    assert imported.written and all(path.is_file() for path in imported.written)
    again = pull_sources(configured_sources(settings.sources, start=START, end=END), out=tmp_path / "data")
    assert again.imports[0].pulled.fetched == 0 and again.imports[0].pulled.reused == 1


def test_elasticsearch_tempo_and_zipkin_sources_land_in_one_dataset(serve: Callable[[Answer], FakeServer],
                                                                    tmp_path: Path) -> None:
    # Another stack: logs in Elasticsearch (ECS), traces in Grafana Tempo and, for older services, in Zipkin.
    from tests.test_import_elasticsearch import _document, elasticsearch_with
    from tests.test_import_tempo import tempo_trace, tempo_with
    from tests.test_import_zipkin import zipkin_trace, zipkin_with

    logs = serve(elasticsearch_with([_document(n, at) for n, at in enumerate(LOG_TIMES)]))
    traces = serve(tempo_with([tempo_trace(n, START + timedelta(minutes=10 + n)) for n in range(3)]))
    legacy = serve(zipkin_with([zipkin_trace(10 + n, START + timedelta(minutes=20 + n), service="email")
                                for n in range(2)]))
    config = tmp_path / "config.toml"
    config.write_text(f'[sources.elasticsearch]\nurl = "{logs.url}"\nindex = "filebeat-*"\n'
                      f'headers = {{ Authorization = "{SECRET}" }}\n\n[sources.tempo]\nurl = "{traces.url}"\n\n'
                      f'[sources.zipkin]\nurl = "{legacy.url}"\n', encoding="utf-8")
    out = tmp_path / "data"
    result = _import(config, out)
    assert result.exit_code == 0, result.output
    assert "sources: 3 of 3 pulled into" in result.output
    assert read_logs(out, start=START, end=END).frame.height == len(LOG_TIMES)
    spans = read_traces(out, start=START, end=END, naming=bundled_system().trace).frame
    assert spans.height == 5 * 3 and set(spans["service"].to_list()) == {"frontend", "cart", "email"}
    assert {r.headers.get("authorization") for r in logs.requests} == {SECRET}
    assert {r.headers.get("authorization") for r in traces.requests + legacy.requests} == {None}
    assert "s3cret" not in result.output

    asked = len(logs.requests) + len(traces.requests) + len(legacy.requests)
    again = _import(config, out)
    assert again.exit_code == 0, again.output
    assert len(logs.requests) + len(traces.requests) + len(legacy.requests) == asked  # every page on disk
