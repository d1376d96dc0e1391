"""The rules' reading: which part of the decision is a close call, and how the prompt says it."""
from __future__ import annotations

import pytest

from diagnose.prompt import build_prompt
from diagnose.reading import ReadingParams, reading_text, rules_reading
from index.models import Candidate
from knowledge.signatures import SignatureMatch

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
    reading = rules_reading(_candidates(top, second), fits, params=PARAMS)
    assert reading.component == "cartservice"
    assert reading.open_questions == open_questions
    text = reading_text(reading)
    if open_questions:
        assert "Close call on the " + " and the ".join(open_questions) in text
    else:
        assert "The rules are clear here" in text


def test_reading_names_the_best_fit_and_its_margin():
    reading = rules_reading(_candidates(6.0, 2.0), [_fit("pod failure", 3, 4), _fit("pod kill", 1, 4)], params=PARAMS)
    assert (reading.fault_type, reading.alternative_type, reading.score_ratio) == ("pod failure", "pod kill", 3.0)
    assert reading.fit_gap == pytest.approx(1.0)
    assert reading_text(reading).startswith("Rules' reading (code, not a decision): cartservice with pod failure")


def test_the_prompt_ends_on_the_reading_when_given():
    candidates = _candidates(6.0, 5.0)
    reading = reading_text(rules_reading(candidates, [_fit("pod failure", 3, 4)], params=PARAMS))
    with_reading = build_prompt(catalogue=[], uuid="u", window="w", candidates=candidates, sops=[], max_tokens=3000,
                                reading=reading)
    without = build_prompt(catalogue=[], uuid="u", window="w", candidates=candidates, sops=[], max_tokens=3000)
    user = with_reading.messages[-1]["content"]
    assert "Close call on the component" in user and "Close call" not in without.messages[-1]["content"]
    # The reading sits after the candidate summary and before the closing instruction.
    assert user.index("In short:") < user.index("Rules' reading") < user.index("Choose the root-cause component")
