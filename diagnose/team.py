"""``diagnose --mode team``: a controller, metric / log / trace specialists and a judge.

Round 1: code runs the index ranking (evidence compression first); the controller orders the
specialists and names the component it suspects; each specialist runs its tool over the whole
window and turns the output into a one-sentence finding with the component it points to (no
model call when its tool found nothing abnormal: that is the finding). The judge then names a
root cause with its fault type through the constrained decision (``agents.final_decision``,
the pipeline's schema, validation and repair) plus a ``verdict``: ``accept`` ends the case,
``more`` sends the controller back to pick one specialist and one component for a closer
look, after which the judge decides again. The last round can only accept, so a case takes at
most ``team_max_rounds`` rounds; with two rounds the trace has 3 to 5 steps (one per finding,
then the verdict).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from diagnose.agents import (
    MAX_CHOICES,
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
from diagnose.record import AgentCallRecord, RunRecord
from diagnose.templates import render
from diagnose.tools import Observation, Toolbox
from index.models import Candidate
from rca.challenge import RuleVersion
from rca.llm.base import LLMBackend
from rca.system import SystemSpec

log = logging.getLogger(__name__)

Specialist = Literal["metric", "log", "trace"]
SPECIALIST_TOOLS: dict[Specialist, str] = {"metric": "get_metrics", "log": "get_logs", "trace": "get_traces"}
SPECIALIST_LINES = 6  # tool lines a specialist reads


class _Plan(BaseModel):
    order: list[Literal["metric", "log", "trace"]]
    focus: str


class _Recheck(BaseModel):
    specialist: Literal["metric", "log", "trace"]
    component: str


class _Finding(BaseModel):
    finding: str = Field(min_length=3)
    suspect: str | None = None


def _enum(values: Sequence[str]) -> dict:
    return {"type": "string", "enum": list(values)}


class Team:
    """One case's team: shared toolbox, trajectory and findings."""

    def __init__(self, case: Case, *, toolbox: Toolbox, ranked: Sequence[Candidate], llm: LLMBackend,
                 knowledge: KnowledgeSource, temperature: float, system: SystemSpec) -> None:
        self.case = case
        self.system = system  # the system under diagnosis: prompt paragraph, pod naming, fault placement
        self.toolbox = toolbox
        self.ranked = list(ranked)
        self.llm = llm
        self.knowledge = knowledge
        self.temperature = temperature
        self.trajectory = Trajectory()
        self.findings: list[str] = []  # "metric: <finding>" lines the judge reads
        self.suspects: list[str] = []
        self.window = window_text(case)

    def _ask(self, agent: str, prompt: str, schema: dict, schema_name: str, round_no: int):
        return self.trajectory.ask(self.llm, agent=agent, messages=[{"role": "user", "content": prompt}], schema=schema,
                                   schema_name=schema_name, temperature=self.temperature, round_no=round_no)

    def plan(self, candidates_text: str) -> _Plan:
        known = self.toolbox.components
        focus = choice_set(ranked=self.ranked, named=mentioned([candidates_text], known, system=self.system), known=known)
        schema = {
            "type": "object",
            "properties": {"order": {"type": "array", "items": _enum(list(SPECIALIST_TOOLS)), "minItems": 3, "maxItems": 3},
                           "focus": _enum(focus)},
            "required": ["order", "focus"], "additionalProperties": False,
        }
        prompt = render("team_controller", uuid=self.case.uuid, window=self.window, candidates=candidates_text, feedback="",
                        **self.system.prompt_values())
        reply = self._ask("controller", prompt, schema, "plan", 1)
        try:
            plan = _Plan.model_validate_json(reply.text)
            if plan.focus not in focus:
                raise ValueError(f"focus {plan.focus!r} is not one of {focus}")
        except (ValidationError, ValueError) as exc:
            # The plan only orders the work: an invalid one is recorded and the default order used.
            log.warning("%s: invalid controller plan (%s); default order, index top as focus", self.case.uuid, exc)
            self.trajectory.calls[-1].observation = f"invalid plan ({exc}); default order used"
            return _Plan(order=list(SPECIALIST_TOOLS), focus=focus[0])
        order: list[Specialist] = list(dict.fromkeys(plan.order)) + [s for s in SPECIALIST_TOOLS if s not in plan.order]
        return _Plan(order=order, focus=plan.focus)

    def specialist(self, name: Specialist, *, component: str | None, hint: str, round_no: int) -> None:
        tool = SPECIALIST_TOOLS[name]
        args: dict[str, object] = {"component": component} if component else {}
        args["limit"] = SPECIALIST_LINES
        observation: Observation = self.toolbox.invoke(tool, args)
        if not observation.ok or observation.empty:
            # Nothing to interpret: the tool's own words are the finding, no model call.
            self.trajectory.tool(agent=name, tool=tool, args=args, observation=observation.text, round_no=round_no)
            self.findings.append(f"{name}: {observation.lead}")
            if observation.ok:
                self.trajectory.step(f"{name} specialist: {action_label(tool, args)}", observation.lead)
            return
        known = self.toolbox.components
        suspects = mentioned([observation.text], known, system=self.system) or choice_set(ranked=self.ranked, named=[], known=known)
        suspects = suspects[:MAX_CHOICES]
        schema = {
            "type": "object",
            # No maxLength: llama.cpp expands a length bound into nested rules that slow CPU sampling.
            "properties": {"finding": {"type": "string"}, "suspect": _enum(suspects)},
            "required": ["finding", "suspect"], "additionalProperties": False,
        }
        prompt = render("team_specialist", specialist=name, uuid=self.case.uuid, window=self.window,
                        call=action_label(tool, args), observation=observation.text + (f"\n{hint}" if hint else ""))
        reply = self._ask(name, prompt, schema, "finding", round_no)
        self.trajectory.tool(agent=name, tool=tool, args=args, observation=observation.text, round_no=round_no)
        try:
            finding = _Finding.model_validate_json(reply.text)
        except ValidationError as exc:
            log.warning("%s: %s specialist's reply invalid (%s); its tool output stands as the finding",
                        self.case.uuid, name, exc.errors(include_url=False)[0]["msg"])
            finding = _Finding(finding=observation.lead)
        text = " ".join(finding.finding.split())[:200]
        if finding.suspect in known:
            self.suspects.append(finding.suspect)
            text += f" (suspect: {finding.suspect})"
        self.findings.append(f"{name}: {text}")
        self.trajectory.step(f"{name} specialist: {action_label(tool, args)}", f"{observation.lead}; {text}")

    def judge(self, *, round_no: int, last: bool):
        known = self.toolbox.components
        choices = choice_set(ranked=self.ranked, named=self.suspects, known=known)
        verdicts = ["accept"] if last else ["accept", "more"]
        rule = ('This is the last round: set verdict to "accept".' if last else
                'Set verdict to "accept" when the findings point to one component and its fault type, '
                '"more" when they conflict or are too weak to tell.')
        ranking = "; ".join(f"{i + 1}. {c.component} ({c.score:.2f})" for i, c in enumerate(self.ranked[:3]))
        prompt = render("team_judge", uuid=self.case.uuid, window=self.window, catalogue=short_catalogue(self.knowledge, system=self.system),
                        ranking=ranking, findings="\n".join(f"- {f}" for f in self.findings), choices=", ".join(choices),
                        verdict_rule=rule, verdicts=" or ".join(f'"{v}"' for v in verdicts), **self.system.prompt_values())
        return final_decision(self.llm, messages=[{"role": "user", "content": prompt}], choices=choices,
                              temperature=self.temperature, extra={"verdict": _enum(verdicts)}, system=self.system)

    def recheck(self, *, judge_reason: str, round_no: int) -> _Recheck:
        known = self.toolbox.components
        components = choice_set(ranked=self.ranked, named=self.suspects, known=known)
        schema = {
            "type": "object",
            "properties": {"specialist": _enum(list(SPECIALIST_TOOLS)), "component": _enum(components)},
            "required": ["specialist", "component"], "additionalProperties": False,
        }
        prompt = render("team_recheck", uuid=self.case.uuid, window=self.window,
                        findings="\n".join(f"- {f}" for f in self.findings), judge=judge_reason)
        reply = self._ask("controller", prompt, schema, "recheck", round_no)
        try:
            choice = _Recheck.model_validate_json(reply.text)
            if choice.component not in components:
                raise ValueError(f"component {choice.component!r} is not one of {components}")
            return choice
        except (ValidationError, ValueError) as exc:
            log.warning("%s: invalid recheck request (%s); metric check of the judge's component", self.case.uuid, exc)
            self.trajectory.calls[-1].observation = f"invalid request ({exc}); metric check of {components[0]}"
            return _Recheck(specialist="metric", component=components[0])


def run_team(
    case: Case,
    *,
    toolbox: Toolbox,
    ranked: Sequence[Candidate],
    llm: LLMBackend,
    knowledge: KnowledgeSource,
    max_rounds: int,
    temperature: float,
    rules: RuleVersion,
    system: SystemSpec,
) -> RunRecord:
    """``system``: the system under diagnosis (its prompt paragraph, pods' services, what each
    component can suffer)."""
    started = time.perf_counter()
    team = Team(case, toolbox=toolbox, ranked=ranked, llm=llm, knowledge=knowledge, temperature=temperature,
                system=system)
    opening = toolbox.invoke("get_candidates", {"limit": 5})
    team.trajectory.tool(agent="code", tool="get_candidates", args={"limit": 5}, observation=opening.text)
    plan = team.plan(opening.text)
    hint = f"(The controller suspects {plan.focus}; confirm or refute it.)"
    for name in plan.order:
        team.specialist(name, component=None, hint=hint, round_no=1)

    round_no = 1
    while True:
        last = round_no >= max_rounds
        outcome, prompt = team.judge(round_no=round_no, last=last)
        decision = outcome.decision
        assert decision is not None
        if last or decision.extras.get("verdict") == "accept":
            break
        # Sent back: the judge's call becomes part of the trajectory, then one closer look.
        team.trajectory.replies.extend(outcome.replies)
        team.trajectory.calls.append(AgentCallRecord(agent="judge", round=round_no, messages=prompt.messages,
                                                     reply=outcome.raw_responses[-1],
                                                     observation=f"more: {decision.component} {decision.fault_type}?"))
        judge_reason = f"maybe {decision.fault_type} on {decision.component}, not sure: {decision.reason}"
        round_no += 1
        check = team.recheck(judge_reason=judge_reason, round_no=round_no)
        team.specialist(check.specialist, component=check.component, hint="", round_no=round_no)

    timings = {"agents_s": round(time.perf_counter() - started, 3)}
    record = agent_record(case=case, mode="team", outcome=outcome, prompt=prompt, trajectory=team.trajectory,
                          ranked=ranked, knowledge=knowledge, decision_action=f"judge: root cause accepted (round {round_no})",
                          started=started, timings=timings, rules=rules, system=team.system)
    log.info("%s -> %s (team, %d rounds, %d model calls)", case.uuid, record.final_answer().component, round_no,
             len(outcome.replies))
    return record
