"""What the agent modes (``react``, ``team``) share: prompt templates, the log of every model
and tool call, the final constrained decision and the answer built from the trajectory.

The final decision goes through ``decide.decide`` like the pipeline's: a JSON schema with one
branch per offered component (components that exist in the data and came up in the
investigation) and only the fault types that can happen to it, one repair turn on an
invalid reply. The answer's ``reasoning_trace`` is the trajectory actually taken: one step per
successful tool call or specialist finding, observations led by the KPI, log keyword or call
edge of the tool output, then the decision.
"""
from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from diagnose.answer import Answer, TraceStep, clip_observation
from diagnose.cases import Case
from diagnose.decide import DecisionOutcome, decide
from diagnose.pipeline import (
    EvidenceSource,
    KnowledgeSource,
    PreparedCase,
    _answer_time,
    _reason,
    _reason_metrics,
    compose_answer,
    one_level_per_service,
    run_record,
    runbook_matches,
)
from diagnose.prompt import Prompt, approx_tokens
from diagnose.reading import ReadingParams, rules_reading
from diagnose.record import AgentCallRecord, RunRecord
from diagnose.tools import TelemetrySource, Toolbox, case_toolbox
from index.models import Candidate
from rca.challenge import RuleVersion
from rca.errors import NoCandidates
from rca.llm.base import LLMBackend, LLMReply
from rca.settings import Settings
from rca.system import SystemSpec, system_from_settings
from rca.timeutil import format_utc

MAX_CHOICES = 8
_NAME = re.compile(r"[a-z0-9][a-z0-9-]*[a-z0-9]")


def short_catalogue(knowledge: KnowledgeSource, *, metrics: int = 3, system: SystemSpec) -> str:
    """One line per fault type with its first key metrics (the static part of the agents' prompts),
    less the types that can hit nothing in ``system`` (no JVM, no storage)."""
    possible = set(system.possible_fault_types())
    return "\n".join(f"- {entry.fault_type}: {', '.join(entry.key_metrics[:metrics])}"
                      for entry in knowledge.catalogue() if entry.fault_type in possible)


def window_text(case: Case) -> str:
    return f"{format_utc(case.start)} to {format_utc(case.end)}"


def mentioned(texts: Iterable[str], known: Sequence[str], *, system: SystemSpec) -> list[str]:
    """Components of ``known`` named in ``texts``, in order of first mention.

    Names are matched as whole tokens (``frontend->cartservice`` names both); a pod's
    service (``system``'s pod naming) counts as mentioned with it.
    """
    known_set = set(known)
    found: list[str] = []
    for text in texts:
        for token in _NAME.findall(text.lower()):
            for name in (token, system.service_of(token) if not system.is_node(token) else token):
                if name in known_set and name not in found:
                    found.append(name)
    return found


def choice_set(*, ranked: Sequence[Candidate], named: Sequence[str], known: Sequence[str],
               top: int = 3, limit: int = MAX_CHOICES) -> list[str]:
    """Components the final answer may name: the index's top ones, then those the
    investigation named; all of them exist in the data (``known``, when it is known)."""
    known_set = set(known)
    out: list[str] = []
    for name in [c.component for c in ranked[:top]] + list(named):
        if name not in out and (not known_set or name in known_set or name in {c.component for c in ranked}):
            out.append(name)
    return out[:limit]


@dataclass
class Trajectory:
    """Every model reply and tool call of one case, and the trace steps they make."""

    replies: list[LLMReply] = field(default_factory=list)
    calls: list[AgentCallRecord] = field(default_factory=list)
    steps: list[tuple[str, str]] = field(default_factory=list)  # (action, observation) per trace step

    def ask(self, llm: LLMBackend, *, agent: str, messages: list[dict[str, str]], schema: dict[str, Any],
            schema_name: str, temperature: float | None, round_no: int = 1) -> LLMReply:
        sent = [dict(m) for m in messages]  # the caller goes on appending to its list
        reply = llm.chat(sent, json_schema=schema, schema_name=schema_name, temperature=temperature)
        self.replies.append(reply)
        self.calls.append(AgentCallRecord(agent=agent, round=round_no, messages=sent, reply=reply.text))
        return reply

    def tool(self, *, agent: str, tool: str, args: Mapping[str, Any], observation: str, round_no: int = 1) -> None:
        """Attach a tool call to the last model call of ``agent`` in this round, or log it as run by code."""
        last = self.calls[-1] if self.calls else None
        if last is not None and last.agent == agent and last.round == round_no and last.tool is None:
            last.tool, last.args, last.observation = tool, dict(args), observation
        else:
            self.calls.append(AgentCallRecord(agent=agent, round=round_no, tool=tool, args=dict(args), observation=observation))

    def step(self, action: str, observation: str) -> None:
        self.steps.append((action, " ".join(observation.split())))  # clipped to the rules' budget in agent_record


def call_text(tool: str, args: Mapping[str, Any]) -> str:
    return f"{tool}({', '.join(f'{k}={v}' for k, v in args.items())})"


# What each observation tool is, in the words the pipeline's trace uses for the same analyses.
_ACTION_KINDS = {
    "get_metrics": "metric analysis", "get_logs": "log search", "get_traces": "trace analysis",
    "get_candidates": "evidence index ranking", "search_sops": "SOP search",
}


def action_label(tool: str, args: Mapping[str, Any]) -> str:
    kind = _ACTION_KINDS.get(tool)
    return f"{kind}: {call_text(tool, args)}" if kind else call_text(tool, args)


def open_investigation(case: Case, *, settings: Settings, evidence: EvidenceSource, knowledge: KnowledgeSource,
                       telemetry: TelemetrySource, system: SystemSpec | None = None) -> tuple[Toolbox, list[Candidate]]:
    """The case's toolbox and the index ranking (one level per service when configured, as the pipeline).

    ``system``: the system under diagnosis (None: the one ``[system] file`` names).
    """
    system = system_from_settings(settings) if system is None else system
    result = evidence.query(start=case.start, end=case.end, top_k=4 * MAX_CHOICES)
    ranked = (one_level_per_service(result.candidates, system=system) if settings.diagnose.one_level_per_service
              else result.candidates)
    if not ranked:
        raise NoCandidates(f"{case.uuid}: the index holds no candidates for {window_text(case)}")
    toolbox = case_toolbox(case, telemetry=telemetry, evidence=evidence, knowledge=knowledge,
                           max_chars=settings.diagnose.observation_chars, sop_k=settings.knowledge.top_k, ranked=ranked,
                           system=system)
    return toolbox, list(ranked)


def final_decision(llm: LLMBackend, *, messages: list[dict[str, str]], choices: Sequence[str],
                   temperature: float, extra: Mapping[str, dict[str, Any]] | None = None,
                   system: SystemSpec) -> tuple[DecisionOutcome, Prompt]:
    """The constrained root-cause decision over ``choices`` (schema, validation and repair of ``decide``;
    ``system`` decides what each choice can suffer)."""
    prompt = Prompt(messages=messages, approx_tokens=sum(approx_tokens(m["content"]) for m in messages),
                    dropped_evidence=0, dropped_sops=0)
    return decide(llm, prompt, list(choices), temperature=temperature, extra=extra, system=system), prompt


def agent_record(
    *,
    case: Case,
    mode: Literal["react", "team"],
    outcome: DecisionOutcome,
    prompt: Prompt,
    trajectory: Trajectory,
    ranked: Sequence[Candidate],
    knowledge: KnowledgeSource,
    decision_action: str,
    started: float,
    timings: dict[str, float],
    rules: RuleVersion,
    system: SystemSpec,
) -> RunRecord:
    """The answer (trace = the trajectory, then the decision) and the run record of an agent mode."""
    decision = outcome.decision
    assert decision is not None  # decide() always sets it or raises
    chosen = next((c for c in ranked if c.component == decision.component), None)
    metrics = _reason_metrics(decision.fault_type, chosen, knowledge)
    verdict = f"{decision.component}: {decision.fault_type}" + (f" ({', '.join(metrics)})" if metrics else "")
    steps = [TraceStep(step=i + 1, action=a, observation=clip_observation(o, rules=rules))
             for i, (a, o) in enumerate(trajectory.steps)]
    steps.append(TraceStep(step=len(steps) + 1, action=decision_action, observation=clip_observation(verdict, rules=rules)))
    answer = Answer(
        uuid=case.uuid, component=decision.component,
        reason=_reason(decision.reason, decision.fault_type, decision.component, metrics),
        time=_answer_time(case, chosen), reasoning_trace=steps,
    )
    # Usage covers every call of the case: the agents' calls, then the decision's.
    outcome.replies = trajectory.replies + outcome.replies
    outcome.raw_responses = [c.reply for c in trajectory.calls if c.reply is not None] + outcome.raw_responses
    timings["llm_s"] = round(sum(r.latency_s for r in outcome.replies), 3)
    timings["total_s"] = round(time.perf_counter() - started, 3)
    # What the rules alone would have answered on the same ranking: the agent modes' ablation.
    shown = list(ranked[:MAX_CHOICES])
    matches = runbook_matches(shown, knowledge, system=system)
    reading = rules_reading(shown, matches.get(shown[0].component) or [], params=ReadingParams(), system=system)
    rules_answer = compose_answer(case, candidates=shown, component=reading.component, fault_type=reading.fault_type,
                                  model_reason="", knowledge=knowledge, rules=rules)
    shown_case = PreparedCase(case=case, candidates=shown, missing=[], data_status=[], sops=[], signature_matches=matches,
                              prompt=prompt, timings_s=timings, reading=reading)
    return run_record(case, prepared=shown_case, outcome=outcome, timings=timings, answer=answer,
                      rules_answer=rules_answer, mode=mode, agent_calls=trajectory.calls)
