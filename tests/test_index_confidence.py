"""index.confidence: how far an answer naming the index's first candidate can be trusted."""
from __future__ import annotations

from dataclasses import replace

import pytest

from bench.index_eval import CaseRanking, IndexEvaluation, confidence_table
from index.confidence import answer_confidence, first_rival
from index.models import Candidate
from index.params import RankWeights
from rca.system import bundled_system

WEIGHTS = RankWeights()
SYSTEM = bundled_system()


def _candidates(*scores: float) -> list[Candidate]:
    return [Candidate(component=f"service{i}", level="service", score=s) for i, s in enumerate(scores)]


@pytest.mark.parametrize(("scores", "relaxed", "expected"), [
    ((), False, None),  # no candidate: no answer to trust
    ((), True, None),
    ((WEIGHTS.confident_score,), False, "high"),  # the threshold itself is enough
    ((9.0, 8.9), False, "low"),  # a rival about as strong: the evidence does not single the first out
    ((9.0, 9.0 - WEIGHTS.confident_margin), False, "high"),  # a lead of the margin itself is enough
    ((WEIGHTS.confident_score - 0.01,), False, "low"),
    ((1.5, 0.2), False, "low"),
    ((9.0,), True, "low"),  # candidates from relaxed thresholds rest on weak evidence, whatever they score
], ids=["none", "none-relaxed", "at-threshold", "close-rival", "lead", "just-below", "weak", "relaxed"])
def test_confidence_follows_the_first_candidates_score_and_the_scoring(scores, relaxed, expected):
    assert answer_confidence(_candidates(*scores), relaxed=relaxed, weights=WEIGHTS, system=SYSTEM) == expected


def test_a_services_own_pods_are_no_rivals():
    """A service and its pods are one answer's forms: a pod scoring close behind its service (or the
    service behind its pod) does not lower the confidence; the next other service does."""
    own = [Candidate(component="cartservice", level="service", score=9.0),
           Candidate(component="cartservice-0", level="pod", score=8.9),
           Candidate(component="redis-cart", level="service", score=7.9)]
    assert answer_confidence(own, relaxed=False, weights=WEIGHTS, system=SYSTEM) == "high"
    rival = [*own[:2], Candidate(component="frontend", level="service", score=8.5)]
    assert answer_confidence(rival, relaxed=False, weights=WEIGHTS, system=SYSTEM) == "low"


def test_the_threshold_is_a_setting():
    strict = replace(WEIGHTS, confident_score=10.0)
    assert answer_confidence(_candidates(9.0), relaxed=False, weights=WEIGHTS, system=SYSTEM) == "high"
    assert answer_confidence(_candidates(9.0), relaxed=False, weights=strict, system=SYSTEM) == "low"


def test_the_confidence_table_gives_each_levels_accuracy():
    def case(uuid: str, *, hit: bool, confidence):
        return CaseRanking(uuid=uuid, fault_type="cpu stress", truth=["a"], ranking=["a" if hit else "b"],
                           hits={1: hit, 3: hit, 5: hit}, chance={1: 0.1, 3: 0.3, 5: 0.5}, confidence=confidence)

    evaluation = IndexEvaluation(cases=[case("1", hit=True, confidence="high"), case("2", hit=True, confidence="high"),
                                        case("3", hit=False, confidence="low"), case("4", hit=True, confidence="low"),
                                        case("5", hit=False, confidence=None)])
    table = confidence_table(evaluation, title="t")
    rows = {table.columns[0]._cells[i]: [c._cells[i] for c in table.columns[1:]] for i in range(table.row_count)}
    assert rows["high"][:2] == ["2", "0.40"] and rows["high"][2].startswith("1.00")
    assert rows["low"][:2] == ["2", "0.40"] and rows["low"][2].startswith("0.50")
    assert rows["none (no candidate)"][:2] == ["1", "0.20"] and rows["none (no candidate)"][2].startswith("0.00")


def test_the_lead_is_over_the_first_rival_and_counts_right_answers_only():
    own = [Candidate(component="cartservice", level="service", score=8.0),
           Candidate(component="cartservice-0", level="pod", score=7.9),
           Candidate(component="frontend", level="service", score=2.0)]
    assert first_rival(own, system=SYSTEM).component == "frontend"  # its own pod is no rival
    assert first_rival(own[:2], system=SYSTEM) is None and first_rival([], system=SYSTEM) is None

    def case(uuid: str, *, hit: bool, lead):
        return CaseRanking(uuid=uuid, fault_type="cpu stress", truth=["a"], ranking=["a" if hit else "b"],
                           hits={1: hit, 3: hit, 5: hit}, chance={1: 0.1, 3: 0.3, 5: 0.5}, lead=lead)

    evaluation = IndexEvaluation(cases=[case("1", hit=True, lead=0.75), case("2", hit=True, lead=0.25),
                                        case("3", hit=False, lead=0.9), case("4", hit=True, lead=None)])
    assert evaluation.mean_lead(evaluation.cases) == pytest.approx(0.5)  # a wrong answer's lead is no merit
