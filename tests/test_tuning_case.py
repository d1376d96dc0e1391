"""scripts/tuning_case.py: one tuning-day case read closely, and only the tuning day."""
from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import pytest

from index.models import Candidate, EvidenceItem
from knowledge.signatures import SignatureMatch
from rca.system import bundled_system
from tests.script_modules import SCRIPTS, load_script

tuning_case = load_script("tuning_case")


def _candidate(component: str, score: float, *, lines: int = 1) -> Candidate:
    evidence = [EvidenceItem(modality="trace", signal="stopped_after", key=f"{component}->x", component=component,
                             text=f"{component}->x: handlers stopped ({n})", z=30.0, own_share=0.5,
                             onset=datetime(2022, 8, 22, 4, 19, tzinfo=UTC)) for n in range(lines)]
    return Candidate(component=component, level="service", score=score, score_breakdown={"trace": score},
                     evidence=evidence)


def test_the_truth_is_marked_and_the_lead_is_over_the_first_rival() -> None:
    ranked = [_candidate("frontend", 2.0, lines=3), _candidate("checkoutservice", 1.5)]
    out = tuning_case.candidate_lines(ranked, truth=["frontend", "frontend-0"], top=2, lines=2,
                                         system=bundled_system())
    assert out[0].startswith("* frontend")
    assert out[1] == "      trace/stopped_after z=30.0 own=0.50 from 04:19: frontend->x: handlers stopped (0)"
    assert sum("handlers stopped" in line for line in out) == 3  # two of frontend's three lines, one of its rival's
    assert out[-1] == "  lead over the first rival (checkoutservice, 1.50): 0.250"


@pytest.mark.parametrize(("truth", "said"), [
    (["emailservice"], "  the truth ranks 3 (emailservice, 0.50)"),
    (["adservice"], "  the truth is not among the 3 candidates"),
])
def test_where_the_truth_ranks_when_it_is_not_shown(truth: list[str], said: str) -> None:
    ranked = [_candidate("frontend", 2.0), _candidate("checkoutservice", 1.0), _candidate("emailservice", 0.5)]
    assert said in tuning_case.candidate_lines(ranked, truth=truth, top=2, lines=0, system=bundled_system())


def test_fits_are_listed_best_first() -> None:
    fits = [SignatureMatch(fault_type="code error", matched=("trace 'stopped after'",), expected=4, contradicted=()),
            SignatureMatch(fault_type="network delay", matched=(), expected=3, contradicted=())]
    out = tuning_case.fit_lines(fits)
    assert out[0].startswith("  fit code error") and "0.50" in out[0]
    assert out[1].startswith("  fit network delay")


def test_no_option_reads_another_set() -> None:
    done = subprocess.run([sys.executable, str(SCRIPTS / "tuning_case.py"), "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0
    assert "--nezha" in done.stdout
    assert "--day" not in done.stdout and "--system" not in done.stdout and "--evaluation" not in done.stdout
