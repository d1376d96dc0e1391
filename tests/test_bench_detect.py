"""Detection: the calibrated floor, and the model consulted only near it (diagnose --detect)."""
from datetime import UTC, datetime

from bench.calibrate import calibrate_floor
from diagnose.cases import Case
from diagnose.detect import detect_case
from index.models import Candidate
from rca.settings import Settings
from rca.system import system_from_settings
from tests.fakes import RecordedBackend, StaticEvidence

CASE = Case(uuid="w-1", description="x", start=datetime(2025, 6, 5, 17, 10, tzinfo=UTC),
            end=datetime(2025, 6, 5, 17, 20, tzinfo=UTC))


def _settings(floor=2.0):
    s = Settings()
    return s.model_copy(update={"diagnose": s.diagnose.model_copy(update={"detect_floor": floor, "detect_margin": 0.25})})


def _evidence(score):
    return StaticEvidence([Candidate(component="cartservice", level="service", score=score)] if score else [])


def test_far_from_the_floor_the_evidence_decides_without_a_model():
    opened = []

    def model():
        opened.append(1)
        return RecordedBackend(['{"fault": false, "reason": "x"}'])

    high = detect_case(CASE, settings=_settings(), evidence=_evidence(6.0), model=model)
    low = detect_case(CASE, settings=_settings(), evidence=_evidence(0.8), model=model)
    empty = detect_case(CASE, settings=_settings(), evidence=_evidence(0), model=model)
    assert (high.fault, low.fault, empty.fault) == (True, False, False)
    assert {high.decided_by, low.decided_by, empty.decided_by} == {"evidence"} and not opened


def test_near_the_floor_the_model_judges():
    backend = RecordedBackend(['{"fault": false, "reason": "a two-minute blip only"}'])
    found = detect_case(CASE, settings=_settings(), evidence=_evidence(2.2), model=lambda: backend)
    assert found.decided_by == "model" and found.fault is False and "blip" in found.reason
    # One prompt mechanism (diagnose/prompts/*.md): the configured system's paragraph, no unfilled value.
    prompt = backend.requests[0]["messages"][0]["content"]
    assert system_from_settings(_settings()).prompt_paragraph() in prompt
    assert "Strongest evidence score 2.20" in prompt and "$" not in prompt


def test_calibrated_floor_separates_fault_from_quiet_windows():
    result = calibrate_floor([(True, 2.5), (True, 4.0), (True, 9.0), (False, 0.7), (False, 1.8)])
    assert 1.8 < result.floor < 2.5 and result.balanced_accuracy == 1.0
