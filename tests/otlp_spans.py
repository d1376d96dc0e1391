"""Small OTLP/JSON trace exports written by hand, imported with ``rca import otlp`` (the tests of span naming)."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from app.cli import app

runner = CliRunner()


def attr(key: str, value: str) -> dict:
    """An OTLP string attribute."""
    return {"key": key, "value": {"stringValue": value}}


def otlp_span(trace: int, span: int, parent: int | None, *, name: str, kind: int, start_us: int,
              attrs: list[tuple[str, str]]) -> dict:
    """One OTLP/JSON span of 900 µs (kind: 2 server, 3 client), ids made of the trace and span numbers."""
    out = {"traceId": f"{trace:032x}", "spanId": f"{trace:08x}{span:08x}", "name": name, "kind": kind,
           "startTimeUnixNano": str(start_us * 1000), "endTimeUnixNano": str((start_us + 900) * 1000),
           "attributes": [attr(k, v) for k, v in attrs]}
    if parent is not None:
        out["parentSpanId"] = f"{trace:08x}{parent:08x}"
    return out


def export_line(spans_by_service: Mapping[str, list[dict]]) -> str:
    """One OTLP/JSON export line: a resource per service (its pod ``<service>-0``) holding that service's spans."""
    return json.dumps({"resourceSpans": [
        {"resource": {"attributes": [attr("service.name", service), attr("k8s.pod.name", f"{service}-0")]},
         "scopeSpans": [{"spans": spans}]} for service, spans in spans_by_service.items()]})


def import_export(base: Path, text: str) -> Path:
    """``text`` written as ``base/traces.json`` and imported with ``rca import otlp``; the dataset's directory."""
    export = base / "traces.json"
    export.write_text(text, encoding="utf-8")
    result = runner.invoke(app, ["import", "otlp", str(export), "--out", str(base / "data")])
    assert result.exit_code == 0, result.output
    return base / "data"


def client_peers(spans: pl.DataFrame) -> dict[str, str | None]:
    """Client span operation -> its peer (each operation names one)."""
    clients = spans.filter(pl.col("span_kind") == "client").select("operation", "peer_service").unique()
    assert clients.height == clients["operation"].n_unique()
    return dict(clients.iter_rows())
