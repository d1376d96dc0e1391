"""Problems: ⟨task, context, solution⟩ built from a dataset and its ground truth.

A dataset is a directory in the real layout with ``input.json`` and ``groundtruth.jsonl``
(and, from ``rca simulate --no-fault-windows N``, ``nofault.jsonl`` with quiet windows).
Every case becomes one problem per task that applies to it, with the stable id
``<case uuid>-<task>``. Also: compact fault schedules for the simulator.
"""
from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from diagnose.cases import Case, load_cases
from judge.groundtruth import TruthCase, load_truth
from rca.errors import InputError
from rca.system import bundled_system
from rca.taxonomy import FAULT_TYPES, LEVELS, TIDB_COMPONENTS, canonical_fault_type
from rca.timeutil import format_utc, parse_utc

NO_FAULT_FILE = "nofault.jsonl"
# The analysis task answers a TiDB component at its own level, beside the taxonomy's three.
TIDB_LEVEL = "tidb"
ANSWER_LEVELS: tuple[str, ...] = (*LEVELS, TIDB_LEVEL)
# The vendored real fault schedule (400 cases) whose faults the benchmarks replay into simulated days.
REFERENCE_SCHEDULE = Path(__file__).resolve().parents[1] / "data" / "reference" / "aiops2025" / "groundtruth.jsonl"


class DatasetError(InputError):
    """A dataset directory lacks a file or holds a bad line; the message names it."""


@dataclass(frozen=True)
class ProblemSet:
    """A dataset: telemetry under ``data_dir`` with ``input.json`` and ``groundtruth.jsonl``."""

    data_dir: Path

    @property
    def input_file(self) -> Path:
        return self.data_dir / "input.json"

    @property
    def truth_file(self) -> Path:
        return self.data_dir / "groundtruth.jsonl"

    @property
    def no_fault_file(self) -> Path:
        return self.data_dir / NO_FAULT_FILE


@dataclass(frozen=True)
class CaseTruth:
    """One case with what really happened: a fault (``truth``, ``record``) or none."""

    case: Case
    fault: bool
    truth: TruthCase | None = None
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def fault_type(self) -> str:
        return self.truth.fault_type if self.truth else "no fault"

    @property
    def level(self) -> str:
        """service / pod / node / tidb (the answer levels of the analysis task)."""
        if self.truth is None:
            return "none"
        return answer_level(self.truth.instance[0])


def is_tidb(component: str) -> bool:
    """A TiDB component or one of its pods (the components are named in ``rca/system.toml``)."""
    return bundled_system().service_of(component) in TIDB_COMPONENTS.values()


def answer_level(component: str) -> str:
    """The analysis task's level of a component of the simulated (bundled HipsterShop) system."""
    system = bundled_system()
    if system.is_node(component):
        return "node"
    if is_tidb(component):
        return TIDB_LEVEL
    return system.level_of(component)


@dataclass(frozen=True)
class Problem:
    """⟨task, context, solution⟩: what the agent is told, and what only the evaluator sees."""

    id: str  # <case uuid>-<task>
    task: str
    case: Case
    context: str  # the problem description shown to the agent
    solution: CaseTruth


def load_dataset(data_dir: Path) -> list[CaseTruth]:
    """Cases of ``input.json`` joined with their truth; a case with no truth line is an error."""
    problem_set = ProblemSet(data_dir)
    for path in (problem_set.input_file, problem_set.truth_file):
        if not path.is_file():
            raise DatasetError(f"{path}: missing (a dataset needs input.json and groundtruth.jsonl)")
    cases = load_cases(problem_set.input_file)
    truth = {t.uuid: t for t in load_truth(problem_set.truth_file)}
    records = {r["uuid"]: r for r in read_jsonl(problem_set.truth_file)}
    quiet: set[str] = set()
    if problem_set.no_fault_file.is_file():
        for row in read_jsonl(problem_set.no_fault_file):
            if row.get("fault") is not False or "uuid" not in row:
                raise DatasetError(f"{problem_set.no_fault_file}: every line needs uuid and \"fault\": false")
            quiet.add(str(row["uuid"]))
    out: list[CaseTruth] = []
    for case in cases:
        if case.uuid in truth:
            out.append(CaseTruth(case=case, fault=True, truth=truth[case.uuid], record=records[case.uuid]))
        elif case.uuid in quiet:
            out.append(CaseTruth(case=case, fault=False))
        else:
            raise DatasetError(f"{problem_set.input_file}: case {case.uuid} has no line in "
                               f"{problem_set.truth_file.name} or {NO_FAULT_FILE}")
    return out


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: invalid JSON ({exc.msg})") from exc
    return rows


def compact_schedule(reference: list[dict], *, per_type: int, day: str, seed: int, packed: bool = False) -> list[dict]:
    """Pick ``per_type`` real faults of every fault type and lay them out one per hour (or ``packed``).

    Each fault keeps its type, target, level, offset within its hour and duration; only
    the date and hour move, so a benchmark covering all 18 types fits in one simulated day
    (or a few, at one fault an hour) instead of the weeks of the real schedule.
    ``packed`` lays them out as ``packed_schedule`` does instead.
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
    return packed_schedule(chosen, day=day, rng=rng) if packed else hourly_schedule(chosen, day=day)


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


# Nezha's habit (docs/datasets/nezha.md): faults recorded for three minutes, injected 4 to 9
# minutes apart (start to start), so each window's neighbours' windows and tails crowd its baseline.
PACKED_FAULT_MINUTES = 3
PACKED_SPACING_MINUTES = (4, 9)


def packed_schedule(rows: list[dict], *, day: str, rng: random.Random) -> list[dict]:
    """Real faults laid out back to back from 01:00 UTC of ``day``, as Nezha injects them.

    Each keeps its type, target and level; it lasts at most ``PACKED_FAULT_MINUTES`` (a pod kill
    keeps its second) and starts ``PACKED_SPACING_MINUTES`` after the one before, at a random second.
    """
    low, high = PACKED_SPACING_MINUTES
    start = parse_utc(f"{day}T01:00:00Z") + timedelta(seconds=rng.randrange(60))
    schedule = []
    for row in rows:
        duration = parse_utc(row["end_time"]) - parse_utc(row["start_time"])
        moved = dict(row)
        moved["start_time"] = format_utc(start)
        moved["end_time"] = format_utc(start + min(duration, timedelta(minutes=PACKED_FAULT_MINUTES)))
        schedule.append(moved)
        start += timedelta(minutes=rng.randint(low, high - 1), seconds=rng.randrange(60))
    return schedule
