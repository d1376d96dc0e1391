"""The decision: the LLM picks component and fault type from the ranked candidates.

Code prepares evidence and validates the reply; it never overrides the model's choice.
An invalid reply gets exactly one repair turn that quotes the validation error.
"""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from pydantic import BaseModel, Field, ValidationError

from rca.llm.base import LLMBackend, LLMReply
from rca.taxonomy import applicable_fault_types

from diagnose.prompt import Prompt, decision_schema

log = logging.getLogger(__name__)

SELF_CONSISTENCY_TEMPERATURE = 0.7


class DecisionError(RuntimeError):
    """The model's reply stayed invalid after the repair turn."""


class Decision(BaseModel):
    component: str
    fault_type: str
    reason: str


@dataclass
class DecisionOutcome:
    decision: Decision | None = None  # set once a valid reply (or the vote) is in
    replies: list[LLMReply] = field(default_factory=list)
    raw_responses: list[str] = field(default_factory=list)
    repaired: bool = False
    votes: dict[str, int] = field(default_factory=dict)

    @property
    def calls(self) -> int:
        return len(self.replies)


class _Reply(BaseModel):
    component: str
    fault_type: str
    reason: str = Field(min_length=5, max_length=400)


def _validate(text: str, candidates: Sequence[str]) -> Decision:
    """Parse the reply with pydantic and check it against the same rules as the schema."""
    reply = _Reply.model_validate_json(text)
    if reply.component not in candidates:
        raise ValueError(f"component: '{reply.component}' is not one of the candidates")
    allowed = applicable_fault_types(reply.component)
    if reply.fault_type not in allowed:
        raise ValueError(f"fault_type: '{reply.fault_type}' cannot happen to {reply.component}; choose from {', '.join(allowed)}")
    return Decision(**reply.model_dump())


def _one_decision(
    llm: LLMBackend,
    prompt: Prompt,
    candidates: Sequence[str],
    *,
    temperature: float | None,
    seed: int | None,
    outcome: DecisionOutcome,
) -> Decision:
    schema = decision_schema(candidates)
    reply = llm.chat(prompt.messages, json_schema=schema, schema_name="root_cause", temperature=temperature, seed=seed)
    outcome.replies.append(reply)
    outcome.raw_responses.append(reply.text)
    try:
        return _validate(reply.text, candidates)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        problem = f"{'.'.join(str(p) for p in error['loc']) or 'reply'}: {error['msg']}"
        log.warning("invalid model reply (%s); asking for one repair", problem)
    except ValueError as exc:
        problem = str(exc)
        log.warning("invalid model reply (%s); asking for one repair", problem)
    repair_messages = prompt.messages + [
        {"role": "assistant", "content": reply.text},
        {
            "role": "user",
            "content": f"Your reply was invalid: {problem}. Reply again with only the JSON object; "
            f"component must be one of: {', '.join(candidates)}.",
        },
    ]
    repaired = llm.chat(repair_messages, json_schema=schema, schema_name="root_cause", temperature=temperature, seed=seed)
    outcome.replies.append(repaired)
    outcome.raw_responses.append(repaired.text)
    outcome.repaired = True
    try:
        return _validate(repaired.text, candidates)
    except ValidationError as exc:
        raise DecisionError(f"model reply invalid after repair: {exc.errors(include_url=False)[0]['msg']}") from exc
    except ValueError as exc:
        raise DecisionError(f"model reply invalid after repair: {exc}") from exc


def decide(
    llm: LLMBackend,
    prompt: Prompt,
    candidates: Sequence[str],
    *,
    samples: int = 1,
    temperature: float = 0.0,
) -> DecisionOutcome:
    """One greedy decision, or ``samples`` sampled decisions with a majority vote.

    The vote is over (component, fault_type) pairs; ties go to the earliest sample, so
    the outcome is still the model's own choice.
    """
    if not candidates:
        raise DecisionError("no candidates to choose from")
    outcome = DecisionOutcome()
    if samples <= 1:
        outcome.decision = _one_decision(llm, prompt, candidates, temperature=temperature, seed=None, outcome=outcome)
        return outcome
    decisions = [
        _one_decision(llm, prompt, candidates, temperature=SELF_CONSISTENCY_TEMPERATURE, seed=i + 1, outcome=outcome)
        for i in range(samples)
    ]
    tally = Counter((d.component, d.fault_type) for d in decisions)
    best_pair = tally.most_common(1)[0][0]  # ties keep first-seen order, i.e. the earliest sample
    outcome.votes = {f"{c}|{f}": n for (c, f), n in tally.items()}
    outcome.decision = next(d for d in decisions if (d.component, d.fault_type) == best_pair)
    return outcome
