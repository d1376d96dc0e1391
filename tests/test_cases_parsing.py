"""Case parsing: all 400 real descriptions, paraphrases, bad descriptions and bad files."""
from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from diagnose.cases import Case, CaseError, load_cases, parse_window
from rca.timeutil import parse_utc

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference" / "aiops2025"
UTC = UTC
A = datetime(2025, 6, 5, 16, 10, 2, tzinfo=UTC)
B = datetime(2025, 6, 5, 16, 31, 2, tzinfo=UTC)


@pytest.mark.skipif(not (REFERENCE / "input.json").exists(), reason="real reference data not present")
def test_all_real_descriptions_match_groundtruth_windows() -> None:
    cases = load_cases(REFERENCE / "input.json")
    assert len(cases) == 400
    # Ground truth is read here, in a test, only to check the parser.
    truth = {}
    for line in (REFERENCE / "groundtruth.jsonl").read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            truth[row["uuid"]] = (parse_utc(row["start_time"]), parse_utc(row["end_time"]))
    compared = 0
    for case in cases:
        assert case.start.tzinfo is not None and case.start.utcoffset().total_seconds() == 0
        if case.uuid in truth:
            assert (case.start, case.end) == truth[case.uuid], case.uuid
            compared += 1
    assert compared == 400


@pytest.mark.parametrize(
    "text",
    [
        "The system experienced an anomaly from 2025-06-05T16:10:02Z to 2025-06-05T16:31:02Z. Please infer the possible cause.",
        "Please analyze the abnormal event between 2025-06-05T16:10:02Z and 2025-06-05T16:31:02Z and provide the root cause.",
        "A fault occurred from 2025-06-05T16:10:02Z to 2025-06-05T16:31:02Z. Please identify the root cause.",
        "Determine the root cause of the system fault during 2025-06-05T16:10:02Z to 2025-06-05T16:31:02Z.",
        "A fault was detected from 2025-06-05T16:10:02Z to 2025-06-05T16:31:02Z. Please analyze its root cause.",
        # paraphrases
        "From 2025-06-05T16:10:02Z to 2025-06-05T16:31:02Z something broke.",
        "Something broke; it ended 2025-06-05T16:31:02Z and began 2025-06-05T16:10:02Z.",  # reversed order
        "between 2025-06-05 16:10:02+00:00 and 2025-06-05 16:31:02+00:00",
        "during 2025-06-05T16:10:02.000Z to 2025-06-05T16:31:02.000000Z",
        "during 2025-06-05T16:10:02 to 2025-06-05T16:31:02",  # naive = UTC
        "from 2025-06-06T00:10:02+08:00 to 2025-06-06T00:31:02+0800",  # other offsets converted
        "from 2025-06-05T16:10:02 UTC to 2025-06-05T16:31:02 UTC, uuid 345fbe93-80",
    ],
)
def test_paraphrases_give_the_same_window(text: str) -> None:
    assert parse_window(text, uuid="u1") == (A, B)


def test_fractional_seconds_are_kept() -> None:
    start, end = parse_window("from 2025-06-05T16:10:02.5Z to 2025-06-05T16:31:02.123456789Z", uuid="u")
    assert start == A.replace(microsecond=500000)
    assert end == B.replace(microsecond=123456)


def test_minutes_without_seconds() -> None:
    assert parse_window("from 2025-06-05T16:10Z to 2025-06-05T16:31Z", uuid="u") == (
        A.replace(second=0), B.replace(second=0))


@pytest.mark.parametrize(
    "text",
    [
        "no instants here",
        "only one 2025-06-05T16:10:02Z",
        "three 2025-06-05T16:10:02Z 2025-06-05T16:11:02Z 2025-06-05T16:12:02Z",
        "bad month 2025-13-05T16:10:02Z to 2025-06-05T16:31:02Z",
    ],
)
def test_bad_descriptions_raise_naming_uuid(text: str) -> None:
    with pytest.raises(CaseError, match="abc-42"):
        parse_window(text, uuid="abc-42")


def test_case_model_is_utc_and_ordered() -> None:
    case = Case(uuid="x", description="d", start=datetime(2025, 1, 1, 8, tzinfo=UTC), end=B)
    assert case.start.tzinfo == UTC
    with pytest.raises(ValueError):
        Case(uuid="x", description="d", start=B, end=A)
    with pytest.raises(ValueError):
        Case(uuid="x", description="d", start=datetime(2025, 1, 1), end=B)


def _write(tmp_path: Path, text: str, name: str = "input.json") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_load_cases_array_and_jsonl(tmp_path: Path) -> None:
    items = [
        {"uuid": "a-1", "Anomaly Description": "from 2025-06-05T16:10:02Z to 2025-06-05T16:31:02Z"},
        {"uuid": "b-2", "Anomaly Description": "between 2025-06-05T17:10:04Z and 2025-06-05T17:33:04Z"},
    ]
    from_array = load_cases(_write(tmp_path, json.dumps(items, indent=2)))
    from_lines = load_cases(_write(tmp_path, "\n".join(json.dumps(i) for i in items) + "\n", "input.jsonl"))
    assert [c.uuid for c in from_array] == ["a-1", "b-2"] == [c.uuid for c in from_lines]
    assert from_array[0].start == A and from_lines[1].end == datetime(2025, 6, 5, 17, 33, 4, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ('[\n  {"uuid": "a", "Anomaly Description": "x"\n', r"input\.json: malformed JSON at line 3"),
        ('[{"uuid": "a"}]', r"input\.json: item 0: case a has no string field"),
        ('[{"Anomaly Description": "from 2025-06-05T16:10:02Z to 2025-06-05T16:31:02Z"}]', r"item 0: missing or empty 'uuid'"),
        ('[{"uuid": "zz-9", "Anomaly Description": "no times"}]', r"case zz-9"),
        ('[1]', r"item 0: expected an object"),
        ('{"uuid": "a", "Anomaly Description": "from 2025-06-05T16:10:02Z to 2025-06-05T16:31:02Z"}\n{oops\n',
         r"malformed JSON at line 2"),
        ("", r"empty"),
    ],
)
def test_bad_files_name_file_and_position(tmp_path: Path, text: str, pattern: str) -> None:
    with pytest.raises(CaseError, match=pattern):
        load_cases(_write(tmp_path, text))


def test_duplicate_uuid_rejected(tmp_path: Path) -> None:
    item = {"uuid": "a", "Anomaly Description": "from 2025-06-05T16:10:02Z to 2025-06-05T16:31:02Z"}
    with pytest.raises(CaseError, match="duplicate uuid a"):
        load_cases(_write(tmp_path, json.dumps([item, item])))


def test_missing_file_named(tmp_path: Path) -> None:
    with pytest.raises(CaseError, match="nope.json"):
        load_cases(tmp_path / "nope.json")
