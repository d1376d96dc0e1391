"""Problem sets: cases with their solutions, and compact fault schedules for the simulator."""
from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from rca.taxonomy import FAULT_TYPES, canonical_fault_type
from rca.timeutil import format_utc, parse_utc


@dataclass(frozen=True)
class ProblemSet:
    """A simulated dataset: telemetry under ``data_dir`` with ``input.json`` and ``groundtruth.jsonl``."""

    data_dir: Path

    @property
    def input_file(self) -> Path:
        return self.data_dir / "input.json"

    @property
    def truth_file(self) -> Path:
        return self.data_dir / "groundtruth.jsonl"


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: invalid JSON ({exc.msg})") from exc
    return rows


def compact_schedule(reference: list[dict], *, per_type: int, day: str, seed: int) -> list[dict]:
    """Pick ``per_type`` real faults of every fault type and lay them out one per hour.

    Each fault keeps its type, target, level, offset within its hour and duration; only
    the date and hour move, so a benchmark covering all 18 types fits in one simulated day
    (or a few, at one fault an hour) instead of the weeks of the real schedule.
    """
    rng = random.Random(seed)
    by_type: dict[str, list[dict]] = defaultdict(list)
    for row in reference:
        by_type[canonical_fault_type(row["fault_type"])].append(row)
    missing = [t for t in FAULT_TYPES if t not in by_type]
    if missing:
        raise ValueError(f"reference schedule lacks fault types {missing}")
    chosen = [row for t in FAULT_TYPES for row in rng.sample(by_type[t], min(per_type, len(by_type[t])))]
    rng.shuffle(chosen)
    return hourly_schedule(chosen, day=day)


def hourly_schedule(rows: list[dict], *, day: str) -> list[dict]:
    """Real faults laid out one an hour from 01:00 UTC of ``day``, each keeping its type,
    target, level, offset within its hour and duration."""
    base = parse_utc(f"{day}T00:00:00Z")
    schedule = []
    for hour, row in enumerate(rows, start=1):
        start, end = parse_utc(row["start_time"]), parse_utc(row["end_time"])
        new_start = base + timedelta(hours=hour, minutes=start.minute, seconds=start.second)
        moved = dict(row)
        moved["start_time"] = format_utc(new_start)
        moved["end_time"] = format_utc(new_start + (end - start))
        schedule.append(moved)
    return schedule
