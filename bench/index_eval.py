"""Ranking quality of the evidence index against ground truth: AC@k per fault type, with
bootstrap intervals and the chance floor.

A hit at k means one element of the truth ``instance`` (a string or a list) is among the
first k candidates. Windows come from the case descriptions exactly as the diagnoser sees
them; ground truth is read here and only here. The chance floor draws k components
uniformly from the components seen in the window's data.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from bench.intervals import bootstrap_interval
from diagnose.cases import load_cases
from index.confidence import first_rival
from index.models import Candidate, Confidence
from index.params import IndexParams
from index.query import known_components, query_window
from judge.groundtruth import load_truth
from rca.system import SystemSpec

log = logging.getLogger(__name__)

KS = (1, 3, 5)


@dataclass
class CaseRanking:
    uuid: str
    fault_type: str
    truth: list[str]
    ranking: list[str]
    hits: dict[int, bool]
    chance: dict[int, float]
    confidence: Confidence | None = None  # the index's, in its first candidate (index.confidence)
    lead: float | None = None  # (first - first rival) / first, of their scores; None without a rival


@dataclass
class IndexEvaluation:
    cases: list[CaseRanking] = field(default_factory=list)

    def by_type(self) -> dict[str, list[CaseRanking]]:
        groups: dict[str, list[CaseRanking]] = defaultdict(list)
        for case in self.cases:
            groups[case.fault_type].append(case)
        return dict(sorted(groups.items()))

    @staticmethod
    def accuracy(cases: list[CaseRanking], k: int) -> tuple[float, float, float]:
        """AC@k over ``cases`` and its 95% bootstrap interval: (value, low, high)."""
        hits = [1.0 if c.hits[k] else 0.0 for c in cases]
        low, high = bootstrap_interval(hits)
        return (sum(hits) / len(hits) if hits else float("nan")), low, high

    @staticmethod
    def chance(cases: list[CaseRanking], k: int) -> float:
        return sum(c.chance[k] for c in cases) / len(cases) if cases else float("nan")

    @staticmethod
    def mean_lead(cases: list[CaseRanking]) -> float:
        """The first candidate's mean lead over its first rival where it is right: how clearly right answers win."""
        leads = [c.lead for c in cases if c.hits[1] and c.lead is not None]
        return sum(leads) / len(leads) if leads else float("nan")

    def misses(self, k: int = 3) -> list[CaseRanking]:
        return [c for c in self.cases if not c.hits[k]]


def evaluate_index(*, index_dir: Path, input_file: Path, gt_file: Path, params: IndexParams,
                   exclude_other_windows: bool = True) -> IndexEvaluation:
    """AC@k of every case of ``input_file``; with ``exclude_other_windows`` each query leaves the other
    cases' windows (input, as the diagnoser sees them) out of its baseline."""
    truths = {t.uuid: t for t in load_truth(gt_file)}
    result = IndexEvaluation()
    cases = load_cases(input_file)
    windows = [(c.start, c.end) for c in cases] if exclude_other_windows else []
    for case in cases:
        truth = truths.get(case.uuid)
        if truth is None:
            log.warning("case %s has no ground truth; skipped", case.uuid)
            continue
        others = [w for w in windows if w != (case.start, case.end)]
        found = query_window(index_dir, start=case.start, end=case.end, top_k=max(KS), params=params,
                             exclude_windows=others)
        ranking = [c.component for c in found.candidates]
        universe = known_components(index_dir, start=case.start, end=case.end, system=params.system)
        answers = set(truth.instance)
        right = len(answers & set(universe)) or 1
        result.cases.append(CaseRanking(
            uuid=case.uuid, fault_type=truth.fault_type, truth=list(truth.instance), ranking=ranking,
            hits={k: any(c in answers for c in ranking[:k]) for k in KS},
            chance={k: min(1.0, k * right / max(len(universe), 1)) for k in KS},
            confidence=found.confidence, lead=lead_over_rival(found.candidates, system=params.system),
        ))
    return result


def lead_over_rival(candidates: Sequence[Candidate], *, system: SystemSpec) -> float | None:
    """``(first - first rival) / first`` of their scores (``index.confidence.first_rival``); None without a rival."""
    rival = first_rival(candidates, system=system)
    if rival is None or candidates[0].score <= 0:
        return None
    return (candidates[0].score - rival.score) / candidates[0].score


def _cell(value: tuple[float, float, float]) -> str:
    point, low, high = value
    return f"{point:.2f} [{low:.2f}-{high:.2f}]"


def index_table(evaluation: IndexEvaluation, *, title: str) -> Table:
    """AC@k per fault type and overall, with 95% intervals and the chance floor."""
    table = Table(title=title)
    columns = ["fault type", "cases"] + [f"AC@{k} [95% CI]" for k in KS] + [f"chance@{k}" for k in KS]
    for column in columns:
        table.add_column(column, justify="left" if column == "fault type" else "right")
    for fault_type, cases in evaluation.by_type().items():
        table.add_row(fault_type, str(len(cases)), *[_cell(evaluation.accuracy(cases, k)) for k in KS],
                      *[f"{evaluation.chance(cases, k):.2f}" for k in KS])
    everything = evaluation.cases
    table.add_row("ALL", str(len(everything)), *[_cell(evaluation.accuracy(everything, k)) for k in KS],
                  *[f"{evaluation.chance(everything, k):.2f}" for k in KS], style="bold")
    return table


def confidence_table(evaluation: IndexEvaluation, *, title: str) -> Table:
    """AC@1 of the cases of each confidence (index.confidence), with 95% intervals: is "high" worth trusting?"""
    table = Table(title=title)
    for column in ("confidence", "cases", "share of cases", "AC@1 [95% CI]"):
        table.add_column(column, justify="left" if column == "confidence" else "right")
    everything = evaluation.cases
    for level in ("high", "low", None):
        cases = [c for c in everything if c.confidence == level]
        if not cases and level is None:
            continue
        accuracy = _cell(evaluation.accuracy(cases, 1)) if cases else "-"
        table.add_row(level or "none (no candidate)", str(len(cases)),
                      f"{len(cases) / len(everything):.2f}" if everything else "-", accuracy)
    return table
