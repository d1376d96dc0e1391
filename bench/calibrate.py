"""Calibrate ``[diagnose] detect_floor`` on tuning datasets (seeds the benchmark does not use).

The floor is the score threshold with the best balanced accuracy between fault windows
and no-fault windows (midpoint between neighbouring scores; ties go to the lower floor).
"""
from __future__ import annotations

from dataclasses import dataclass

from bench.problems import CaseTruth
from diagnose.pipeline import EvidenceSource, one_level_per_service
from rca.system import SystemSpec


@dataclass(frozen=True)
class Calibration:
    floor: float
    balanced_accuracy: float
    fault_scores: list[float]
    quiet_scores: list[float]


def window_scores(truths: list[CaseTruth], *, evidence: EvidenceSource, system: SystemSpec,
                  top_k: int = 12) -> list[tuple[bool, float]]:
    out = []
    for t in truths:
        result = evidence.query(start=t.case.start, end=t.case.end, top_k=top_k)
        ranked = one_level_per_service(result.candidates, system=system)
        out.append((t.fault, ranked[0].score if ranked else 0.0))
    return out


def calibrate_floor(scored: list[tuple[bool, float]]) -> Calibration:
    faults = sorted(s for f, s in scored if f)
    quiet = sorted(s for f, s in scored if not f)
    if not faults or not quiet:
        raise ValueError("calibration needs fault and no-fault windows (simulate with --no-fault-windows N)")
    values = sorted({s for _, s in scored})
    cuts = [values[0] - 1e-6] + [(a + b) / 2 for a, b in zip(values, values[1:])] + [values[-1] + 1e-6]
    best = max(cuts, key=lambda c: (sum(s >= c for s in faults) / len(faults) + sum(s < c for s in quiet) / len(quiet), -c))
    accuracy = (sum(s >= best for s in faults) / len(faults) + sum(s < best for s in quiet) / len(quiet)) / 2
    return Calibration(floor=round(best, 3), balanced_accuracy=round(accuracy, 3), fault_scores=faults,
                       quiet_scores=quiet)
