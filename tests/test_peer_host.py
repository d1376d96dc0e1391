"""A client span names its peer by the host it connected to, when nothing before names one.

OpenTelemetry's instrumentation rarely sets ``peer.service`` but always records the host a client
connected to: ``server.address`` (``net.peer.name`` in older conventions; for an HTTP client perhaps
only ``url.full`` / ``http.url``). In Kubernetes that host is the callee's Service name, so a database,
a cache or any callee that is not traced itself joins the call graph (``TraceNaming.peer_host``).
"""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from app.cli import app
from preprocess import span_arrow
from preprocess.readers import _read_trace_file, _scan_schema, read_traces
from rca.system import TraceNaming, load_system
from tests.otlp_spans import client_peers, export_line, import_export, otlp_span

runner = CliRunner()
T0 = datetime(2025, 6, 6, 10, 0, tzinfo=UTC)
WINDOW = {"start": T0, "end": T0 + timedelta(minutes=15)}
TRACES = 4
SYSTEM = """\
[system]
name = "shop"
[services]
app = ["web", "orders", "payments"]
stateful = ["orders-db"]
[traces]
rpc_service = '^shop\\.v1\\.([A-Za-z]+)$'
"""

# Client span operation -> its attributes (the host only, or the host beside what names the peer first).
CLIENT_CALLS: dict[str, list[tuple[str, str]]] = {
    "INSERT orders": [("db.system", "postgresql"), ("server.address", "orders-db:5432")],
    "POST /pay": [("server.address", "payments.prod.svc.cluster.local")],
    "GET /ip": [("server.address", "10.0.0.7:8080")],
    "GET /v6": [("server.address", "[::1]:80")],
    "GET /local": [("server.address", "localhost")],
    # An explicit peer.service wins over the host (a gateway's), and so does the system's rule.
    "GET /explicit": [("peer.service", "ledger"), ("server.address", "gateway.prod.svc.cluster.local")],
    "shop.v1.Orders/Place": [("rpc.service", "shop.v1.Orders"), ("server.address", "gateway:443")],
}
HOST_PEERS = {"INSERT orders": "orders-db", "POST /pay": "payments", "GET /ip": None, "GET /v6": None,
              "GET /local": None, "GET /explicit": "ledger"}




def _otlp_export() -> str:
    """web serves a request and makes every call of ``CLIENT_CALLS``; orders serves the gRPC one and its server
    span carries a server.address too (its own name, not a peer). Nothing else is traced."""
    lines = []
    for n in range(TRACES):
        trace, start = n + 1, int(T0.timestamp() * 1e6) + n * 60_000_000
        web = [otlp_span(trace, 1, None, name="GET /checkout", kind=2, start_us=start,
                          attrs=[("server.address", "web.prod.svc.cluster.local")])]
        web += [otlp_span(trace, 2 + i, 1, name=name, kind=3, start_us=start + 10 * (i + 1), attrs=attrs)
                for i, (name, attrs) in enumerate(CLIENT_CALLS.items())]
        place = 2 + list(CLIENT_CALLS).index("shop.v1.Orders/Place")
        orders = [otlp_span(trace, 20, place, name="shop.v1.Orders/Place", kind=2, start_us=start + 100,
                             attrs=[("rpc.service", "shop.v1.Orders"), ("server.address", "gateway:443")])]
        lines.append(export_line({"web": web, "orders": orders}))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("shop-system") / "system.toml"
    path.write_text(SYSTEM, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The export imported with ``rca import otlp``."""
    base = tmp_path_factory.mktemp("host-traces")
    return import_export(base, _otlp_export())




@pytest.mark.parametrize("fast", [True, False])
def test_the_host_names_the_peer_without_any_rule(imported: Path, fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not fast:
        monkeypatch.setattr(span_arrow, "arrow_spans", lambda *args, **kwargs: None)
    spans = read_traces(imported, **WINDOW, naming=TraceNaming()).frame
    assert spans.height == TRACES * (2 + len(CLIENT_CALLS))
    # No rule names the gRPC call: its host (a gateway's) does.
    assert client_peers(spans) == {**HOST_PEERS, "shop.v1.Orders/Place": "gateway"}
    # A server span's host is its own name, not a peer.
    assert spans.filter(pl.col("span_kind") == "server")["peer_service"].null_count() == 2 * TRACES


def test_the_systems_rules_win_over_the_host(imported: Path, system: Path) -> None:
    spans = read_traces(imported, **WINDOW, naming=load_system(system).trace).frame
    assert client_peers(spans) == {**HOST_PEERS, "shop.v1.Orders/Place": "orders"}


def test_peer_host_false_turns_the_host_rule_off(imported: Path, tmp_path: Path) -> None:
    path = tmp_path / "system.toml"
    path.write_text(SYSTEM + "peer_host = false\n", encoding="utf-8")
    naming = load_system(path).trace
    assert naming.peer_host is False
    spans = read_traces(imported, **WINDOW, naming=naming).frame
    assert client_peers(spans) == {**dict.fromkeys(HOST_PEERS), "GET /explicit": "ledger", "shop.v1.Orders/Place": "orders"}


def test_the_import_carries_the_host_of_client_spans_as_written(imported: Path) -> None:
    spans = read_traces(imported, **WINDOW, naming=TraceNaming(peer_host=False), peer_tags=True).frame
    hosts = dict(spans.filter(pl.col("span_kind") == "client").select("operation", "peer_host").unique().iter_rows())
    assert hosts == {name: dict(attrs)["server.address"] for name, attrs in CLIENT_CALLS.items()}
    assert spans.filter(pl.col("span_kind") == "server")["peer_host"].null_count() == 2 * TRACES


def test_infer_drafts_the_calls_to_untraced_callees(imported: Path, tmp_path: Path) -> None:
    out = tmp_path / "draft.toml"
    result = runner.invoke(app, ["system", "infer", "--data-dir", str(imported), "--out", str(out)])
    assert result.exit_code == 0, result.output
    draft = load_system(out)
    # orders-db and payments never serve a span: the host alone names them.
    assert ("web", "orders-db") in draft.storage_calls and "orders-db" in draft.stateful
    assert ("web", "payments") in draft.calls and "payments" in draft.client_only
    assert ("web", "ledger") in draft.calls and ("web", "gateway") in draft.calls
    text = out.read_text(encoding="utf-8")
    # The hosts no rule names are listed; the ones the host rule named are not.
    line = next(line for line in text.splitlines() if line.startswith("# server.address values no peer names: "))
    assert line == (f"# server.address values no peer names: 10.0.0.7:8080 ({TRACES} spans), [::1]:80 ({TRACES} spans), "
                    f"localhost ({TRACES} spans) -> none: no rule names an IP address or localhost "
                    "(a peer.service attribute would)")
    assert "orders-db:5432" not in text and "peer_host" not in draft.trace.model_dump(exclude_defaults=True)


def test_infer_with_the_host_rule_off_suggests_it(imported: Path, tmp_path: Path) -> None:
    path = tmp_path / "system.toml"
    path.write_text(SYSTEM + "peer_host = false\n", encoding="utf-8")
    out = tmp_path / "draft.toml"
    result = runner.invoke(app, ["system", "infer", "--data-dir", str(imported), "--out", str(out),
                                 "--system", str(path)])
    assert result.exit_code == 0, result.output
    draft = load_system(out)
    assert draft.trace.peer_host is False  # the rules the spans were read with are kept
    assert "orders-db" not in draft.components
    line = next(line for line in out.read_text(encoding="utf-8").splitlines()
                if line.startswith("# server.address values no peer names: "))
    assert "orders-db:5432" in line and line.endswith("-> peer_host = true")


def _jaeger(tmp_path: Path, client_tags: dict[str, str], server_tags: dict[str, str] | None = None) -> Path:
    """A Jaeger query-API document: cart serves a request and calls out once, tagged ``client_tags``."""
    start = int(T0.timestamp() * 1e6)

    def tags(kind: str, extra: dict[str, str]) -> list[dict]:
        return [{"key": k, "type": "string", "value": v} for k, v in {"span.kind": kind, **extra}.items()]

    server = {"traceID": "1" * 32, "spanID": "2" * 16, "operationName": "GET /cart", "references": [],
              "startTime": start, "duration": 50, "tags": tags("server", server_tags or {}), "processID": "p1"}
    client = {**server, "spanID": "3" * 16, "operationName": "call", "startTime": start + 5,
              "references": [{"refType": "CHILD_OF", "traceID": "1" * 32, "spanID": "2" * 16}],
              "tags": tags("client", client_tags)}
    doc = {"data": [{"traceID": "1" * 32, "processes": {"p1": {"serviceName": "cart", "tags": []}},
                     "spans": [server, client]}]}
    export = tmp_path / "jaeger.json"
    export.write_text(json.dumps(doc), encoding="utf-8")
    result = runner.invoke(app, ["import", "jaeger", str(export), "--out", str(tmp_path / "data")])
    assert result.exit_code == 0, result.output
    return tmp_path / "data"


@pytest.mark.parametrize(("client_tags", "peer", "host"), [
    ({"net.peer.name": "redis-cart", "net.peer.port": "6379"}, "redis-cart", "redis-cart"),
    ({"net.peer.name": "Currency.Default.svc.cluster.local."}, "currency", "Currency.Default.svc.cluster.local."),
    ({"http.url": "http://ts-order-service:12031/api/v1/orders?id=7"}, "ts-order-service", "ts-order-service:12031"),
    ({"url.full": "https://user@payments.prod:8443/charge"}, "payments", "payments.prod:8443"),
    ({"http.url": "http://10.0.0.7:8080/x"}, None, "10.0.0.7:8080"),
    ({"http.url": "/relative/path"}, None, None),
    # server.address first, then net.peer.name, then the URL.
    ({"server.address": "", "net.peer.name": "b", "http.url": "http://c/"}, "b", "b"),
    ({"http.url": "payments/pay", "url.full": "/pay"}, None, None),  # not absolute URLs
    ({"http.url": "http://c/", "net.peer.name": "b", "server.address": "a:1"}, "a", "a:1"),
])
def test_a_jaeger_export_names_the_peer_from_the_older_conventions(
        tmp_path: Path, client_tags: dict[str, str], peer: str | None, host: str | None) -> None:
    data = _jaeger(tmp_path, client_tags, server_tags={"net.peer.name": "frontend"})  # a server span's caller
    spans = read_traces(data, **WINDOW, naming=TraceNaming(), peer_tags=True).frame
    client = spans.filter(pl.col("span_kind") == "client")
    assert client.select("peer_service", "peer_host").rows() == [(peer, host)]
    assert spans.filter(pl.col("span_kind") == "server").select("peer_service", "peer_host").rows() == [(None, None)]


def test_a_zipkin_export_names_the_peer_from_server_address_not_the_remote_ip(tmp_path: Path) -> None:
    start = int(T0.timestamp() * 1e6)
    spans = [{"traceId": "1" * 32, "id": f"{n:016x}", "name": f"call {n}", "kind": "CLIENT", "timestamp": start + n,
              "duration": 10, "localEndpoint": {"serviceName": "cart"}, "remoteEndpoint": remote, "tags": tags}
             for n, (remote, tags) in enumerate([
                 ({"ipv4": "10.0.0.9", "port": 6379}, {"server.address": "redis-cart:6379"}),
                 ({"ipv4": "10.0.0.9", "port": 6379}, {}),
                 ({"serviceName": "ledger", "ipv4": "10.0.0.9"}, {"server.address": "gateway"}),
             ], start=1)]
    export = tmp_path / "zipkin.json"
    export.write_text(json.dumps(spans), encoding="utf-8")
    result = runner.invoke(app, ["import", "zipkin", str(export), "--out", str(tmp_path / "data")])
    assert result.exit_code == 0, result.output
    frame = read_traces(tmp_path / "data", **WINDOW, naming=TraceNaming()).frame
    assert dict(frame.select("operation", "peer_service").iter_rows()) == {
        "call 1": "redis-cart", "call 2": None, "call 3": "ledger"}


_KV = pl.List(pl.Struct({"key": pl.Utf8, "type": pl.Utf8, "value": pl.Utf8}))
_REF = pl.List(pl.Struct({"refType": pl.Utf8, "spanID": pl.Utf8, "traceID": pl.Utf8}))


def test_both_readers_name_peers_from_urls_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A release-layout file whose client spans carry URLs (every one its own path): the fast path cuts them
    to their host before it groups spans, and reads what the general path reads."""
    us = int(T0.timestamp() * 1e6)
    urls = [f"http://ts-order-service:12031/api/v1/orders/{n}?q={n}" for n in range(40)]
    urls += ["https://Payments.prod.svc.cluster.local/charge", "http://[::1]:80/x", "not a url", None]
    tags = [[{"key": "span.kind", "type": "string", "value": "client"},
             *([{"key": "http.url", "type": "string", "value": url}] if url is not None else []),
             *([{"key": "url.full", "type": "string", "value": "http://other/"}] if n % 7 == 0 and n < 40 else [])]
            for n, url in enumerate(urls)]
    tags.append([{"key": "span.kind", "type": "string", "value": "client"},
                 {"key": "net.peer.name", "type": "string", "value": "cart"},
                 {"key": "http.url", "type": "string", "value": "http://ignored/"}])
    tags.append([{"key": "span.kind", "type": "string", "value": "client"},
                 {"key": "server.address", "type": "string", "value": ""},
                 {"key": "url.full", "type": "string", "value": "orders/x"},  # not an absolute URL
                 {"key": "http.url", "type": "string", "value": "http://Orders.x:80/y"}])
    frame = pl.DataFrame({
        "traceID": ["t"] * len(tags), "spanID": [f"{n:016x}" for n in range(len(tags))],
        "operationName": ["call"] * len(tags), "references": [[] for _ in tags],
        "startTime": [us + n for n in range(len(tags))], "duration": [10] * len(tags), "tags": tags,
        "process": [{"serviceName": "web", "tags": [{"key": "name", "type": "string", "value": "web-0"}]}] * len(tags),
    }, schema_overrides={"tags": _KV, "references": _REF})
    path = tmp_path / "spans.parquet"
    frame.write_parquet(path)
    naming = TraceNaming()
    assert span_arrow.arrow_spans(path, window=None, naming=naming) is not None, "the fast path declined the file"
    combinations: list[int] = []
    distinct_rows = span_arrow.distinct_rows

    def counted(columns: list[span_arrow._Coded], *, rows: int) -> tuple[np.ndarray, np.ndarray]:
        found = distinct_rows(columns, rows=rows)
        combinations.append(len(found[1]))
        return found

    with monkeypatch.context() as patch:
        patch.setattr(span_arrow, "distinct_rows", counted)
        fast = _read_trace_file(path, _scan_schema(path), window=None, naming=naming, peer_tags=True)
    assert combinations == [8]  # the 40 order URLs are two (with and without url.full): their host
    with monkeypatch.context() as patch:
        patch.setattr(span_arrow, "arrow_spans", lambda *args, **kwargs: None)
        general = _read_trace_file(path, _scan_schema(path), window=None, naming=naming, peer_tags=True)
    assert_frame_equal(fast, general)
    peers = fast["peer_service"].to_list()
    assert peers[0] == "other" and peers[1] == "ts-order-service"  # url.full before http.url
    assert peers[40:] == ["payments", None, None, None, "cart", "orders"]
    assert fast["peer_host"].to_list()[40:] == ["Payments.prod.svc.cluster.local", "[::1]:80", None, None, "cart",
                                                "Orders.x:80"]
