"""The answer a case produces, in the task's format, and its validation.

Default format (the task statement, "early" rules): ``uuid, component, reason, time,
reasoning_trace``. The strict four-field format of the later submission rules drops
``time``. Both share the step shape ``{step, action, observation}``.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator

MAX_OBSERVATION_CHARS = 100
MAX_REASON_WORDS = 20


class TraceStep(BaseModel):
    step: int = Field(ge=1)
    action: str = Field(min_length=1)
    observation: str = Field(min_length=1, max_length=MAX_OBSERVATION_CHARS)


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

    def to_submission(self, *, strict: bool) -> dict[str, Any]:
        """The JSON line to submit; ``strict`` gives exactly the four fields of the later rules."""
        record = self.model_dump()
        if strict:
            record.pop("time")
        return record


def clip_observation(text: str) -> str:
    """Observations are scored on their first 100 characters: keep them whole and short."""
    text = " ".join(text.split())
    if len(text) <= MAX_OBSERVATION_CHARS:
        return text
    return text[: MAX_OBSERVATION_CHARS - 1].rstrip() + "…"
