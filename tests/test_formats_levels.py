"""A record's level kept apart from its text (OTLP severity, ECS ``log.level``, a Loki label) is written
into the line as a text logger writes it, unless the line states one already or is a JSON document."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from preprocess.formats import make_reader
from preprocess.formats.levels import level_name, line_with_level


@pytest.mark.parametrize(("text", "number", "level"), [
    ("ERROR", None, "ERROR"), ("Error", 17, "ERROR"), ("warning", None, "WARN"), ("crit", None, "FATAL"),
    (None, 17, "ERROR"), (None, 20, "ERROR"), (None, "21", "FATAL"), (None, 9, "INFO"), (None, 13, "WARN"),
    (None, "SEVERITY_NUMBER_ERROR2", "ERROR"), ("E", None, None), (None, 0, None), (None, 25, None),
    ("", 17, "ERROR"), (None, True, None),
])
def test_a_level_is_named_once(text, number, level) -> None:
    assert level_name(text=text, number=number) == level


@pytest.mark.parametrize(("message", "level", "line"), [
    ("payment declined for order 42", "ERROR", "ERROR payment declined for order 42"),
    ("payment declined for order 42", None, "payment declined for order 42"),
    ("2025-06-05 10:00:01 ERROR payment declined", "ERROR", "2025-06-05 10:00:01 ERROR payment declined"),
    ("[main] WARN pool nearly full", "WARN", "[main] WARN pool nearly full"),
    ('{"severity":"info","message":"ok"}', "ERROR", '{"severity":"info","message":"ok"}'),
    (None, "ERROR", None),
])
def test_the_line_gets_the_level_a_text_logger_writes(message, level, line) -> None:
    assert line_with_level(message, level) == line


def _record(body: str, **severity: object) -> dict:
    return {"timeUnixNano": "1749139200000000000", "body": {"stringValue": body}, **severity}


def test_otlp_ecs_and_loki_lines_carry_their_level(tmp_path: Path) -> None:
    otlp = tmp_path / "logs.jsonl"
    otlp.write_text(json.dumps({"resourceLogs": [{
        "resource": {"attributes": [{"key": "k8s.pod.name", "value": {"stringValue": "cart-0"}}]},
        "scopeLogs": [{"logRecords": [_record("card declined", severityText="Error", severityNumber=17),
                                      _record("cart loaded", severityNumber=9),
                                      _record("no level at all")]}]}]}) + "\n")
    lines = make_reader("otlp").read([otlp]).logs.sort("message").get_column("message").to_list()
    assert lines == ["ERROR card declined", "INFO cart loaded", "no level at all"]

    ecs = tmp_path / "filebeat.ndjson"
    ecs.write_text(json.dumps({"@timestamp": "2025-06-05T16:00:00Z", "message": "card declined",
                               "log": {"level": "error"}, "kubernetes": {"pod": {"name": "cart-0"}}}) + "\n")
    assert make_reader("ecs").read([ecs]).logs.get_column("message").to_list() == ["ERROR card declined"]

    loki = tmp_path / "loki.json"
    loki.write_text(json.dumps({"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": {"pod": "cart-0", "level": "warn"}, "values": [["1749139200000000000", "pool nearly full"]]},
        {"stream": {"pod": "cart-0", "detected_level": "error"},
         "values": [["1749139201000000000", "12:00:01 ERROR card declined"]]}]}}))
    lines = make_reader("loki").read([loki]).logs.sort("time").get_column("message").to_list()
    assert lines == ["WARN pool nearly full", "12:00:01 ERROR card declined"]
