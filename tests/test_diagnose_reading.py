"""The rules' reading: which part of the decision is a close call, and how the prompt says it."""
from __future__ import annotations

import pytest

from diagnose.prompt import build_prompt
from diagnose.reading import ReadingParams, contenders, open_fault_types, reading_text, rules_reading
from index.models import Candidate
from knowledge.signatures import SignatureMatch
from rca.system import bundled_system

PARAMS = ReadingParams(close_score_ratio=1.5, close_fit_gap=0.5)


def _candidates(top: float, second: float) -> list[Candidate]:
    return [Candidate(component="cartservice", level="service", score=top),
            Candidate(component="redis-cart", level="service", score=second)]


def _fit(fault_type: str, matched: int, expected: int, against: tuple[str, ...] = ()) -> SignatureMatch:
    return SignatureMatch(fault_type=fault_type, matched=tuple(f"s{i}" for i in range(matched)), expected=expected,
                          contradicted=against)


@pytest.mark.parametrize(("top", "second", "fits", "open_questions"), [
    (6.0, 1.0, [_fit("pod failure", 3, 4), _fit("pod kill", 1, 4)], []),  # clear on both counts
    (6.0, 5.0, [_fit("pod failure", 3, 4), _fit("pod kill", 1, 4)], ["component"]),  # rivals within 1.5x
    (6.0, 1.0, [_fit("pod failure", 3, 4), _fit("pod kill", 3, 4)], ["fault type"]),  # two types fit alike
    (6.0, 1.0, [_fit("pod failure", 3, 4, ("cpu up",)), _fit("pod kill", 1, 4)], ["fault type"]),  # contradiction
    (6.0, 1.0, [], ["fault type"]),  # no type fits at all
])
def test_close_calls_are_named(top, second, fits, open_questions):
    reading = rules_reading(_candidates(top, second), fits, params=PARAMS, system=bundled_system())
    assert reading.component == "cartservice"
    assert reading.open_questions == open_questions
    text = reading_text(reading)
    if open_questions:
        assert "Close call on the " + " and the ".join(open_questions) in text
    else:
        assert "The rules are clear here" in text


def test_reading_names_the_best_fit_and_its_margin():
    reading = rules_reading(_candidates(6.0, 2.0), [_fit("pod failure", 3, 4), _fit("pod kill", 1, 4)], params=PARAMS, system=bundled_system())
    assert (reading.fault_type, reading.alternative_type, reading.score_ratio) == ("pod failure", "pod kill", 3.0)
    assert reading.fit_gap == pytest.approx(1.0)
    assert reading_text(reading).startswith("Rules' reading (code, not a decision): cartservice with pod failure")


def test_the_prompt_ends_on_the_reading_when_given():
    candidates = _candidates(6.0, 5.0)
    reading = reading_text(rules_reading(candidates, [_fit("pod failure", 3, 4)], params=PARAMS, system=bundled_system()))
    with_reading = build_prompt(catalogue=[], uuid="u", window="w", candidates=candidates, sops=[], max_tokens=3000,
                                reading=reading, system=bundled_system())
    without = build_prompt(catalogue=[], uuid="u", window="w", candidates=candidates, sops=[], max_tokens=3000, system=bundled_system())
    user = with_reading.messages[-1]["content"]
    assert "Close call on the component" in user and "Close call" not in without.messages[-1]["content"]
    # The reading sits after the candidates and before the closing question.
    assert user.index("1. cartservice") < user.index("Rules' reading") < user.index("Choose: ")


def _ranked(*scores: float) -> list[Candidate]:
    names = ["cartservice", "redis-cart", "frontend", "aiops-k8s-01"]
    return [Candidate(component=n, level="node" if n.startswith("aiops") else "service", score=s)
            for n, s in zip(names, scores, strict=False)]


@pytest.mark.parametrize(("scores", "expected"), [
    ((6.0, 5.0, 4.2, 1.0), ["cartservice", "redis-cart", "frontend"]),  # three within 1.5x of the leader
    ((6.0, 1.0, 0.5), ["cartservice", "redis-cart"]),  # a clear leader still leaves the model a choice of two
    ((6.0,), ["cartservice"]),  # nothing else to choose
    ((6.0, 4.0, 3.9), ["cartservice", "redis-cart"]),  # exactly at the ratio counts as close
    ((6.0, 1.0, 5.0), ["cartservice", "frontend"]),  # ranked out of score order: the close one still counts
    ((6.0, 1.0, 0.5, 5.5), ["cartservice", "aiops-k8s-01"]),
])
def test_contenders_are_the_candidates_the_rules_cannot_separate(scores, expected):
    assert [c.component for c in contenders(_ranked(*scores), params=PARAMS)] == expected


@pytest.mark.parametrize(("fits", "expected"), [
    ([_fit("pod failure", 3, 4), _fit("pod kill", 1, 4), _fit("cpu stress", 1, 4)], ["pod failure", "pod kill"]),
    ([_fit("pod failure", 3, 4), _fit("pod kill", 3, 4), _fit("cpu stress", 3, 4)],
     ["pod failure", "pod kill", "cpu stress"]),  # all three tie
    ([_fit("pod failure", 3, 4)], ["pod failure"]),  # only one type shows any signal
])
def test_open_fault_types_are_the_close_fits(fits, expected):
    assert open_fault_types("cartservice", fits, params=PARAMS, system=bundled_system()) == expected


def test_with_no_fit_every_type_the_component_can_suffer_is_open():
    assert open_fault_types("aiops-k8s-01", [], params=PARAMS, system=bundled_system()) == ["node cpu stress", "node memory stress",
                                                                    "node disk fill"]


def test_the_prompt_asks_only_about_the_open_choices():
    candidates = _ranked(6.0, 5.0, 1.0)
    choices = {"cartservice": ["pod failure", "pod kill"], "redis-cart": ["cpu stress", "pod failure"]}
    user = build_prompt(catalogue=[], uuid="u", window="w", candidates=candidates, sops=[], max_tokens=3000,
                        choices=choices, system=bundled_system()).messages[-1]["content"]
    assert user.splitlines()[-1] == "Choose: 1 (pod failure, pod kill) or 2 (cpu stress, pod failure)."
    # The contenders' head lines name them; the candidate out of the question is not shown.
    assert "1. cartservice" in user and "2. redis-cart" in user and "frontend" not in user
