"""The rules' reading of a case and how sure it is: where the model's judgement is needed.

The index ranks components and the SOP signal check ranks fault types; both are rules. Where
they are clear (a leading candidate far ahead, a best fault type well ahead of the next, no
contradicting evidence), a small model adds little and mostly adds noise; where they are close
or contradict themselves, the rules are weakest and the model's reading of the evidence is
worth most. This module measures those margins so the prompt can say which part of the
decision is open (``diagnose.prompt``) and run records can show it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from index.models import Candidate
from knowledge.signatures import SignatureMatch
from rca.system import SystemSpec


@dataclass(frozen=True)
class ReadingParams:
    """When the rules' reading counts as close (``[diagnose]`` settings carry the values)."""

    close_score_ratio: float = 1.5  # top candidate's score below this multiple of the next one: close
    close_fit_gap: float = 0.5  # best SOP fit's score within this of the next type's: close
    min_contenders: int = 2  # the model always chooses among at least this many components and fault types


@dataclass(frozen=True)
class RulesReading:
    """Index top-1 with its best SOP fit, and how far each leads the runner-up."""

    component: str
    fault_type: str
    runner_up: str | None  # next candidate
    score_ratio: float | None  # top score / runner-up score (None: no runner-up or it scores 0)
    alternative_type: str | None  # next-best fault type of the top candidate
    fit_gap: float | None  # best fit's score minus the alternative's
    contradicted: tuple[str, ...]  # evidence the best fit would not produce
    component_close: bool
    type_close: bool

    @property
    def open_questions(self) -> list[str]:
        questions = []
        if self.component_close:
            questions.append("component")
        if self.type_close or self.contradicted:
            questions.append("fault type")
        return questions


def rules_reading(candidates: Sequence[Candidate], fits: Sequence[SignatureMatch], *,
                  params: ReadingParams, system: SystemSpec) -> RulesReading:
    """The reading of ``candidates`` (ranked) given the top candidate's SOP ``fits`` (best first);
    ``system`` says what the top candidate can suffer when no fit is known."""
    top = candidates[0]
    runner = candidates[1] if len(candidates) > 1 else None
    ratio = top.score / runner.score if runner is not None and runner.score > 0 else None
    best = fits[0] if fits else None
    second = fits[1] if len(fits) > 1 else None
    gap = best.score - second.score if best is not None and second is not None else None
    return RulesReading(
        component=top.component,
        fault_type=best.fault_type if best else system.applicable_fault_types(top.component)[0],
        runner_up=runner.component if runner else None,
        score_ratio=round(ratio, 2) if ratio is not None else None,
        alternative_type=second.fault_type if second else None,
        fit_gap=round(gap, 2) if gap is not None else None,
        contradicted=best.contradicted if best else (),
        component_close=ratio is not None and ratio < params.close_score_ratio,
        # No signature fits at all: the type is open too.
        type_close=best is None or len(best.matched) == 0 or (gap is not None and gap < params.close_fit_gap),
    )


def reading_text(reading: RulesReading) -> str:
    """The reading in words, for the end of the case prompt."""
    lead = (f"{reading.component} leads {reading.runner_up} {reading.score_ratio:.1f}x"
            if reading.score_ratio is not None else f"{reading.component} has no close rival")
    fit = reading.fault_type
    if reading.alternative_type is not None:
        fit += f" (next: {reading.alternative_type}, fit gap {reading.fit_gap:.1f})"
    lines = [f"Rules' reading (code, not a decision): {reading.component} with {fit}; {lead}."]
    if reading.contradicted:
        lines.append(f"Its evidence contradicts {reading.fault_type}: {', '.join(reading.contradicted)}.")
    open_questions = reading.open_questions
    if open_questions:
        lines.append("Close call on the " + " and the ".join(open_questions)
                     + ": weigh the candidates' own evidence and decide.")
    else:
        lines.append("The rules are clear here; change the reading only if the evidence lines contradict it.")
    return "\n".join(lines)


def contenders(candidates: Sequence[Candidate], *, params: ReadingParams) -> list[Candidate]:
    """The candidates the rules cannot tell apart from the leader: those scoring within
    ``close_score_ratio`` of it, and never fewer than ``min_contenders`` (ranked order kept).

    A candidate several times weaker than the leader is context for the model, not a choice:
    on tuning seeds the 1.5B model's picks from far down the list were wrong far more often than right.
    """
    if not candidates:
        return []
    floor = candidates[0].score / params.close_score_ratio
    close = [c for c in candidates if c.score >= floor]
    # The ranking is not strictly by score (a service placed right after its pod, index.rank),
    # so fill up to the minimum from the ranked order rather than slicing it.
    extra = [c for c in candidates if c not in close][: max(0, params.min_contenders - len(close))]
    return [c for c in candidates if c in close or c in extra]


def open_fault_types(component: str, fits: Sequence[SignatureMatch], *, params: ReadingParams,
                     system: SystemSpec) -> list[str]:
    """The fault types of ``component`` still open: its SOP fits within ``close_fit_gap`` of the best
    (at least ``min_contenders`` of them), or every type it can suffer when no SOP signal fits."""
    if not fits:
        return system.applicable_fault_types(component)
    best = fits[0].score
    close = [f.fault_type for f in fits if f.score >= best - params.close_fit_gap]
    ranked = [f.fault_type for f in fits]
    return ranked[: max(len(close), params.min_contenders)]
