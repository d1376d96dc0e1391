"""The decision: the LLM picks component and fault type from the ranked candidates.

Code prepares evidence and validates the reply; it never overrides the model's choice.
Every call gets exactly one repair turn, quoting the validation error, if its reply is
invalid.

With ``confirm`` the decision takes two turns of one conversation: first the component
(with a provisional fault type), then, shown all of that component's evidence and the
SOP signal check of every fault type it can suffer, the fault type and the reason. The
second turn appends to the first, so the server's prompt cache covers all but the new turn.
"""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from diagnose.prompt import Prompt, decision_schema, fault_type_schema
from rca.errors import RcaError
from rca.llm.base import LLMBackend, LLMReply
from rca.system import SystemSpec

log = logging.getLogger(__name__)

SELF_CONSISTENCY_TEMPERATURE = 0.7
Parsed = TypeVar("Parsed")


class DecisionError(RcaError, RuntimeError):
    """The model's reply stayed invalid after the repair turn."""


class Decision(BaseModel):
    component: str
    fault_type: str
    reason: str = ""
    extras: dict[str, Any] = Field(default_factory=dict)  # values of the schema's extra fields


@dataclass
class DecisionOutcome:
    decision: Decision | None = None  # set once a valid reply (or the vote) is in
    replies: list[LLMReply] = field(default_factory=list)
    raw_responses: list[str] = field(default_factory=list)
    repaired: bool = False
    votes: dict[str, int] = field(default_factory=dict)
    first_fault_type: str | None = None  # the provisional type, when a confirmation turn followed
    confirm_turn: str | None = None  # the text of that turn

    @property
    def calls(self) -> int:
        return len(self.replies)


class _Reply(BaseModel):
    component: str | None = None
    candidate: int | None = None  # the candidate's number in the prompt, where the schema asks for one
    fault_type: str


class _Extra(BaseModel):
    model_config = ConfigDict(extra="allow")


class _TypeReply(BaseModel):
    fault_type: str
    reason: str = Field(min_length=5, max_length=400)


def _check_extra(text: str, extra: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """Values of the extra fields of a reply, checked against their ``enum`` where they have one."""
    found = _Extra.model_validate_json(text).model_extra or {}
    values: dict[str, Any] = {}
    for name, spec in extra.items():
        if name not in found:
            raise ValueError(f"{name}: field required")
        if "enum" in spec and found[name] not in spec["enum"]:
            raise ValueError(f"{name}: '{found[name]}' is not one of {', '.join(map(str, spec['enum']))}")
        values[name] = found[name]
    return values


def _check_decision(text: str, candidates: Sequence[str], *,
                    extra: Mapping[str, dict[str, Any]] | None = None,
                    fault_types: Mapping[str, Sequence[str]] | None = None,
                    numbers: Mapping[str, int] | None = None,
                    system: SystemSpec) -> Decision:
    """Parse the reply with pydantic and check it against the same rules as the schema.

    With ``numbers`` the schema asks for the candidate's number; a reply that names a candidate
    instead (a provider that only reads the schema from the prompt) is taken as well.
    """
    reply = _Reply.model_validate_json(text)
    component = reply.component
    if numbers and reply.candidate is not None:
        by_number = {n: name for name, n in numbers.items() if name in candidates}
        if reply.candidate not in by_number:
            raise ValueError(f"candidate: {reply.candidate} is not one of {', '.join(map(str, sorted(by_number)))}")
        if component is not None and component != by_number[reply.candidate]:
            raise ValueError(f"candidate: {reply.candidate} is {by_number[reply.candidate]}, not {component}")
        component = by_number[reply.candidate]
    if component is None:
        raise ValueError(f"{'candidate' if numbers else 'component'}: field required")
    if component not in candidates:
        raise ValueError(f"component: '{component}' is not one of the candidates")
    narrowed = (fault_types or {}).get(component)
    allowed = list(narrowed or system.applicable_fault_types(component))
    if reply.fault_type not in allowed:
        why = "is not among the open types of" if narrowed else "cannot happen to"
        raise ValueError(f"fault_type: '{reply.fault_type}' {why} {component}; choose from {', '.join(allowed)}")
    return Decision(component=component, fault_type=reply.fault_type,
                    extras=_check_extra(text, extra) if extra else {})


def _check_fault_type(text: str, component: str, *, system: SystemSpec) -> Decision:
    reply = _TypeReply.model_validate_json(text)
    allowed = system.applicable_fault_types(component)
    if reply.fault_type not in allowed:
        raise ValueError(f"fault_type: '{reply.fault_type}' cannot happen to {component}; choose from {', '.join(allowed)}")
    return Decision(component=component, fault_type=reply.fault_type, reason=reply.reason)


def _problem(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors(include_url=False)[0]
        return f"{'.'.join(str(p) for p in error['loc']) or 'reply'}: {error['msg']}"
    return str(exc)


def _ask(
    llm: LLMBackend,
    messages: list[dict[str, str]],
    *,
    schema: dict[str, Any],
    schema_name: str,
    check: Callable[[str], Parsed],
    reminder: str,
    outcome: DecisionOutcome,
    temperature: float | None,
    seed: int | None,
) -> tuple[Parsed, str]:
    """One call, checked; one repair turn quoting the error if the reply is invalid.

    Returns the parsed reply and its raw text.
    """
    reply = llm.chat(messages, json_schema=schema, schema_name=schema_name, temperature=temperature, seed=seed)
    outcome.replies.append(reply)
    outcome.raw_responses.append(reply.text)
    try:
        return check(reply.text), reply.text
    except (ValidationError, ValueError) as exc:
        problem = _problem(exc)
        log.warning("invalid model reply (%s); asking for one repair", problem)
    repair_messages = messages + [
        {"role": "assistant", "content": reply.text},
        {"role": "user", "content": f"Your reply was invalid: {problem}. Reply again with only the JSON object; {reminder}."},
    ]
    repaired = llm.chat(repair_messages, json_schema=schema, schema_name=schema_name, temperature=temperature, seed=seed)
    outcome.replies.append(repaired)
    outcome.raw_responses.append(repaired.text)
    outcome.repaired = True
    try:
        return check(repaired.text), repaired.text
    except (ValidationError, ValueError) as exc:
        raise DecisionError(f"model reply invalid after repair: {_problem(exc)}") from exc


def _one_decision(
    llm: LLMBackend,
    prompt: Prompt,
    candidates: Sequence[str],
    *,
    temperature: float | None,
    seed: int | None,
    outcome: DecisionOutcome,
    extra: Mapping[str, dict[str, Any]] | None = None,
    fault_types: Mapping[str, Sequence[str]] | None = None,
    numbers: Mapping[str, int] | None = None,
    system: SystemSpec,
) -> tuple[Decision, str]:
    reminder = (f"candidate must be one of: {', '.join(str(numbers[c]) for c in candidates)}" if numbers
                else f"component must be one of: {', '.join(candidates)}")
    return _ask(
        llm, prompt.messages,
        schema=decision_schema(candidates, extra=extra, fault_types=fault_types, numbers=numbers, system=system),
        schema_name="root_cause",
        check=lambda text: _check_decision(text, candidates, extra=extra, fault_types=fault_types, numbers=numbers,
                                           system=system),
        reminder=reminder, outcome=outcome, temperature=temperature, seed=seed,
    )


def decide(
    llm: LLMBackend,
    prompt: Prompt,
    candidates: Sequence[str],
    *,
    samples: int = 1,
    temperature: float = 0.0,
    confirm: Callable[[str], str] | None = None,
    extra: Mapping[str, dict[str, Any]] | None = None,
    outcome: DecisionOutcome | None = None,
    fault_types: Mapping[str, Sequence[str]] | None = None,
    numbers: Mapping[str, int] | None = None,
    system: SystemSpec,
) -> DecisionOutcome:
    """One greedy decision, or ``samples`` sampled decisions with a majority vote.

    The vote is over (component, fault_type) pairs; ties go to the earliest sample, so
    the outcome is still the model's own choice. ``confirm`` maps the chosen component
    to the text of a second turn that asks for its fault type and the reason. ``extra``
    (JSON-schema properties by name) asks for more fields, checked like the others and
    returned in ``decision.extras``. ``fault_types`` (candidate -> allowed types) narrows the
    types a candidate may be given below all those it can suffer. ``numbers`` (candidate -> its
    number in the prompt) asks for the number instead of the name. ``system`` decides what each
    candidate can suffer (its level, runtime, storage).
    """
    if not candidates:
        raise DecisionError("no candidates to choose from")
    unnumbered = [c for c in candidates if numbers and c not in numbers]
    if unnumbered:
        raise DecisionError(f"candidate(s) {', '.join(unnumbered)} have no number in the prompt")
    # A caller-supplied outcome keeps the replies gathered so far when a later call fails,
    # so the failed case's run record still holds them.
    outcome = DecisionOutcome() if outcome is None else outcome
    if samples <= 1:
        decision, raw = _one_decision(llm, prompt, candidates, temperature=temperature,
                                      seed=None, outcome=outcome, extra=extra, fault_types=fault_types,
                                      numbers=numbers, system=system)
    else:
        sampled = [
            _one_decision(llm, prompt, candidates, temperature=SELF_CONSISTENCY_TEMPERATURE,
                          seed=i + 1, outcome=outcome, extra=extra, fault_types=fault_types, numbers=numbers,
                          system=system)
            for i in range(samples)
        ]
        tally = Counter((d.component, d.fault_type) for d, _ in sampled)
        best_pair = tally.most_common(1)[0][0]  # ties keep first-seen order, i.e. the earliest sample
        outcome.votes = {f"{c}|{f}": n for (c, f), n in tally.items()}
        decision, raw = next((d, r) for d, r in sampled if (d.component, d.fault_type) == best_pair)
    if confirm is not None:
        outcome.first_fault_type = decision.fault_type
        outcome.confirm_turn = confirm(decision.component)
        messages = prompt.messages + [{"role": "assistant", "content": raw},
                                      {"role": "user", "content": outcome.confirm_turn}]
        decision, _ = _ask(
            llm, messages, schema=fault_type_schema(decision.component, system=system), schema_name="fault_type",
            check=lambda text: _check_fault_type(text, decision.component, system=system),
            reminder=f"fault_type must be one of: {', '.join(system.applicable_fault_types(decision.component))}",
            outcome=outcome, temperature=temperature, seed=None,
        )
    outcome.decision = decision
    return outcome
