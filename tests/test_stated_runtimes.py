"""`rca system infer` drafts a service's runtime from the language its spans' instrumentation states.

Every OpenTelemetry SDK states it in the resource attribute ``telemetry.sdk.language`` (``java``,
``dotnet`` ...); a Jaeger client in the process tag ``jaeger.version`` (``Go-2.30.0``), and OTel spans
exported to Jaeger carry ``telemetry.sdk.language`` among the process tags. The trace importers carry
the value as written (``sdk_language``); infer maps it to a runtime, before JVM metrics and log signs.
"""
from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from app.cli import app
from preprocess import span_arrow
from preprocess.dataset_writer import write_frames
from preprocess.infer_system import infer_system, stated_runtime
from preprocess.readers import read_traces
from preprocess.schema import SPAN_SCHEMA, language_key
from rca.system import TraceNaming, load_system
from tests.otlp_spans import attr, import_export, otlp_span

runner = CliRunner()
T0 = datetime(2025, 6, 6, 10, 0, tzinfo=UTC)
WINDOW = {"start": T0, "end": T0 + timedelta(minutes=15)}
TRACES = 4


def _resource(service: str, attrs: list[tuple[str, str]], spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resource": {"attributes": [attr("service.name", service), attr("k8s.pod.name", f"{service}-0"),
                                        *(attr(k, v) for k, v in attrs)]},
            "scopeSpans": [{"spans": spans}]}


def _otlp_export() -> str:
    """web (a Python SDK) calls orders (the Java agent) and cart; cart runs as two deployments under one
    service name, a Go one (three spans a trace) and a Node.js one (one); orders calls ledger (Rust)."""
    lines = []
    for n in range(TRACES):
        trace, start = n + 1, int(T0.timestamp() * 1e6) + n * 60_000_000

        def span(number: int, parent: int | None, kind: int, name: str, trace: int = trace,
                 start: int = start) -> dict[str, Any]:
            return otlp_span(trace, number, parent, name=name, kind=kind, start_us=start + number,
                             attrs=[("peer.service", "orders")] if kind == 3 else [])

        lines.append(json.dumps({"resourceSpans": [
            _resource("web", [("telemetry.sdk.language", "python"), ("telemetry.sdk.name", "opentelemetry")],
                      [span(1, None, 2, "GET /checkout"), span(2, 1, 3, "POST /orders")]),
            _resource("orders", [("telemetry.sdk.language", "java"),
                                 ("process.runtime.name", "OpenJDK Runtime Environment")],
                      [span(3, 2, 2, "POST /orders")]),
            _resource("cart", [("telemetry.sdk.language", "go")],
                      [span(4, 1, 2, "GetCart"), span(5, 1, 2, "AddItem"), span(6, 1, 2, "EmptyCart")]),
            _resource("cart", [("telemetry.sdk.language", "nodejs")], [span(7, 1, 2, "GetCart")]),
            _resource("ledger", [("telemetry.sdk.language", "rust")], [span(8, 3, 2, "Record")]),
        ]}))
    return "\n".join(lines) + "\n"


def _jaeger_span(trace: int, number: int, parent: int | None, *, process: str) -> dict[str, Any]:
    """One Jaeger server span of trace ``trace``, ids made of the trace and span numbers."""
    trace_id = f"{trace:032x}"
    return {"traceID": trace_id, "spanID": f"{trace:08x}{number:08x}", "operationName": f"op{number}",
            "references": ([{"refType": "CHILD_OF", "traceID": trace_id, "spanID": f"{trace:08x}{parent:08x}"}]
                           if parent else []),
            "startTime": int(T0.timestamp() * 1e6) + trace * 60_000_000 + number, "duration": 500,
            "processID": process, "tags": [{"key": "span.kind", "type": "string", "value": "server"}]}


def _tags(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"key": key, "type": "string", "value": value} for key, value in pairs]


def _jaeger_export() -> dict[str, Any]:
    """checkout (an OpenTelemetry SDK exporting to Jaeger) calls payments (a Jaeger Go client) and shipping
    (whose process states nothing)."""
    processes = {
        "p1": {"serviceName": "checkout", "tags": _tags(("name", "checkout-0"), ("telemetry.sdk.language", "java"),
                                                        ("telemetry.sdk.name", "opentelemetry"))},
        "p2": {"serviceName": "payments", "tags": _tags(("jaeger.version", "Go-2.30.0"), ("hostname", "payments-0"))},
        "p3": {"serviceName": "shipping", "tags": _tags(("name", "shipping-0"))},
    }
    return {"data": [{"traceID": f"{trace:032x}", "processes": processes, "spans": [
        _jaeger_span(trace, 1, None, process="p1"), _jaeger_span(trace, 2, 1, process="p2"),
        _jaeger_span(trace, 3, 1, process="p3")]} for trace in range(1, TRACES + 1)]}


@pytest.fixture(scope="module")
def otlp_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The OTLP export imported with ``rca import otlp``."""
    return import_export(tmp_path_factory.mktemp("stated-otlp"), _otlp_export())


@pytest.fixture(scope="module")
def jaeger_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Jaeger document imported with ``rca import jaeger``."""
    base = tmp_path_factory.mktemp("stated-jaeger")
    export = base / "jaeger.json"
    export.write_text(json.dumps(_jaeger_export()), encoding="utf-8")
    result = runner.invoke(app, ["import", "jaeger", str(export), "--out", str(base / "data")])
    assert result.exit_code == 0, result.output
    return base / "data"


def _stated(data: Path) -> dict[str, set[str | None]]:
    """Service -> the languages its spans state, as read back from the dataset."""
    spans = read_traces(data, **WINDOW, naming=TraceNaming(), peer_tags=True).frame
    found: dict[str, set[str | None]] = {}
    for service, language in spans.select("service", "sdk_language").iter_rows():
        found.setdefault(service, set()).add(language)
    return found


def _draft(data: Path, out: Path, *args: str) -> str:
    result = runner.invoke(app, ["system", "infer", "--data-dir", str(data), "--out", str(out), *args])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def _runtime_lines(text: str) -> list[str]:
    """The drafted ``[runtimes]`` table's lines (comments too), up to the next table."""
    lines = text.splitlines()
    start = lines.index("[runtimes]")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("["))
    return [line for line in lines[start + 1:end] if line]


@pytest.mark.parametrize("fast", [True, False])
def test_the_imports_carry_the_stated_language_as_written(otlp_data: Path, jaeger_data: Path, fast: bool,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    if not fast:
        monkeypatch.setattr(span_arrow, "arrow_spans", lambda *args, **kwargs: None)
    assert _stated(otlp_data) == {"web": {"python"}, "orders": {"java"}, "cart": {"go", "nodejs"}, "ledger": {"rust"}}
    assert _stated(jaeger_data) == {"checkout": {"java"}, "payments": {"Go-2.30.0"}, "shipping": {None}}


def test_infer_drafts_the_runtimes_an_otlp_export_states(otlp_data: Path, tmp_path: Path) -> None:
    text = _draft(otlp_data, tmp_path / "system.toml")
    spec = load_system(tmp_path / "system.toml")
    # ledger states rust: no runtime with fault types of its own, not written.
    assert spec.runtimes == {"web": "python", "orders": "java", "cart": "go"}
    assert "jvm exception" in spec.applicable_fault_types("orders")
    assert "jvm exception" not in spec.applicable_fault_types("web")
    assert _runtime_lines(text)[1:] == [
        # cart states two languages: the most frequent wins, and the comment says both.
        f'# spans: telemetry.sdk.language = "go" ({3 * TRACES} spans), "nodejs" ({TRACES} spans)',
        '"cart" = "go"',
        '# spans: telemetry.sdk.language = "java"',
        '"orders" = "java"',
        '# spans: telemetry.sdk.language = "python"',
        '"web" = "python"',
    ]


def test_a_language_that_is_no_runtime_is_logged_not_drafted(otlp_data: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="preprocess.infer_system"):
        inferred = infer_system(otlp_data)
    assert "ledger" in inferred.services and "ledger" not in inferred.runtimes
    assert [record.levelno for record in caplog.records if "ledger (rust)" in record.getMessage()] == [logging.INFO]


def test_infer_drafts_the_runtimes_a_jaeger_export_states(jaeger_data: Path, tmp_path: Path) -> None:
    text = _draft(jaeger_data, tmp_path / "system.toml")
    assert load_system(tmp_path / "system.toml").runtimes == {"checkout": "java", "payments": "go"}
    assert _runtime_lines(text)[1:] == [
        '# spans: telemetry.sdk.language = "java"',
        '"checkout" = "java"',
        '# spans: jaeger.version = "Go-2.30.0"',
        '"payments" = "go"',
    ]


def test_a_runtime_given_by_name_still_wins(otlp_data: Path, tmp_path: Path) -> None:
    """orders is given otherwise than its spans say: the person wins and the comment keeps what the data said;
    web is given as its spans say: their evidence stays; '*' fills only ledger, which states no runtime here."""
    text = _draft(otlp_data, tmp_path / "system.toml", "--runtime", "orders=go", "--runtime", "web=python",
                  "--runtime", "*=nodejs")
    assert load_system(tmp_path / "system.toml").runtimes == {
        "web": "python", "orders": "go", "cart": "go", "ledger": "nodejs"}
    lines = _runtime_lines(text)
    assert lines[lines.index('"orders" = "go"') - 1] == (
        '# given: --runtime orders=go (the data said java: spans: telemetry.sdk.language = "java")')
    assert lines[lines.index('"web" = "python"') - 1] == '# spans: telemetry.sdk.language = "python"'
    assert lines[lines.index('"ledger" = "nodejs"') - 1] == "# given: --runtime *=nodejs"


@pytest.mark.parametrize(("language", "key", "runtime"), [
    ("java", "telemetry.sdk.language", "java"),
    ("python", "telemetry.sdk.language", "python"),
    ("go", "telemetry.sdk.language", "go"),
    ("nodejs", "telemetry.sdk.language", "nodejs"),
    ("dotnet", "telemetry.sdk.language", "csharp"),
    ("Java", "telemetry.sdk.language", "java"),
    ("rust", "telemetry.sdk.language", None),
    ("webjs", "telemetry.sdk.language", None),
    ("cpp", "telemetry.sdk.language", None),
    ("Java-1.8.1", "jaeger.version", "java"),
    ("Go-2.30.0", "jaeger.version", "go"),
    ("Python-4.8.0", "jaeger.version", "python"),
    ("Node-3.18.1", "jaeger.version", "nodejs"),
    ("CSharp-1.0.3", "jaeger.version", "csharp"),
    ("C++-0.5.0", "jaeger.version", None),
])
def test_a_stated_language_names_a_runtime(language: str, key: str, runtime: str | None) -> None:
    assert language_key(language) == key
    assert stated_runtime(language) == runtime


@pytest.mark.parametrize("fast", [True, False])
def test_the_nightly_reading_is_unchanged(otlp_data: Path, tmp_path: Path, fast: bool,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Read without the raw tags (the nightly job), a dataset whose processes state their language reads as the
    same spans written without it: the same columns, the same rows."""
    if not fast:
        monkeypatch.setattr(span_arrow, "arrow_spans", lambda *args, **kwargs: None)
    raw = read_traces(otlp_data, **WINDOW, naming=TraceNaming(), peer_tags=True).frame
    write_frames(tmp_path / "plain", spans=raw.with_columns(pl.lit(None, pl.Utf8).alias("sdk_language")))
    stated = read_traces(otlp_data, **WINDOW, naming=TraceNaming()).frame
    plain = read_traces(tmp_path / "plain", **WINDOW, naming=TraceNaming()).frame
    assert stated.schema == SPAN_SCHEMA
    order = ["trace_id", "span_id"]
    assert_frame_equal(stated.sort(order), plain.sort(order))
    assert_frame_equal(stated.sort(order), raw.select(list(SPAN_SCHEMA)).sort(order))
