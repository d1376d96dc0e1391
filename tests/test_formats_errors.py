"""Bad records cost that record only: skipped, named (file:line or document path, and field), the rest read;
``rca import`` exits 3 when anything was lost."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from preprocess.formats import FormatError, RecordIssue, make_reader
from preprocess.importers import app

TRACE = "5b8efff798038103d269b633813fc60c"
SPAN = "eee19b7ec3c1b174"


def _span(**override: object) -> dict:
    span = {"traceId": TRACE, "spanId": SPAN, "name": "hipstershop.CartService/GetCart", "kind": 3,
            "startTimeUnixNano": "1749139200000000000", "endTimeUnixNano": "1749139200001000000",
            "attributes": [{"key": "rpc.service", "value": {"stringValue": "hipstershop.CartService"}}]}
    span.update(override)
    return span


def _request(*spans: dict) -> str:
    return json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "frontend"}},
        {"key": "k8s.pod.name", "value": {"stringValue": "frontend-0"}}]},
        "scopeSpans": [{"spans": list(spans)}]}]})


def _only(issues: list[RecordIssue]) -> RecordIssue:
    assert len(issues) == 1, [str(i) for i in issues]
    return issues[0]


def test_malformed_otlp_line_is_named_and_the_rest_is_read(tmp_path: Path) -> None:
    path = tmp_path / "traces.json"
    path.write_text(_request(_span()) + "\n" + '{"resourceSpans": [ {oops\n' + _request(_span(spanId="aaaaaaaaaaaaaaaa")) + "\n")
    result = make_reader("otlp").read([path])
    issue = _only(result.issues)
    assert issue.lost and issue.line == 2 and str(issue).startswith(f"{path}:2: ")
    assert result.spans is not None and result.spans.height == 2
    # The peer is named when the dataset is read, with the user's system: the import carries the raw tag.
    assert result.spans["peer_service"].to_list() == [None, None]
    assert result.spans["rpc_service"].to_list() == ["hipstershop.CartService"] * 2


@pytest.mark.parametrize("field, value, words", [
    ("traceId", "abc123", "6 characters, expected 32 hex digits"),
    ("spanId", "eee19b7ec3c1b1", "14 characters, expected 16 hex digits"),
    ("parentSpanId", "zz" * 8, "not hexadecimal"),
    ("parentSpanId", "qqqqqqqqqqqq", "decodes to 9 bytes, expected 8"),
    ("startTimeUnixNano", None, "missing timestamp"),
])
def test_bad_otlp_span_field_is_named(tmp_path: Path, field: str, value: object, words: str) -> None:
    path = tmp_path / "traces.json.gz"  # gzipped: the issue still names the file and line
    path.write_bytes(gzip.compress((_request(_span(), _span(**{field: value})) + "\n").encode()))
    result = make_reader("otlp").read([path])
    issue = _only(result.issues)
    assert (issue.line, issue.field) == (1, field)
    assert issue.where == "resourceSpans[0].scopeSpans[0].spans[1]"
    assert words in issue.reason
    assert result.spans is not None and result.spans.height == 1


def test_base64_ids_of_protobufs_json_format_are_read_as_hex(tmp_path: Path) -> None:
    import base64

    path = tmp_path / "traces.json"
    path.write_text(_request(_span(traceId=base64.b64encode(bytes.fromhex(TRACE)).decode(),
                                   spanId=base64.b64encode(bytes.fromhex(SPAN)).decode())) + "\n")
    result = make_reader("otlp").read([path])
    assert result.issues == [] and result.spans is not None
    assert result.spans.row(0, named=True)["trace_id"] == TRACE


def test_garbage_protobuf_is_an_issue(tmp_path: Path) -> None:
    path = tmp_path / "traces.binpb"
    path.write_bytes(b"\x00\x00\x00\x05\x0a\xff\xff\xff\xff")
    result = make_reader("otlp").read([path])
    assert _only(result.issues).lost and result.spans is None


def test_jaeger_wrong_length_id_and_missing_process(tmp_path: Path) -> None:
    good = {"traceID": TRACE, "spanID": SPAN, "operationName": "op", "references": [], "startTime": 1749139200000000,
            "duration": 5, "tags": [{"key": "span.kind", "type": "string", "value": "server"}], "processID": "p1"}
    doc = {"data": [{"traceID": TRACE, "processes": {"p1": {"serviceName": "redis", "tags": []}},
                     "spans": [good, {**good, "spanID": "abc"}, {**good, "processID": "p9"}]}]}
    path = tmp_path / "jaeger.json"
    path.write_text(json.dumps(doc))
    result = make_reader("jaeger").read([path])
    assert [(i.where, i.field) for i in result.issues] == [("data[0].spans[1]", "spanID"),
                                                          ("data[0].spans[2]", "processID")]
    assert result.spans is not None and result.spans["service"].to_list() == ["redis"]  # as the export names it


def test_zipkin_missing_timestamp(tmp_path: Path) -> None:
    span = {"traceId": TRACE, "id": SPAN, "name": "get", "timestamp": 1749139200000000, "duration": 3,
            "localEndpoint": {"serviceName": "frontend"}}
    path = tmp_path / "zipkin.json"
    path.write_text(json.dumps([span, {k: v for k, v in span.items() if k != "timestamp"}]))
    result = make_reader("zipkin").read([path])
    assert (_only(result.issues).where, result.issues[0].field) == ("[1]", "timestamp")


def test_prometheus_bad_points_and_nameless_series(tmp_path: Path) -> None:
    doc = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "container_cpu_usage_seconds_total", "pod": "cartservice-0", "node": "aiops-k8s-01"},
         "values": [[1749139200, "0.5"], [1749139260, "oops"]]},
        {"metric": {"pod": "cartservice-0"}, "values": [[1749139200, "1"]]},
        {"metric": {"__name__": "mystery"}, "values": [[1749139200, "1"]]}]}}
    path = tmp_path / "range.json"
    path.write_text(json.dumps(doc))
    result = make_reader("prometheus").read([path])
    assert [(i.where, i.field) for i in result.issues] == [
        ("data.result[0].values[1]", "values"), ("data.result[1]", "metric.__name__"),
        ("data.result[2].values[0]", "labels")]
    assert result.infra is not None
    row = result.infra.row(0, named=True)
    assert (row["family"], row["kpi_key"], row["component"], row["node"], row["value"]) == (
        "infra_pod", "pod_cpu_usage", "cartservice-0", "aiops-k8s-01", 0.5)


def test_exposition_needs_a_time(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    path = tmp_path / "metrics.prom"
    path.write_text('node_cpu_usage_rate{kubernetes_node="aiops-k8s-01",instance="10.0.0.1:9100"} 12.5\n')
    untimed = make_reader("prometheus").read([path])
    assert untimed.infra is None and _only(untimed.issues).field == "timestamp"
    at = datetime(2025, 6, 5, 16, 0, tzinfo=UTC)
    timed = make_reader("prometheus", at=at).read([path])
    assert timed.issues == [] and timed.infra is not None
    row = timed.infra.row(0, named=True)
    assert (row["time"], row["family"], row["component"], row["instance"]) == (at, "infra_node", "aiops-k8s-01",
                                                                             "10.0.0.1:9100")


def test_loki_and_ecs_bad_entries(tmp_path: Path) -> None:
    loki = tmp_path / "loki.json"
    loki.write_text(json.dumps({"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": {"pod": "frontend-0", "namespace": "hipstershop"},
         "values": [["1749139200000000000", "ok"], ["yesterday", "bad"]]}]}}))
    result = make_reader("loki").read([loki])
    assert (_only(result.issues).where, result.issues[0].field) == ("data.result[0].values[1]", "values[0]")
    assert result.logs is not None and result.logs["pod"].to_list() == ["frontend-0"]

    ecs = tmp_path / "filebeat.ndjson"
    ecs.write_text('{"@timestamp": "2025-06-05T16:00:00.123Z", "message": "a", "kubernetes": {"pod": {"name": "x-1"}}}\n'
                   '{"message": "no time"}\n'
                   'not json\n')
    result = make_reader("ecs").read([ecs])
    assert [(i.line, i.field) for i in result.issues] == [(2, "@timestamp"), (3, None)]
    assert result.logs is not None and result.logs["pod"].to_list() == ["x-1"]


def test_no_files_and_unknown_format() -> None:
    with pytest.raises(FormatError):
        make_reader("otlp").read([])
    with pytest.raises(FormatError):
        make_reader("csv")


def test_cli_exits_3_on_data_loss_and_names_the_record(tmp_path: Path) -> None:
    path = tmp_path / "traces.json"
    path.write_text(_request(_span()) + "\nnot json\n")
    result = CliRunner().invoke(app, ["otlp", str(path), "--out", str(tmp_path / "d")])
    assert result.exit_code == 3, result.output
    assert f"{path}:2" in result.output and "finished with data loss" in result.output
    assert list((tmp_path / "d").rglob("trace_jaeger-span_*.parquet"))
    clean = CliRunner().invoke(app, ["otlp", str(tmp_path / "nowhere.json"), "--out", str(tmp_path / "d")])
    assert clean.exit_code == 2
