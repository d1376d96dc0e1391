"""A directory that is not in the canonical layout is named, with the import that would read it."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from preprocess.sniff import guess_format


@pytest.mark.parametrize(("name", "content", "expected"), [
    ("spans.jsonl", json.dumps({"resourceSpans": [{"scopeSpans": []}]}), "otlp"),
    ("jaeger.json", json.dumps({"data": [{"traceID": "ab", "spans": [], "processes": {}}]}), "jaeger"),
    ("zipkin.json", json.dumps([{"traceId": "ab", "id": "cd", "localEndpoint": {"serviceName": "a"}}]), "zipkin"),
    ("range.json", json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}), "prometheus"),
    ("loki.json", json.dumps({"status": "success", "data": {"resultType": "streams", "result": []}}), "loki"),
    ("filebeat.ndjson", json.dumps({"@timestamp": "2025-06-05T16:00:00Z", "message": "x"}), "ecs"),
    ("scrape.txt", "# HELP up Up.\n# TYPE up gauge\nup 1\n", "prometheus"),
    ("notes.txt", "nothing telemetry-like here\n", None),
])
def test_a_foreign_format_is_recognised(tmp_path: Path, name: str, content: str, expected: str | None) -> None:
    (tmp_path / name).write_text(content)
    assert guess_format(tmp_path) == expected


def test_gzipped_otlp_and_a_nezha_clone_are_recognised(tmp_path: Path) -> None:
    with gzip.open(tmp_path / "logs.jsonl.gz", "wt") as handle:
        handle.write(json.dumps({"resourceLogs": []}))
    assert guess_format(tmp_path) == "otlp"
    clone = tmp_path / "nezha"
    (clone / "rca_data").mkdir(parents=True)
    assert guess_format(clone) == "nezha"


def test_preprocess_on_a_foreign_directory_names_the_import(tmp_path: Path) -> None:
    (tmp_path / "spans.jsonl").write_text(json.dumps({"resourceSpans": []}))
    result = CliRunner().invoke(app, ["preprocess", "--data-dir", str(tmp_path), "--index-dir", str(tmp_path / "i"),
                                      "--all"])
    assert result.exit_code == 2
    assert "rca import otlp" in result.output and "canonical layout" in result.output
