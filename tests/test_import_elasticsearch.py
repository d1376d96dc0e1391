"""``rca import ecs --url``: ECS log documents pulled from Elasticsearch / OpenSearch ``<index>/_search``.

The fake server on 127.0.0.1 (tests/fake_http.py) keeps the rules the pull depends on: the request
body comes as the ``source`` parameter of a GET (``source_content_type`` given); it returns at most
``size`` hits (and refuses a size above ``index.max_result_window``, 10,000) but counts every match
(``track_total_hits``); a ``query_string`` filter matches ``field:value`` terms; an unknown index is
a 404 with Elasticsearch's error JSON. The dataset is read back with ``preprocess.readers``.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from app.cli import app
from preprocess.formats.ecs import field_value
from preprocess.formats.pull import elastic_body
from preprocess.formats.pull_sources import configured_sources
from preprocess.readers import read_logs
from rca.settings import SettingsError, load_settings
from tests.fake_http import Answer, FakeServer

pytestmark = pytest.mark.usefixtures("fast_retries")
runner = CliRunner()
T0 = datetime(2025, 6, 5, 0, 0, tzinfo=UTC)
END = T0 + timedelta(hours=2)
MAX_RESULT_WINDOW = 10_000


def _document(number: int, at: datetime, *, pod: str = "frontend-0", namespace: str = "shop") -> dict[str, Any]:
    return {"@timestamp": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "message": f"GET /cart {number} took 12ms",
            "kubernetes": {"pod": {"name": pod}, "node": {"name": "node-1"}, "namespace": namespace},
            "log": {"level": "info"}}


def elasticsearch_with(documents: list[dict[str, Any]], *, index: str = "filebeat-2025.06.05") -> Answer:
    """``GET /<pattern>/_search?source=...`` over ``documents`` in one index."""
    def elasticsearch(path: str, params: dict[str, str]) -> tuple[int, Any]:
        pattern, _, api = path.strip("/").partition("/")
        if api != "_search":
            return 404, "no handler"
        if not index.startswith(pattern.rstrip("*")):
            return 404, {"error": {"root_cause": [], "type": "index_not_found_exception",
                                   "reason": f"no such index [{pattern}]"}, "status": 404}
        assert params["source_content_type"] == "application/json"
        body = json.loads(params["source"])
        if body["size"] > MAX_RESULT_WINDOW:
            return 400, {"error": {"type": "illegal_argument_exception",
                                   "reason": "Result window is too large"}, "status": 400}
        assert body["track_total_hits"] is True
        window, *matches = body["query"]["bool"]["filter"]
        bounds = window["range"]["@timestamp"]
        assert bounds["format"] == "epoch_millis"

        def matched(document: dict[str, Any]) -> bool:
            at_ms = int(datetime.fromisoformat(document["@timestamp"]).timestamp() * 1000)
            if not bounds["gte"] <= at_ms < bounds["lt"]:
                return False
            for match in matches:
                name, _, value = match["query_string"]["query"].partition(":")
                if str(field_value(document, name)) != value.strip('"'):
                    return False
            return True

        found = [d for d in documents if matched(d)]
        return 200, {"took": 3, "timed_out": False, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
                     "hits": {"total": {"value": len(found), "relation": "eq"}, "max_score": None,
                              "hits": [{"_index": index, "_id": str(i), "_score": None, "_source": d}
                                       for i, d in enumerate(found[:body["size"]])]}}
    return elasticsearch


def _pull(server: FakeServer, out: Path, *more: str) -> Any:
    return runner.invoke(app, ["import", "ecs", "--url", server.url, "--index", "filebeat-*", "--start",
                               "2025-06-05T00:00:00Z", "--end", "2025-06-05T02:00:00Z", "--limit", "5",
                               "--out", str(out), *more])


def _logs(out: Path) -> list[tuple[str, datetime, str]]:
    frame = read_logs(out, start=T0, end=END).frame
    return sorted(zip(frame["pod"].to_list(), frame["time"].to_list(), frame["message"].to_list()))


def test_full_chunks_are_split_every_document_is_read_once_and_a_rerun_asks_nothing(
        serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    # Three documents in the first hour; twelve within ten minutes of the second: that hour holds too many.
    times = [T0 + timedelta(minutes=m, milliseconds=250) for m in (5, 20, 40)]
    times += [T0 + timedelta(hours=1, minutes=30, seconds=50 * s) for s in range(12)]
    documents = [_document(n, at) for n, at in enumerate(times)]
    server = serve(elasticsearch_with(documents))
    out = tmp_path / "data"
    result = _pull(server, out)
    assert result.exit_code == 0, result.output
    assert _logs(out) == sorted(("frontend-0", at, f"INFO GET /cart {n} took 12ms")
                                for n, at in enumerate(times))
    assert len(server.requests) > 2 and "split" in result.output

    seen = len(server.requests)
    again = _pull(server, out)
    assert again.exit_code == 0, again.output
    assert len(server.requests) == seen  # every chunk on disk


def test_the_query_selects_documents(serve: Callable[[Answer], FakeServer], tmp_path: Path) -> None:
    documents = [_document(0, T0 + timedelta(minutes=3)),
                 _document(1, T0 + timedelta(minutes=4), pod="cart-0", namespace="other")]
    server = serve(elasticsearch_with(documents))
    out = tmp_path / "data"
    result = _pull(server, out, "--query", 'kubernetes.namespace:"shop"')
    assert result.exit_code == 0, result.output
    assert [pod for pod, _, _ in _logs(out)] == ["frontend-0"]


def test_a_chunk_still_too_full_at_a_second_is_a_named_loss(serve: Callable[[Answer], FakeServer],
                                                          tmp_path: Path) -> None:
    burst = T0 + timedelta(minutes=10)
    server = serve(elasticsearch_with([_document(n, burst + timedelta(milliseconds=n)) for n in range(7)]))
    out = tmp_path / "data"
    result = _pull(server, out)
    assert result.exit_code == 3, result.output
    assert "LOST" in result.output and "7 documents" in result.output and "5 were read" in result.output
    assert len(_logs(out)) == 5


def test_an_unknown_index_is_an_error_with_the_servers_reason(serve: Callable[[Answer], FakeServer],
                                                              tmp_path: Path) -> None:
    server = serve(elasticsearch_with([]))
    result = runner.invoke(app, ["import", "ecs", "--url", server.url, "--index", "nginx-*", "--since", "1h",
                                 "--out", str(tmp_path / "data")])
    assert result.exit_code == 2, result.output
    assert "index_not_found_exception: no such index [nginx-*]" in result.output


@pytest.mark.parametrize("args, message", [
    (["--url", "http://es:9200", "--since", "1h"], "give --index"),
    (["--index", "logs-*"], "only apply with --url"),
    (["--url", "http://es:9200", "--index", "_all", "--since", "1h"], "expected an index name or pattern"),
])
def test_pull_options_are_checked(tmp_path: Path, args: list[str], message: str) -> None:
    sources = [] if "--url" in args else [str(tmp_path / "export.ndjson")]
    if sources:
        Path(sources[0]).write_text(json.dumps(_document(0, T0)) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["import", "ecs", *sources, *args, "--out", str(tmp_path / "data")])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_the_body_counts_every_match_and_filters_the_chunk() -> None:
    body = elastic_body(first_ms=1000, stop_ms=2000, limit=10, query="level:error")
    assert body["track_total_hits"] is True and body["size"] == 10
    assert body["query"]["bool"]["filter"][0] == {"range": {"@timestamp": {"gte": 1000, "lt": 2000,
                                                                            "format": "epoch_millis"}}}
    assert body["query"]["bool"]["filter"][1] == {"query_string": {"query": "level:error"}}
    assert len(elastic_body(first_ms=0, stop_ms=1, limit=1, query=None)["query"]["bool"]["filter"]) == 1


def test_sources_elasticsearch_is_configured_and_checked(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[sources.elasticsearch]\nurl = "http://es:9200"\nindex = "filebeat-*"\n'
                      "query = 'kubernetes.namespace:\"shop\"'\n", encoding="utf-8")
    settings = load_settings(config_path=config)
    assert settings.sources.configured() == ["elasticsearch"]
    (source,) = configured_sources(settings.sources, start=T0, end=END)
    assert (source.fmt, source.url, source.option) == ("ecs", "http://es:9200", "sources.elasticsearch.url")
    config.write_text('[sources.elasticsearch]\nurl = "http://es:9200"\n', encoding="utf-8")
    with pytest.raises(SettingsError, match="sources.elasticsearch.index"):
        load_settings(config_path=config)
    config.write_text('[sources.elasticsearch]\nurl = "http://es:9200"\nindex = "x"\nlimit = 20000\n', encoding="utf-8")
    with pytest.raises(SettingsError, match="sources.elasticsearch.limit"):
        load_settings(config_path=config)
