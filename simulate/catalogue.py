"""The fault catalogue: what each of the 18 real fault types targets, how long it lasts and
how its ground truth is worded.

Facts come from ``catalogue_data.json``, derived once (at build time) from the 400 real
ground-truth lines: per fault type the observed (instance_type, instance) mix with counts,
the duration range and the modal key_metrics / key_observations / fault_description. The
simulator never reads the real ground truth here; only ``--schedule`` replays a given file.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from rca.errors import InputError
from rca.taxonomy import FAULT_TYPES

CATALOGUE_FILE = "catalogue_data.json"

INPUT_TEMPLATES: tuple[str, ...] = (
    "The system experienced an anomaly from {start} to {end}. Please infer the possible cause.",
    "Please analyze the abnormal event between {start} and {end} and provide the root cause.",
    "A fault occurred from {start} to {end}. Please identify the root cause.",
    "A fault was detected from {start} to {end}. Please analyze its root cause.",
    "Determine the root cause of the system fault during {start} to {end}.",
)


@dataclass(frozen=True)
class TargetChoice:
    instance_type: str  # service | pod | node
    instance: Any  # exactly as in the real ground truth: string or list
    weight: int


@dataclass(frozen=True)
class FaultSpec:
    fault_type: str
    fault_category: str
    real_cases: int  # how often the type occurs in the real 400 cases (sampling weight)
    targets: tuple[TargetChoice, ...]
    min_duration_s: float
    max_duration_s: float
    key_metrics: tuple[str, ...]
    key_observations: tuple[dict[str, Any], ...]
    fault_description: tuple[str, ...]

    def draw_target(self, rng: np.random.Generator) -> TargetChoice:
        weights = np.array([t.weight for t in self.targets], dtype=float)
        return self.targets[int(rng.choice(len(self.targets), p=weights / weights.sum()))]

    def draw_duration_s(self, rng: np.random.Generator) -> int:
        if self.max_duration_s <= 60:
            return int(round(self.min_duration_s))  # pod kill: about one second
        minutes = rng.integers(int(self.min_duration_s // 60), int(self.max_duration_s // 60) + 1)
        return int(minutes) * 60


class CatalogueError(InputError):
    """The packaged catalogue data is inconsistent with the taxonomy."""


@lru_cache(maxsize=1)
def load_catalogue() -> dict[str, FaultSpec]:
    """Every fault type of ``rca.taxonomy.FAULT_TYPES`` with its real targets and wording."""
    raw = json.loads(resources.files("simulate").joinpath(CATALOGUE_FILE).read_text(encoding="utf-8"))
    specs: dict[str, FaultSpec] = {}
    for fault_type, entry in raw["fault_types"].items():
        if FAULT_TYPES.get(fault_type) != entry["fault_category"]:
            raise CatalogueError(f"{CATALOGUE_FILE}: fault type {fault_type!r} has category "
                                 f"{entry['fault_category']!r}, taxonomy says {FAULT_TYPES.get(fault_type)!r}")
        specs[fault_type] = FaultSpec(
            fault_type=fault_type,
            fault_category=entry["fault_category"],
            real_cases=int(entry["cases"]),
            targets=tuple(TargetChoice(t["instance_type"], t["instance"], int(t["weight"])) for t in entry["targets"]),
            min_duration_s=float(entry["duration_s"]["min"]),
            max_duration_s=float(entry["duration_s"]["max"]),
            key_metrics=tuple(entry["key_metrics"]),
            key_observations=tuple(entry["key_observations"]),
            fault_description=tuple(entry["fault_description"]),
        )
    missing = set(FAULT_TYPES) - set(specs)
    if missing:
        raise CatalogueError(f"{CATALOGUE_FILE}: fault types missing: {sorted(missing)}")
    return specs
