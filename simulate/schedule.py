"""Fault schedules: drawn at random with the real mix, or replayed from a ground-truth file.

A ``Fault`` is one injected incident resolved to concrete components (target service,
pods, node, network edge) plus the ground-truth record to publish for it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from rca.errors import InputError
from rca.system import bundled_system
from rca.taxonomy import canonical_fault_type
from rca.timeutil import UTC, format_utc, parse_utc
from simulate.catalogue import FaultSpec, load_catalogue
from simulate.topology import pods_of

# A fault starts at HH:10:xx UTC in most real cases; the rest start a little later.
ON_TIME_SHARE = 0.9
SKIP_HOUR_SHARE = 0.04  # the real schedule has a few hours without a case


class ScheduleError(InputError):
    """A ground-truth line cannot be turned into a fault; the message names file and line."""


@dataclass(frozen=True)
class Fault:
    uuid: str
    fault_type: str
    level: str  # service | pod | node
    service: str  # target service ("" for node faults and network faults' own field)
    pods: tuple[str, ...]  # affected pods (empty for node faults)
    node: str  # target node for node faults, else ""
    source: str
    destination: str
    start: datetime
    end: datetime
    record: dict[str, Any] = field(compare=False)
    # The world of this fault (simulate/randomize.py); the defaults are the fixed world.
    effect: float = 1.0  # multiplier on every effect size
    lag_s: float = 0.0  # effects start this long after the recorded start
    ramp_s: float = 0.0  # metric shifts climb linearly over this long
    recovery_s: float = 0.0  # effects outlive the recorded end by this long
    silence: str = "stop"  # how a dead pod's series look: stop | zero | gaps

    @property
    def effect_start_s(self) -> float:
        return self.start.timestamp() + self.lag_s

    @property
    def effect_end_s(self) -> float:
        return self.end.timestamp() + self.recovery_s

    def active(self, t_s: np.ndarray) -> np.ndarray:
        """Boolean mask of epoch seconds in which the fault acts (the window, shifted by lag and recovery)."""
        return (t_s >= self.effect_start_s) & (t_s <= self.effect_end_s)


def _uuid(rng: np.random.Generator, number: int) -> str:
    return f"{int(rng.integers(0, 2**32)):08x}-{number}"


def fault_from_record(record: dict[str, Any], *, where: str) -> Fault:
    """Resolve a real-format ground-truth record into concrete components (of the bundled HipsterShop)."""
    try:
        fault_type = canonical_fault_type(str(record["fault_type"]))
        start = parse_utc(str(record["start_time"]))
        end = parse_utc(str(record["end_time"]))
        instance = record["instance"]
        uuid = str(record["uuid"])
    except (KeyError, ValueError) as exc:
        raise ScheduleError(f"{where}: bad ground-truth record: {exc}") from exc
    if fault_type not in load_catalogue():
        raise ScheduleError(f"{where}: unknown fault_type {record['fault_type']!r}")
    system = bundled_system()  # the simulated world is the bundled HipsterShop
    names = [instance] if isinstance(instance, str) else [str(x) for x in instance]
    source, destination = str(record.get("source") or ""), str(record.get("destination") or "")
    if fault_type.startswith("network") and not (source and destination) and len(names) >= 2:
        source, destination = names[0], system.service_of(names[1])
    if source and destination:
        destination = system.service_of(destination)
        return Fault(uuid, fault_type, "service", "", (), "", source, destination, start, end, record)
    if len(names) == 0 or not names[0]:
        raise ScheduleError(f"{where}: empty instance")
    first = names[0]
    if system.is_node(first):
        return Fault(uuid, fault_type, "node", "", (), first, "", "", start, end, record)
    if system.level_of(first) == "pod":
        return Fault(uuid, fault_type, "pod", system.service_of(first), (first,), "", "", "", start, end, record)
    return Fault(uuid, fault_type, "service", first, pods_of(first), "", "", "", start, end, record)


def read_schedule(path: Path) -> list[Fault]:
    """Faults of a ground-truth JSONL file, in file order."""
    faults: list[Fault] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ScheduleError(f"{path}: cannot read schedule: {exc}") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ScheduleError(f"{path}:{number}: invalid JSON: {exc}") from exc
        faults.append(fault_from_record(record, where=f"{path}:{number}"))
    return faults


def _record(spec: FaultSpec, *, uuid: str, instance_type: str, instance: Any, start: datetime,
            end: datetime) -> dict[str, Any]:
    network = spec.fault_type.startswith("network")
    first = instance if isinstance(instance, str) else instance[0]
    return {
        "fault_category": spec.fault_category,
        "fault_type": spec.fault_type,
        "instance_type": instance_type,
        "service": "" if network or instance_type == "node" else bundled_system().service_of(first),
        "instance": instance,
        "source": instance[0] if network else "",
        "destination": instance[1] if network else "",
        "start_time": format_utc(start),
        "end_time": format_utc(end),
        "uuid": uuid,
        "key_observations": [dict(o) for o in spec.key_observations],
        "key_metrics": list(spec.key_metrics),
        "fault_description": list(spec.fault_description),
    }


def draw_schedule(*, rng: np.random.Generator, first_hour: datetime, hours: int, first_number: int = 1) -> list[Fault]:
    """About one fault an hour from ``first_hour`` (UTC, on the hour) with the real type/target mix."""
    catalogue = load_catalogue()
    types = sorted(catalogue)
    weights = np.array([catalogue[t].real_cases for t in types], dtype=float)
    faults: list[Fault] = []
    for h in range(hours):
        hour = first_hour + timedelta(hours=h)
        if rng.random() < SKIP_HOUR_SHARE:
            continue
        spec = catalogue[types[int(rng.choice(len(types), p=weights / weights.sum()))]]
        target = spec.draw_target(rng)
        minute = 10 if rng.random() < ON_TIME_SHARE else int(rng.integers(11, 16))
        start = hour.replace(tzinfo=UTC) + timedelta(minutes=minute, seconds=int(rng.integers(0, 60)))
        end = start + timedelta(seconds=spec.draw_duration_s(rng))
        uuid = _uuid(rng, first_number + len(faults))
        record = _record(spec, uuid=uuid, instance_type=target.instance_type, instance=target.instance,
                         start=start, end=end)
        faults.append(fault_from_record(record, where=f"drawn fault {uuid}"))
    return faults
