"""``diagnose --mode react``: the model investigates with the observation tools, then answers.

Thought -> action -> observation turns over :mod:`diagnose.tools`, each reply constrained to
``{"thought", "tool", "args"}`` (one schema branch per tool, component arguments limited to
the data's components). The index ranking is the first observation, run by code (evidence
compression first), so the model starts from the suspects instead of spending a call on
them. The loop stops at ``final_answer`` or after ``react_max_steps`` model turns; a reply
that is not a valid action, a repeated call or a failing tool comes back as an observation
and still counts as a turn. Then one constrained decision (``agents.final_decision``) names
a component that exists in the data and came up in the investigation.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from diagnose.agents import (
    Trajectory,
    action_label,
    agent_record,
    choice_set,
    final_decision,
    mentioned,
    short_catalogue,
    window_text,
)
from diagnose.cases import Case
from diagnose.pipeline import KnowledgeSource
from diagnose.record import RunRecord
from diagnose.templates import render
from diagnose.tools import Toolbox
from index.models import Candidate
from rca.challenge import RuleVersion
from rca.llm.base import LLMBackend
from rca.system import SystemSpec

log = logging.getLogger(__name__)

FINISH = "final_answer"
AGENT = "react"


class _Action(BaseModel):
    thought: str = ""
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


def _problem(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    return f"{'.'.join(str(p) for p in error['loc']) or 'reply'}: {error['msg']}"


def _user_turn(messages: list[dict[str, str]], text: str) -> None:
    """Append a user turn; two user turns in a row are merged (some chat templates require alternation)."""
    if messages and messages[-1]["role"] == "user":
        messages[-1] = {"role": "user", "content": messages[-1]["content"] + "\n\n" + text}
    else:
        messages.append({"role": "user", "content": text})


def run_react(
    case: Case,
    *,
    toolbox: Toolbox,
    ranked: Sequence[Candidate],
    llm: LLMBackend,
    knowledge: KnowledgeSource,
    max_steps: int,
    temperature: float,
    rules: RuleVersion,
    system: SystemSpec,
) -> RunRecord:
    """``system``: the system under diagnosis (its prompt paragraph, pods' services, what each
    component can suffer)."""
    started = time.perf_counter()
    trajectory = Trajectory()
    messages = [
        {"role": "system", "content": render("react_system", tools=toolbox.describe(), max_steps=max_steps,
                                             catalogue=short_catalogue(knowledge, system=system),
                                             **system.prompt_values())},
        {"role": "user", "content": render("react_case", uuid=case.uuid, window=window_text(case))},
    ]
    seen: dict[str, int] = {}
    texts: list[str] = []

    def observe(tool: str, args: dict[str, Any], *, by_code: bool) -> str:
        key = f"{tool} {json.dumps(args, sort_keys=True)}"
        if key in seen:
            text = (f"error: {tool} with these arguments was already called (turn {seen[key]}); "
                    f"call another tool or component, or {FINISH}")
            ok, lead = False, text
        else:
            seen[key] = len(seen) + 1
            observation = toolbox.invoke(tool, args)
            text, ok, lead = observation.text, observation.ok, observation.lead
        trajectory.tool(agent="code" if by_code else AGENT, tool=tool, args=args, observation=text)
        if ok:  # failed calls are in the record, not in the answer's trace
            trajectory.step(action_label(tool, args), lead)
            texts.append(text)
        return text

    # Evidence compression first: the index ranking is the opening observation.
    opening = {"thought": "Rank the suspects first.", "tool": "get_candidates", "args": {}}
    messages.append({"role": "assistant", "content": json.dumps(opening)})
    _user_turn(messages, "Observation:\n" + observe("get_candidates", {}, by_code=True))

    schema = toolbox.action_schema(finish=FINISH)
    finished = False
    for turn in range(1, max_steps + 1):
        reply = trajectory.ask(llm, agent=AGENT, messages=messages, schema=schema, schema_name="action",
                               temperature=temperature)
        messages.append({"role": "assistant", "content": reply.text})
        left = max_steps - turn
        try:
            action = _Action.model_validate_json(reply.text)
        except ValidationError as exc:
            text = (f"error: your reply is not an action ({_problem(exc)}); reply with JSON "
                    f'{{"thought": ..., "tool": one of {", ".join(toolbox.names)}, {FINISH}, "args": {{...}}}}')
            trajectory.tool(agent=AGENT, tool="(invalid reply)", args={}, observation=text)
        else:
            if action.tool == FINISH:
                finished = True
                break
            texts.append(json.dumps(action.args))
            text = observe(action.tool, action.args, by_code=False)
        _user_turn(messages, f"Observation:\n{text}\n({left} tool calls left)")
    if not finished:
        log.info("%s: react stopped at the step limit (%d)", case.uuid, max_steps)

    choices = choice_set(ranked=ranked, named=mentioned(texts, toolbox.components, system=system), known=toolbox.components)
    _user_turn(messages, render("react_final", choices=", ".join(choices)))
    t_decide = time.perf_counter()
    outcome, prompt = final_decision(llm, messages=messages, choices=choices, temperature=temperature, system=system)
    timings = {"agents_s": round(t_decide - started, 3), "decision_s": round(time.perf_counter() - t_decide, 3)}
    record = agent_record(case=case, mode="react", outcome=outcome, prompt=prompt, trajectory=trajectory, ranked=ranked,
                          knowledge=knowledge, decision_action="decision: final answer after the investigation",
                          started=started, timings=timings, rules=rules, system=system)
    log.info("%s -> %s (react, %d model calls, %s)", case.uuid, record.final_answer().component, len(outcome.replies),
             "finished" if finished else "step limit")
    return record
