"""``rca import prometheus --preset``: the preset files, ``--match``, ``--rate-window``, the naming of nameless
series, errors.

No Prometheus here (tests/test_prometheus_server.py runs the shipped presets against a real one): a
preset file of the user's is pulled from the small fake query API of tests/fake_http.py,
which answers series without ``__name__``, as ``rate()`` and ``sum()`` leave them.
"""
from __future__ import annotations

import json
import re
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
    DEFAULT_RATE_WINDOW,
    MATCH_PLACEHOLDER,
    WINDOW_PLACEHOLDER,
    PresetError,
    load_preset,
    parse_matcher,
    parse_preset,
    preset_queries,
    promql_duration,
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


MY_WINDOWED = """
[[series]]
name = "pod_cpu_usage"
about = "CPU of the pod, percent of one core"
query = 'sum by (pod) (rate(cpu_seconds_total{app="shop", <match>}[<window>]))'

[[series]]
name = "pod_processes"
about = "most processes of the pod over the window"
query = 'sum by (pod) (max_over_time(processes{<match>}[ <window> ]))'

[[series]]
name = "container_processes"
about = "processes of the pod"
query = 'sum by (pod) (processes{<match>})'

[[series]]
name = "pod_busy_seconds"
about = "seconds busy, per second (a label value that looks like a range is no range)"
query = 'sum by (pod) (rate(seconds_total{job="a[1m]", }[<window>]))'
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


# A range written out in PromQL ([1m], [90s], [1h30m]), and the functions that take a range.
RANGE = re.compile(r"\[\s*[^\]]*\]")
RANGE_FUNCTIONS = re.compile(r"\b(rate|irate|increase|delta|idelta|deriv|changes|resets|\w+_over_time)\s*\(")


@pytest.mark.parametrize("window", [DEFAULT_RATE_WINDOW, timedelta(minutes=4), timedelta(seconds=90)])
def test_every_shipped_range_is_the_rate_window(window: timedelta) -> None:
    spelled, per_minute = promql_duration(window), []
    for query in preset_queries(shipped_presets(), matchers=['namespace="prod"'], window=window):
        assert WINDOW_PLACEHOLDER not in query.query and MATCH_PLACEHOLDER not in query.query, query.name
        ranges = RANGE.findall(query.query)
        # Every range of every shipped query is the window (none written out, which --rate-window would not
        # reach), and a query holds one exactly when it takes a rate.
        assert ranges == [f"[{spelled}]"] * len(ranges), (query.name, ranges)
        assert bool(ranges) == bool(RANGE_FUNCTIONS.search(query.query)) == (query.window == window), query.name
        assert query.fixed_range is None
        # increase() counts over the whole range: a per-minute count written so would grow with the window.
        assert "increase(" not in query.query, query.name
        if query.about.endswith("per minute"):
            assert re.match(r"(label_replace\(\s*)?60 \* ", query.query), query.name
            per_minute.append(query.name)
    assert set(per_minute) == {"apm_request", "apm_error", "apm_timeout"}


def test_the_default_window_is_the_one_minute_the_presets_always_had() -> None:
    default = preset_queries(["kubernetes"])
    assert promql_duration(DEFAULT_RATE_WINDOW) == "1m"
    assert default[0].query == ('100 * sum by (namespace, pod, node, instance) (rate(container_cpu_usage_seconds_total'
                                '{container!="", container!="POD", }[1m]))')
    assert [q.query for q in default] == [q.query for q in preset_queries(["kubernetes"], window=timedelta(minutes=1))]


@pytest.mark.parametrize(("window", "spelled"), [
    (timedelta(minutes=1), "1m"), (timedelta(minutes=4), "4m"), (timedelta(seconds=90), "90s"),
    (timedelta(hours=1, minutes=30), "90m"), (timedelta(hours=2), "2h"), (timedelta(days=1), "1d"),
    (timedelta(milliseconds=1500), "1500ms"),
])
def test_a_window_is_written_in_one_promql_unit(window: timedelta, spelled: str) -> None:
    assert promql_duration(window) == spelled


@pytest.mark.parametrize("window", [timedelta(0), timedelta(minutes=-1), timedelta(microseconds=100),
                                    timedelta(milliseconds=1, microseconds=1)])
def test_a_window_promql_cannot_take_is_refused_naming_the_flag(window: timedelta) -> None:
    with pytest.raises(PresetError, match="^--rate-window .*: must be a positive duration of whole milliseconds"):
        preset_queries(["kubernetes"], window=window)


def test_a_users_ranges_written_out_are_kept_whatever_the_window() -> None:
    preset = parse_preset(MY_PRESET, source="mine.toml")
    wide = preset.queries(window=timedelta(minutes=4))
    assert [q.query for q in wide] == [q.query for q in preset.queries()]
    assert wide[0].query == 'sum by (pod) (rate(cpu_seconds_total{app="shop", }[1m]))'
    assert [(q.window, q.fixed_range) for q in wide] == [(None, "[1m]"), (None, "[1m]")]
    # The note on an empty one says where the window would go.
    assert wide[0].if_empty == ("a rate over [1m] needs two samples inside it: if the scrape interval is half of "
                                "it or more, write the preset's ranges as [<window>] and give --rate-window "
                                "(four scrape intervals)")


def test_a_users_preset_may_use_the_window() -> None:
    preset = parse_preset(MY_WINDOWED, source="mine.toml")
    four = preset.queries(['namespace="prod"'], window=timedelta(minutes=4))
    assert [q.query for q in four] == [
        'sum by (pod) (rate(cpu_seconds_total{app="shop", namespace="prod"}[4m]))',
        'sum by (pod) (max_over_time(processes{namespace="prod"}[ 4m ]))',  # spaces kept, as written
        'sum by (pod) (processes{namespace="prod"})',
        'sum by (pod) (rate(seconds_total{job="a[1m]", }[4m]))']
    assert [q.window for q in four] == [timedelta(minutes=4)] * 2 + [None, timedelta(minutes=4)]
    assert four[2].if_empty == "" and four[2].fixed_range is None  # no rate: nothing to say about a window
    assert four[0].if_empty == ("a rate over [4m] needs two samples inside 4m: if the scrape interval is 2m or "
                                "more, give --rate-window 16m (four scrape intervals of 4m)")
    assert preset.queries()[0].if_empty == ("a rate over [1m] needs two samples inside 1m: if the scrape interval "
                                            "is 30s or more, give --rate-window 4m (four scrape intervals of 1m)")


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
    ("[[series]]\nname='up'\nabout='x'\nquery='rate(up[<window>:1m])'\n",
     r"series\[0\] \(up\): <window> must stand alone inside a range's brackets"),
    ("[[series]]\nname='up'\nabout='x'\nquery='rate(up[<window>]) + rate(up<window>)'\n",
     "<window> must stand alone"),
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
    only_window = _import(fake_prometheus, out, "--query", "up", "--rate-window", "4m")
    assert only_window.exit_code == 2 and "--rate-window sets the range of a --preset's rates" in only_window.output
    for window, message in (("0s", "--rate-window '0s': a duration must be positive"),
                            ("-1m", "--rate-window '-1m' is not a duration"),
                            ("soon", "--rate-window 'soon' is not a duration"),
                            ("0", "--rate-window '0': must be a positive number of seconds"),
                            ("0.0001", "--rate-window 0.0001s: must be a positive duration of whole milliseconds")):
        refused = _import(fake_prometheus, out, "--preset", "istio", f"--rate-window={window}")
        assert refused.exit_code == 2 and message in refused.output, (window, refused.output)
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
    window_with_files = runner.invoke(app, ["import", "prometheus", str(export), "--rate-window", "4m", "--out",
                                            str(out)])
    assert window_with_files.exit_code == 2 and "--rate-window only apply with --url" in window_with_files.output
    assert fake_prometheus.requests == []  # every error before the first request


def test_a_query_that_matches_nothing_is_noted_not_lost(fake_prometheus: FakeServer, tmp_path: Path) -> None:
    preset = _write(tmp_path / "absent.toml",
                    "[[series]]\nname = 'pod_processes'\nabout = 'processes'\nquery = 'sum by (pod) (absent_processes{<match>})'\n")
    result = _import(fake_prometheus, tmp_path / "data", "--preset", str(preset), "--query", "up")
    assert result.exit_code == 0, result.output
    assert "note: no series: query 2/2 pod_processes: sum by (pod) (absent_processes{})" in result.output


MY_WINDOWED_PRESET = MY_PRESET.replace("[1m]", f"[{WINDOW_PLACEHOLDER}]") + """
[[series]]
name = "pod_network_receive_bytes"
about = "bytes the pod received, per second"
query = 'sum by (pod) (rate(absent_receive_bytes_total{<match>}[<window>]))'
"""


def test_rate_window_sets_the_presets_ranges_and_so_the_pages(fake_prometheus: FakeServer, tmp_path: Path) -> None:
    windowed, fixed = _write(tmp_path / "windowed.toml", MY_WINDOWED_PRESET), _write(tmp_path / "mine.toml", MY_PRESET)
    out = tmp_path / "data"
    result = _import(fake_prometheus, out, "--preset", str(windowed), "--preset", str(fixed), "--rate-window", "4m")
    assert result.exit_code == 0, result.output
    sent = [r.params["query"] for r in fake_prometheus.requests]
    assert sent == ['sum by (pod) (rate(cpu_seconds_total{app="shop", }[4m]))',
                    "sum by (service) (increase(http_requests_total{}[4m]))",
                    "sum by (pod) (rate(absent_receive_bytes_total{}[4m]))",
                    # The user's file that writes its ranges out keeps them, and the command says so.
                    'sum by (pod) (rate(cpu_seconds_total{app="shop", }[1m]))',
                    "sum by (service) (increase(http_requests_total{}[1m]))"]
    assert f"preset {windowed}: 3 queries\n" in result.output
    assert f"preset {fixed}: 2 queries (ranges written out, not set by --rate-window: pod_cpu_usage, apm_request)" \
        in result.output
    # The empty rate is noted, on one line, with why it may be empty and the window to try.
    assert ("  note: no series: query 3/5 pod_network_receive_bytes: sum by (pod) (rate(absent_receive_bytes_total{}"
            "[4m])); a rate over [4m] needs two samples inside 4m: if the scrape interval is 2m or more, give "
            "--rate-window 16m (four scrape intervals of 4m)\n") in result.output

    # The same window, however spelled, is the same queries: on disk. Another is other queries, fetched.
    again = _import(fake_prometheus, out, "--preset", str(windowed), "--preset", str(fixed), "--rate-window", "240")
    assert again.exit_code == 0 and len(fake_prometheus.requests) == 5, again.output
    other = _import(fake_prometheus, out, "--preset", str(windowed), "--preset", str(fixed), "--rate-window", "5m")
    assert other.exit_code == 0 and len(fake_prometheus.requests) == 8
    assert [r.params["query"] for r in fake_prometheus.requests[5:]] == [
        query.replace("[4m]", "[5m]") for query in sent[:3]]


def test_an_empty_rate_over_the_default_window_says_to_widen_it(fake_prometheus: FakeServer, tmp_path: Path) -> None:
    preset = _write(tmp_path / "windowed.toml", MY_WINDOWED_PRESET)
    result = _import(fake_prometheus, tmp_path / "data", "--preset", str(preset))
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if "note:" in line]
    assert notes == ["  note: no series: query 3/3 pod_network_receive_bytes: sum by (pod) (rate("
                     "absent_receive_bytes_total{}[1m])); a rate over [1m] needs two samples inside 1m: if the scrape "
                     "interval is 30s or more, give --rate-window 4m (four scrape intervals of 1m)"]
    assert "ranges written out" not in result.output  # --rate-window not given: nothing to warn about
