"""A system's ``[traces]`` names its spans' peers and services: the readers apply the description they
are given, and the importers of foreign trace formats name nothing themselves.

A user's OpenTelemetry export (gRPC services of a ``shop.v1`` package, a PostgreSQL database, a cache
whose service is called ``redis``) imported with ``rca import otlp`` / ``rca import jaeger``, read and
inferred with the user's own description; and HipsterShop's spans read with the bundled description
exactly as they always were.
"""
from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from app.cli import app
from preprocess.readers import read_traces
from rca.system import SystemSpecError, TraceNaming, bundled_system, load_system
from rca.timeutil import cst_day_bounds_utc
from tests import layout_fixtures as fx
from tests.otlp_spans import client_peers, export_line, import_export, otlp_span

runner = CliRunner()
T0 = datetime(2025, 6, 6, 10, 0, tzinfo=UTC)
WINDOW = {"start": T0, "end": T0 + timedelta(minutes=15)}
TRACES = 10
USER_SYSTEM = """\
[system]
name = "shop"
[services]
app = ["web", "orders"]
stateful = ["orders-db", "redis"]
[traces]
rpc_service = '^shop\\.v1\\.([A-Za-z]+)$'
db_system = { postgresql = "orders-db" }
"""




def _otlp_export() -> str:
    """web calls orders over gRPC (rpc.service only), orders calls PostgreSQL (db.system only) and its
    cache, a service of its own called ``redis`` (peer.service and db.system); one trace a minute."""
    lines = []
    for n in range(TRACES):
        trace, start = n + 1, int(T0.timestamp() * 1e6) + n * 60_000_000
        by_service = {
            "web": [otlp_span(trace, 1, None, name="GET /order", kind=2, start_us=start, attrs=[]),
                    otlp_span(trace, 2, 1, name="shop.v1.Orders/Place", kind=3, start_us=start + 10,
                               attrs=[("rpc.service", "shop.v1.Orders")])],
            "orders": [otlp_span(trace, 3, 2, name="shop.v1.Orders/Place", kind=2, start_us=start + 20,
                                  attrs=[("rpc.service", "shop.v1.Orders")]),
                       otlp_span(trace, 4, 3, name="INSERT orders", kind=3, start_us=start + 30,
                                  attrs=[("db.system", "postgresql")]),
                       otlp_span(trace, 5, 3, name="GET", kind=3, start_us=start + 40,
                                  attrs=[("db.system", "redis"), ("peer.service", "redis")]),
                       otlp_span(trace, 6, 3, name="SET", kind=3, start_us=start + 50,
                                  attrs=[("db.system", "redis")])],
            "redis": [otlp_span(trace, 7, 5, name="GET", kind=2, start_us=start + 45, attrs=[])],
        }
        lines.append(export_line(by_service))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def user_system(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("user-system") / "system.toml"
    path.write_text(USER_SYSTEM, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The export imported with ``rca import otlp``."""
    base = tmp_path_factory.mktemp("user-traces")
    return import_export(base, _otlp_export())




def test_the_users_rules_name_the_peers_of_an_imported_export(imported: Path, user_system: Path) -> None:
    spans = read_traces(imported, **WINDOW, naming=load_system(user_system).trace).frame
    assert spans.height == 7 * TRACES
    assert client_peers(spans) == {"shop.v1.Orders/Place": "orders", "INSERT orders": "orders-db",
                             "GET": "redis", "SET": None}  # the user's db_system has no redis
    assert set(spans["service"]) == {"web", "orders", "redis"}  # as the export names them


def test_without_rules_only_peer_service_names_a_peer(imported: Path) -> None:
    spans = read_traces(imported, **WINDOW, naming=TraceNaming(), peer_tags=True).frame
    assert client_peers(spans) == {"shop.v1.Orders/Place": None, "INSERT orders": None, "GET": "redis", "SET": None}
    assert set(spans["service"]) == {"web", "orders", "redis"}
    # The raw tags the import carried, for a rule to name the peers from when the dataset is read.
    tags = spans.filter(pl.col("span_kind") == "client").select("operation", "rpc_service", "db_system").unique()
    assert set(tags.iter_rows()) == {("shop.v1.Orders/Place", "shop.v1.Orders", None),
                                     ("INSERT orders", None, "postgresql"), ("GET", None, "redis"),
                                     ("SET", None, "redis")}


def test_hipstershops_rules_are_the_bundled_descriptions_applied_at_read_time(imported: Path) -> None:
    """The cache reporting itself as ``redis`` is HipsterShop's ``redis-cart`` only by HipsterShop's description."""
    spans = read_traces(imported, **WINDOW, naming=bundled_system().trace).frame
    assert set(spans["service"]) == {"web", "orders", "redis-cart"}
    assert client_peers(spans)["SET"] == "redis-cart" and client_peers(spans)["shop.v1.Orders/Place"] is None


def test_infer_with_the_users_description_drafts_the_calls(imported: Path, user_system: Path, tmp_path: Path) -> None:
    out = tmp_path / "draft.toml"
    result = runner.invoke(app, ["system", "infer", "--data-dir", str(imported), "--out", str(out),
                                 "--system", str(user_system)])
    assert result.exit_code == 0, result.output
    draft = load_system(out)
    assert ("web", "orders") in draft.calls
    assert ("orders", "orders-db") in draft.storage_calls and ("orders", "redis") in draft.storage_calls
    assert "redis-cart" not in draft.components
    assert draft.trace == load_system(user_system).trace  # the rules it read the spans with are kept


def test_infer_without_a_description_lists_what_no_rule_names(imported: Path, tmp_path: Path) -> None:
    out = tmp_path / "draft.toml"
    result = runner.invoke(app, ["system", "infer", "--data-dir", str(imported), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "name no peer" in result.output
    text = out.read_text(encoding="utf-8")
    # The cache call with a peer.service tag is named; the one without is listed.
    assert (f"# db.system values no peer names: postgresql ({TRACES} spans), redis ({TRACES} spans) -> "
            'db_system = { "postgresql" = "<component>", "redis" = "<component>" }') in text
    rpc_line = next(line for line in text.splitlines() if line.startswith("# rpc.service values no peer names: "))
    assert rpc_line.startswith(f"# rpc.service values no peer names: shop.v1.Orders ({TRACES} spans) -> ")
    draft = load_system(out)
    assert draft.trace == TraceNaming() and "redis" in draft.components and "redis-cart" not in draft.components
    # The suggested line, once uncommented, names the calls.
    suggested = re.fullmatch(r".* -> rpc_service = '(.+)'", rpc_line)
    assert suggested is not None
    spans = read_traces(imported, **WINDOW, naming=TraceNaming(rpc_service=suggested.group(1))).frame
    assert client_peers(spans)["shop.v1.Orders/Place"] == "orders"


def test_a_jaeger_service_named_redis_stays_redis(user_system: Path, tmp_path: Path) -> None:
    start = int(T0.timestamp() * 1e6)
    span = {"traceID": "1" * 32, "spanID": "2" * 16, "operationName": "GET", "references": [], "startTime": start,
            "duration": 5, "tags": [{"key": "span.kind", "type": "string", "value": "server"}], "processID": "p1"}
    client = {**span, "spanID": "3" * 16, "operationName": "HGET",
              "tags": [{"key": "span.kind", "type": "string", "value": "client"},
                       {"key": "db.system", "type": "string", "value": "redis"}]}
    doc = {"data": [{"traceID": "1" * 32, "processes": {"p1": {"serviceName": "redis", "tags": []}},
                     "spans": [span, client]}]}
    export = tmp_path / "jaeger.json"
    export.write_text(json.dumps(doc), encoding="utf-8")
    result = runner.invoke(app, ["import", "jaeger", str(export), "--out", str(tmp_path / "data")])
    assert result.exit_code == 0, result.output
    spans = read_traces(tmp_path / "data", **WINDOW, naming=load_system(user_system).trace).frame
    assert set(spans["service"]) == {"redis"}
    assert spans.filter(pl.col("span_kind") == "client")["peer_service"].to_list() == [None]


# What the layout fixture's first hour reads as with the bundled description, fixed: the rows
# every reader change must keep (the simulator and the 2025 release depend on them).
HIPSTERSHOP_ROWS = {
    ("/hipstershop.ProductCatalogService/ListProducts", "recommendationservice", "recommendationservice-2", "client",
     "productcatalogservice", None, False),
    ("/hipstershop.RecommendationService/ListRecommendations", "recommendationservice", "recommendationservice-2",
     "server", None, None, False),
    ("HGET", "cartservice", "cartservice-1", "client", "redis-cart", None, False),
    ("HGET", "redis-cart", "redis-cart-0", "client", "redis-cart", None, False),
    ("POST /hipstershop.CartService/GetCart", "cartservice", "cartservice-1", "server", None, 0, False),
    ("hipstershop.AdService/GetAds", "frontend", "frontend-0", "client", "adservice", 2, True),
    ("hipstershop.CartService/GetCart", "frontend", "frontend-0", "client", "cartservice", 0, False),
    ("hipstershop.CheckoutService/PlaceOrder", "checkoutservice", "checkoutservice-0", "server", None, 0, False),
    ("hipstershop.CheckoutService/PlaceOrder", "frontend", "frontend-0", "client", "checkoutservice", 0, False),
    ("hipstershop.Frontend/Recv.", "frontend", "frontend-0", "server", None, None, True),
    ("hipstershop.PaymentService/Charge", "checkoutservice", "checkoutservice-0", "client", "paymentservice", 0,
     False),
}


@pytest.mark.parametrize("fast", [True, False])
def test_the_bundled_description_reads_hipstershop_as_it_always_did(tmp_path: Path, fast: bool,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from preprocess import span_arrow

    if not fast:
        monkeypatch.setattr(span_arrow, "arrow_spans", lambda *args, **kwargs: None)
    fx.write_day(tmp_path, "2025-06-06")
    start, _ = cst_day_bounds_utc("2025-06-06")
    frame = read_traces(tmp_path, start=start, end=start + timedelta(hours=1) - timedelta(microseconds=1),
                        naming=bundled_system().trace).frame
    assert frame.height == fx.SPANS_PER_TRACE * 60 // fx.TRACE_EVERY_MIN
    columns = ["operation", "service", "pod", "span_kind", "peer_service", "status_code", "is_error"]
    assert set(frame.select(columns).iter_rows()) == HIPSTERSHOP_ROWS


def test_a_rule_the_trace_reader_cannot_run_is_named(tmp_path: Path) -> None:
    # Python's re takes look-ahead, the reader's regex engine does not: the field is named, no file is lost.
    with pytest.raises(SystemSpecError, match="traces.operation"):
        read_traces(tmp_path, **WINDOW, naming=TraceNaming(operation=r"(?=x)(\w+)/"))
    with pytest.raises(SystemSpecError, match="needs a group"):
        read_traces(tmp_path, **WINDOW, naming=TraceNaming(rpc_service=r"^shop\.v1\.\w+$"))
