"""Optional LLM-as-judge score of a session's trajectory against the problem (``--judge-trajectories``).

The judge sees the problem, the hidden truth, each step (clipped) and the evaluator's
verdict, and grades the *process* from 0 to 10 (stored as 0..1 in ``judge_score``).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from bench.problems import Problem
from bench.session import SessionResult
from rca.llm.base import LLMBackend, LLMError

TEMPLATE = Path(__file__).parent / "templates" / "trajectory_judge.txt"
SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 0, "maximum": 10}, "comment": {"type": "string"}},
    "required": ["score", "comment"],
    "additionalProperties": False,
}


class Verdict(BaseModel):
    score: int = Field(ge=0, le=10)
    comment: str = ""


class TrajectoryJudge:
    def __init__(self, *, llm: Callable[[], LLMBackend], step_chars: int = 240, max_steps: int = 10) -> None:
        self._llm = llm
        self.step_chars = step_chars
        self.max_steps = max_steps

    def score(self, problem: Problem, result: SessionResult) -> float:
        truth = problem.solution
        hidden = (f"{truth.fault_type} on {', '.join(truth.truth.instance)}" if truth.truth else "no fault in the window")
        steps = "\n".join(f"{s.step}. {s.action[:self.step_chars]} -> {s.observation[:self.step_chars]}"
                          for s in result.steps[: self.max_steps]) or "(none)"
        prompt = TEMPLATE.read_text(encoding="utf-8").format(
            problem=problem.context, task=problem.task, truth=hidden, steps=steps, outcome=result.outcome,
            correct=result.evaluation.correct)
        reply = self._llm().chat([{"role": "user", "content": prompt}], json_schema=SCHEMA, schema_name="grade",
                                 temperature=0.0, max_tokens=80)
        try:
            verdict = Verdict.model_validate(json.loads(reply.text))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise LLMError(f"trajectory judge reply is not the requested JSON ({exc})") from exc
        return verdict.score / 10.0
