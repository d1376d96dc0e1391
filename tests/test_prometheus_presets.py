"""``rca import prometheus --preset``: the preset files, ``--match``, the naming of nameless series, errors.

No Prometheus here (tests/test_prometheus_server.py runs the shipped presets against a real one): a
preset file of the user's is pulled from the small fake query API of tests/fake_http.py,
which answers series without ``__name__``, as ``rate()`` and ``sum()`` leave them.
"""
from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from app.cli import app
from preprocess.formats.metric_map import apm_kpi
from preprocess.formats.prom_presets import (
    MATCH_PLACEHOLDER,
    PresetError,
    load_preset,
    parse_matcher,
    parse_preset,
    preset_queries,
    shipped_presets,
)
from preprocess.formats.pull import named
from preprocess.readers import read_apm, read_infra
from preprocess.schema import POD_CLIENT_LATENCY_PREFIX
from simulate.metrics import NODE_KPIS, POD_KPIS
from tests.fake_http import FakeServer

runner = CliRunner()
T0 = datetime(2025, 6, 5, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=10)

MY_PRESET = """
about = "my shop's own"

[[series]]
name = "pod_cpu_usage"
about = "CPU of the pod, percent of one core"
query = 'sum by (pod) (rate(cpu_seconds_total{app="shop", <match>}[1m]))'

[[series]]
name = "apm_request"
about = "calls into the service, per minute"
query = '''
sum by (service) (increase(http_requests_total{<match>}[1m]))
'''
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- the shipped presets


def test_the_shipped_presets_are_found_and_load() -> None:
    assert shipped_presets() == ["istio", "kubernetes", "spanmetrics"]
    for name in shipped_presets():
        preset = load_preset(name)
        assert preset.about and preset.entries
        for entry in preset.entries:
            assert entry.about and "\n" not in entry.about and entry.query


def test_the_shipped_names_are_kpis_the_detectors_know() -> None:
    # The release's infra KPIs (the simulator writes exactly these), its APM columns, a pod's client latency.
    known = set(POD_KPIS) | set(NODE_KPIS)
    for name in shipped_presets():
        for entry in load_preset(name).entries:
            assert entry.name in known or apm_kpi(entry.name) is not None or \
                entry.name.startswith(POD_CLIENT_LATENCY_PREFIX), entry.name
    kubernetes = {entry.name for entry in load_preset("kubernetes").entries}
    assert {"pod_cpu_usage", "pod_memory_working_set_bytes", "node_cpu_usage_rate", "node_memory_usage_rate"} <= kubernetes
    istio = [entry.name for entry in load_preset("istio").entries]
    assert {"apm_request", "apm_error", "apm_error_ratio", "apm_rrt", "pod_client_latency_p99"} <= set(istio)


def test_pod_queries_are_scoped_by_match_and_node_queries_are_not() -> None:
    queries = preset_queries(["kubernetes", "istio", "spanmetrics"], matchers=['namespace="prod"'])
    for query in queries:
        assert MATCH_PLACEHOLDER not in query.query
        assert query.scoped == (not query.name.startswith("node_")), query.name
        assert ('namespace="prod"' in query.query) == query.scoped


# --------------------------------------------------------------------------- the placeholder and --match


def test_matchers_go_where_the_placeholder_is() -> None:
    preset = parse_preset(MY_PRESET, source="mine.toml")
    plain, scoped = preset.queries(), preset.queries(['namespace="prod"', "team=~'a|b'"])
    # None given: a trailing comma, or empty braces, both of which PromQL reads as no matcher.
    assert plain[0].query == 'sum by (pod) (rate(cpu_seconds_total{app="shop", }[1m]))'
    assert plain[1].query == "sum by (service) (increase(http_requests_total{}[1m]))"
    assert scoped[0].query == "sum by (pod) (rate(cpu_seconds_total{app=\"shop\", namespace=\"prod\", team=~'a|b'}[1m]))"
    assert [q.name for q in scoped] == ["pod_cpu_usage", "apm_request"] and all(q.scoped for q in scoped)


@pytest.mark.parametrize(("text", "expected"), [
    ('namespace="prod"', 'namespace="prod"'),
    (' namespace =~ "prod|staging" ', 'namespace=~"prod|staging"'),
    ("app!='web'", "app!='web'"),
    ('cluster!~"eu-.*"', 'cluster!~"eu-.*"'),
    ('path="a\\"b"', 'path="a\\"b"'),
])
def test_a_matcher_is_read_as_promql_writes_it(text: str, expected: str) -> None:
    assert parse_matcher(text) == expected


@pytest.mark.parametrize("text", ["namespace=prod", '"prod"', 'namespace="prod",app="web"', 'namespace=="prod"',
                                  '9ns="x"', 'namespace="prod'])
def test_a_malformed_matcher_is_refused(text: str) -> None:
    with pytest.raises(PresetError, match="--match"):
        parse_matcher(text)


# --------------------------------------------------------------------------- malformed presets


@pytest.mark.parametrize(("text", "message"), [
    ("about = 'x'\n[[series]\n", "invalid TOML"),
    ("about = 'x'\n", "no \\[\\[series\\]\\]"),
    ("abut = 'x'\n[[series]]\nname='a'\nabout='b'\nquery='up'\n", "unknown key"),
    ("[[series]]\nname='pod_cpu_usage'\nabout='x'\nquery='up'\n[[series]]\nname='apm_request'\nabout='y'\n",
     r"series\[1\] \(apm_request\): 'query' must be a non-empty string"),
    ("[[series]]\nname='pod cpu'\nabout='x'\nquery='up'\n", r"series\[0\] \(pod cpu\): name 'pod cpu' is not a metric"),
    ("[[series]]\nname='apm_latency'\nabout='x'\nquery='up'\n", r"series\[0\] \(apm_latency\): 'apm_latency' is no APM"),
    ("[[series]]\nname='up'\nabout='x'\nquery='up'\nunit='s'\n", r"series\[0\] \(up\): unknown key\(s\) unit"),
    ("[[series]]\nname='up'\nabout='x'\nquery='up{<match>, job=\"a\"}'\n", r"series\[0\] \(up\): <match> must be the last"),
    ("[[series]]\nname='up'\nabout='x'\nquery='up <match>'\n", "<match> must be the last"),
    ("series = ['up']\n", r"series\[0\]: not a table"),
])
def test_a_malformed_preset_is_named_with_its_entry(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path / "bad.toml", text)
    with pytest.raises(PresetError, match=message) as caught:
        load_preset(str(path))
    assert str(caught.value).startswith(str(path))


def test_an_unknown_preset_lists_the_shipped_ones(tmp_path: Path) -> None:
    with pytest.raises(PresetError) as caught:
        load_preset("kubernetez")
    assert "'kubernetez'" in str(caught.value) and "istio, kubernetes, spanmetrics" in str(caught.value)
    result = runner.invoke(app, ["import", "prometheus", "--url", "http://127.0.0.1:9", "--preset", "kubernetez",
                                 "--since", "1h", "--out", str(tmp_path / "data")])
    assert result.exit_code == 2 and "istio, kubernetes, spanmetrics" in result.output


# --------------------------------------------------------------------------- naming nameless series


def test_named_gives_every_series_the_entrys_name() -> None:
    answer = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"pod": "web-0"}, "values": [[1749081600, "1"]]},
        {"metric": {"__name__": "node_memory_MemTotal_bytes", "instance": "a:9100"}, "values": [[1749081600, "2"]]},
        {"values": [[1749081600, "3"]]},
    ]}}
    renamed = named(answer, "pod_cpu_usage")
    assert [s["metric"] for s in renamed["data"]["result"]] == [
        {"pod": "web-0", "__name__": "pod_cpu_usage"},
        {"__name__": "pod_cpu_usage", "instance": "a:9100"},
        {"__name__": "pod_cpu_usage"}]
    assert "__name__" not in answer["data"]["result"][0]["metric"]  # the answer itself is left as it was


def test_the_presets_are_package_data() -> None:
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    assert "presets/*.toml" in project["tool"]["setuptools"]["package-data"]["preprocess.formats"]


# --------------------------------------------------------------------------- the command, against a fake API


def _nameless(path: str, params: dict[str, str]) -> tuple[int, Any]:
    """A query_range answer, one series a query: without __name__ (a rate, a sum), but for ``up``."""
    if path != "/api/v1/query_range":
        return 404, "404 page not found"
    start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
    times = [start + i * step for i in range(int((end - start) // step) + 1)]
    query = params["query"]
    if "absent" in query:  # an exporter this server does not scrape
        return 200, {"status": "success", "data": {"resultType": "matrix", "result": []}}
    labels, value = (({"__name__": "up", "instance": "node-1:9100"}, "1") if query == "up" else
                     ({"pod": "web-0", "namespace": "prod"}, "12.5") if "cpu_seconds" in query else
                     ({"service": "web"}, "600"))
    return 200, {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": labels, "values": [[t, value] for t in times]}]}}


@pytest.fixture
def fake_prometheus() -> Iterator[FakeServer]:
    server = FakeServer(_nameless)
    yield server
    server.close()


def _import(server: FakeServer, out: Path, *more: str) -> Any:
    return runner.invoke(app, ["import", "prometheus", "--url", server.url, *more, "--start", T0.isoformat(),
                               "--end", T1.isoformat(), "--out", str(out)])


def test_a_users_preset_is_pulled_named_and_scoped(fake_prometheus: FakeServer, tmp_path: Path) -> None:
    preset, out = _write(tmp_path / "mine.toml", MY_PRESET), tmp_path / "data"
    result = _import(fake_prometheus, out, "--preset", str(preset), "--match", 'namespace="prod"', "--query", "up")
    assert result.exit_code == 0, result.output
    sent = [r.params["query"] for r in fake_prometheus.requests]
    assert sent == ["up", 'sum by (pod) (rate(cpu_seconds_total{app="shop", namespace="prod"}[1m]))',
                    'sum by (service) (increase(http_requests_total{namespace="prod"}[1m]))']
    # The nameless series are imported under the entries' names; the --query one keeps its own.
    infra = read_infra(out, start=T0, end=T1).frame
    assert infra.filter(pl.col("kpi_key") == "up")["component"].unique().to_list() == ["node-1"]
    cpu = infra.filter(pl.col("kpi_key") == "pod_cpu_usage")
    assert cpu["component"].unique().to_list() == ["web-0"] and cpu["value"].unique().to_list() == [12.5]
    assert cpu.height == 11
    apm = read_apm(out, start=T0, end=T1).frame
    assert apm["object_id"].unique().to_list() == ["web"] and apm["request"].unique().to_list() == [600.0]

    # Saved named, under a key holding the final query text and the name.
    saved = [json.loads(p.read_text()) for p in sorted((out / ".pulled" / "prometheus").glob("*.json"))]
    metas = {m["rca_pull"]["params"]["query"]: m["rca_pull"]["params"] for m in saved}
    assert metas[sent[1]]["name"] == "pod_cpu_usage" and "name" not in metas["up"]
    assert {s["metric"].get("__name__") for m in saved for s in m["data"]["result"]} == {
        "up", "pod_cpu_usage", "apm_request"}

    again = _import(fake_prometheus, out, "--preset", str(preset), "--match", 'namespace="prod"', "--query", "up")
    assert again.exit_code == 0 and len(fake_prometheus.requests) == 3  # all on disk
    other = _import(fake_prometheus, out, "--preset", str(preset), "--match", 'namespace="staging"')
    assert other.exit_code == 0 and len(fake_prometheus.requests) == 5  # other matchers: other queries, fetched
    assert 'namespace="staging"' in fake_prometheus.requests[-1].params["query"]


def test_preset_flags_are_checked(fake_prometheus: FakeServer, tmp_path: Path) -> None:
    out = tmp_path / "data"
    only_match = _import(fake_prometheus, out, "--query", "up", "--match", 'namespace="prod"')
    assert only_match.exit_code == 2 and "--match scopes the queries of a --preset" in only_match.output
    bad_match = _import(fake_prometheus, out, "--preset", "istio", "--match", "namespace=prod")
    assert bad_match.exit_code == 2 and "expected LABEL=\"VALUE\"" in bad_match.output
    broken = _write(tmp_path / "broken.toml", "[[series]]\nname='up'\nabout='x'\n")
    malformed = _import(fake_prometheus, out, "--preset", str(broken))
    assert malformed.exit_code == 2 and f"{broken}: series[0] (up): 'query'" in malformed.output
    nothing = _import(fake_prometheus, out)
    assert nothing.exit_code == 2 and "--query EXPR or --preset NAME" in nothing.output
    export = _write(tmp_path / "export.json", json.dumps({"status": "success", "data": {"resultType": "matrix",
                                                                                         "result": []}}))
    with_files = runner.invoke(app, ["import", "prometheus", str(export), "--preset", "istio", "--out", str(out)])
    assert with_files.exit_code == 2 and "only apply with --url" in with_files.output
    assert fake_prometheus.requests == []  # every error before the first request


def test_a_query_that_matches_nothing_is_noted_not_lost(fake_prometheus: FakeServer, tmp_path: Path) -> None:
    preset = _write(tmp_path / "absent.toml",
                    "[[series]]\nname = 'pod_processes'\nabout = 'processes'\nquery = 'sum by (pod) (absent_processes{<match>})'\n")
    result = _import(fake_prometheus, tmp_path / "data", "--preset", str(preset), "--query", "up")
    assert result.exit_code == 0, result.output
    assert "note: no series: query 2/2 pod_processes: sum by (pod) (absent_processes{})" in result.output
