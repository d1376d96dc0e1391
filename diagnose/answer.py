"""The answer a case produces, in the task's format, and its validation.

The rule version (``rca.challenge``, setting ``[challenge] rules``) shapes it: early rules
(the task statement) want ``uuid, component, reason, time, reasoning_trace`` and score an
observation's first 100 characters; late rules (the submission README) drop ``time`` and
score 20 words. Both share the step shape ``{step, action, observation}``.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, field_validator

from rca.challenge import RuleVersion


class TraceStep(BaseModel):
    step: int = Field(ge=1)
    action: str = Field(min_length=1)
    observation: str = Field(min_length=1)


class Answer(BaseModel):
    uuid: str
    component: str
    reason: str
    time: str  # "YYYY-MM-DD HH:MM:SS", UTC
    reasoning_trace: list[TraceStep] = Field(min_length=1)

    @field_validator("reasoning_trace")
    @classmethod
    def _steps_numbered_from_one(cls, steps: list[TraceStep]) -> list[TraceStep]:
        numbers = [s.step for s in steps]
        if numbers != list(range(1, len(steps) + 1)):
            raise ValueError(f"steps must be numbered 1..{len(steps)}, got {numbers}")
        return steps

    def to_submission(self, *, rules: RuleVersion) -> dict[str, Any]:
        """The JSON line to submit: exactly the fields ``rules`` require."""
        return {name: value for name, value in self.model_dump().items() if name in rules.required_fields}


def clip_observation(text: str, *, rules: RuleVersion) -> str:
    """Only the start of an observation is scored (100 characters or 20 words, by ``rules``):
    keep it on one line and within that budget, so what is written is what is scored."""
    text = " ".join(text.split())
    if rules.observation_chars is not None and len(text) > rules.observation_chars:
        return text[: rules.observation_chars - 1].rstrip() + "…"
    if rules.observation_words is not None and len(text.split()) > rules.observation_words:
        return " ".join(text.split()[: rules.observation_words])
    return text


def no_anomaly_answer(*, uuid: str, start: datetime, why: str, rules: RuleVersion) -> Answer:
    """The answer for a window in which nothing moved past the detectors: said so, in the answer's shape.

    A submission must hold one line per case (the judge rejects a short file whole), and "nothing
    moved" is a finding too: the component is left empty and the reason and the trace say what
    was compared and why no component stands out.
    """
    step = TraceStep(step=1, action="compare every metric, log template and call edge of the window with its baseline",
                     observation=clip_observation(f"no anomaly: {why}" if why else "no anomaly in any modality",
                                                  rules=rules))
    return Answer(uuid=uuid, component="", reason="no fault found: no telemetry moved in the window",
                  time=start.strftime("%Y-%m-%d %H:%M:%S"), reasoning_trace=[step])
