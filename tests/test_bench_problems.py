from collections import Counter
from pathlib import Path

from bench.problems import compact_schedule, read_jsonl
from rca.taxonomy import FAULT_TYPES, canonical_fault_type
from rca.timeutil import parse_utc

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference" / "aiops2025" / "groundtruth.jsonl"


def _reference() -> list[dict]:
    return read_jsonl(REFERENCE)


def test_compact_schedule_covers_every_type_one_an_hour() -> None:
    schedule = compact_schedule(_reference(), per_type=2, day="2025-06-05", seed=3)
    assert Counter(canonical_fault_type(r["fault_type"]) for r in schedule) == {t: 2 for t in FAULT_TYPES}
    starts = sorted(parse_utc(r["start_time"]) for r in schedule)
    assert all((b - a).total_seconds() >= 34 * 60 for a, b in zip(starts, starts[1:]))
    for row in schedule:
        assert parse_utc(row["end_time"]) > parse_utc(row["start_time"]) or row["fault_type"] == "pod kill"


def test_compact_schedule_is_seeded() -> None:
    ref = _reference()
    assert compact_schedule(ref, per_type=1, day="2025-06-05", seed=1) == compact_schedule(ref, per_type=1, day="2025-06-05", seed=1)
    assert compact_schedule(ref, per_type=1, day="2025-06-05", seed=1) != compact_schedule(ref, per_type=1, day="2025-06-05", seed=2)


def test_packed_schedule_lays_faults_out_as_nezha_injects_them() -> None:
    """Three-minute faults (a pod kill keeps its second), 4 to 9 minutes apart start to start."""
    schedule = compact_schedule(_reference(), per_type=2, day="2025-06-05", seed=3, packed=True)
    assert Counter(canonical_fault_type(r["fault_type"]) for r in schedule) == {t: 2 for t in FAULT_TYPES}
    starts = [parse_utc(r["start_time"]) for r in schedule]
    gaps = [(b - a).total_seconds() / 60 for a, b in zip(starts, starts[1:])]
    assert all(4 <= g < 9 for g in gaps)
    assert min(gaps) < 6 and max(gaps) > 7  # drawn, not one fixed step
    for row in schedule:
        duration = (parse_utc(row["end_time"]) - parse_utc(row["start_time"])).total_seconds()
        assert (duration <= 5 if row["fault_type"] == "pod kill" else 60 <= duration <= 180)
    assert schedule == compact_schedule(_reference(), per_type=2, day="2025-06-05", seed=3, packed=True)
