"""Agents behind the one contract ``async get_action(state) -> str``.

- ``chance``: uniform guesses (the floor every other agent must clear);
- ``index-top1``: the evidence index's first candidate, no model;
- ``index-sop``: the first candidate plus its best SOP signal fit (fault type, mitigation), no model;
- ``diagnoser``: the product's diagnoser as a whole-case agent (``Diagnoser.diagnose`` and
  ``diagnose --detect``), one diagnosis per case shared by its tasks;
- ``react``: a model choosing one tool call per step over the session's tools.

Whole-case agents read the case from the problem text they are given (uuid and window)
and answer in a few actions; the ReAct agent sees only what its tool calls return.
"""
from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.observe import sop_documents, sop_section
from bench.problems import answer_level, is_tidb
from diagnose.cases import Case, parse_window
from diagnose.detect import detect_case, detect_from_candidates
from diagnose.pipeline import PreparedCase
from diagnose.record import RunRecord
from diagnose.service import Diagnoser
from rca.llm.base import LLMBackend, LLMError
from rca.settings import DiagnoseMode
from rca.system import bundled_system
from rca.taxonomy import APP_SERVICES, FAULT_TYPES, STATEFUL_SERVICES
from simulate.topology import APM_PODS, WORKER_NODES

TEMPLATES = Path(__file__).parent / "templates"
# What the chance agent guesses from: the simulated system's answerable components.
ALL_COMPONENTS: tuple[str, ...] = (*APP_SERVICES, *STATEFUL_SERVICES, *APM_PODS, *WORKER_NODES)
ACTION_PARAM = {"restart_pod": "pod", "delete_pod": "pod", "restart_deployment": "service",
                "rollback_deployment": "service", "fix_target_port": "service", "scale_deployment": "service",
                "cordon_drain_node": "node", "restart_tidb": "component", "wait": None}


def case_from_context(problem_desc: str) -> Case:
    """The case a problem text is about (``Incident <uuid>: <description>`` + window line)."""
    lines = problem_desc.splitlines()
    uuid = lines[0].removeprefix("Incident ").split(":", 1)[0].strip()
    window = next((line for line in lines if line.startswith("Window (UTC):")), problem_desc)
    start, end = parse_window(window, uuid=uuid)
    return Case(uuid=uuid, description=problem_desc, start=start, end=end)


def task_from_instructions(instructions: str) -> str:
    return instructions.split("(", 1)[1].split(")", 1)[0]


def call(name: str, args: dict[str, Any] | None = None) -> str:
    return f"{name}({json.dumps(args) if args else ''})"


def _fits(param: str | None, component: str) -> dict[str, Any] | None:
    """Arguments that point ``param`` at ``component`` (None when it cannot)."""
    if param is None:
        return {"minutes": 1}
    system = bundled_system()  # the simulated cloud is the bundled HipsterShop
    if param == "node":
        return {"node": component} if system.is_node(component) else None
    if param == "component":
        return {"component": system.service_of(component)} if is_tidb(component) else None
    if system.is_node(component) or is_tidb(component):
        return None
    if param == "pod":
        return {"pod": component} if component != system.service_of(component) else None
    return {"service": system.service_of(component)}


def default_action(component: str) -> str:
    """Without a fault type: restart whatever the component is."""
    for name in ("cordon_drain_node", "restart_tidb", "restart_pod", "restart_deployment"):
        args = _fits(ACTION_PARAM[name], component)
        if args is not None:
            return call(name, args)
    return call("wait", {"minutes": 1})


def sop_action(component: str, mitigation_text: str | None) -> str:
    """The first action the SOP's Mitigation section names that fits the component."""
    if mitigation_text:
        named = [tok for tok in mitigation_text.split("`")[1::2] if tok in ACTION_PARAM]
        for name in named:
            args = _fits(ACTION_PARAM[name], component)
            if args is not None:
                return call(name, args)
    return default_action(component)


class ScriptedAgent:
    """A no-conversation agent: plans its actions once from the problem, then plays them."""

    usage: tuple[int, int]

    def __init__(self) -> None:
        self.usage = (0, 0)
        self._plan: list[str] = []
        self.case: Case | None = None
        self.task = ""

    def init_context(self, problem_desc: str, instructions: str, apis: str) -> None:
        self.case = case_from_context(problem_desc)
        self.task = task_from_instructions(instructions)
        self._plan = []

    async def get_action(self, state: str) -> str:
        if not self._plan:
            assert self.case is not None, "init_context first"
            self._plan = self.plan(self.case, self.task)
        return self._plan.pop(0) if len(self._plan) > 1 else self._plan[0]

    def plan(self, case: Case, task: str) -> list[str]:
        raise NotImplementedError


class ChanceAgent(ScriptedAgent):
    """Uniform guesses: fault or not, any component, any fault type, any action."""

    def __init__(self, *, seed: int) -> None:
        super().__init__()
        self.seed = seed

    def plan(self, case: Case, task: str) -> list[str]:
        rng = random.Random(f"{self.seed}/{case.uuid}/{task}")
        component = rng.choice(ALL_COMPONENTS)
        if task == "detection":
            return [call("submit", {"fault": rng.random() < 0.5})]
        if task == "localisation":
            return [call("submit", {"components": rng.sample(ALL_COMPONENTS, 3)})]
        if task == "analysis":
            return [call("submit", {"component": component, "level": answer_level(component),
                                    "fault_type": rng.choice(list(FAULT_TYPES)), "reason": "guess"})]
        name = rng.choice([n for n in ACTION_PARAM if _fits(ACTION_PARAM[n], component) is not None])
        return [call(name, _fits(ACTION_PARAM[name], component)), call("submit", {})]


@dataclass
class CaseView:
    """What the index (and, for the diagnoser, the model) says about one case."""

    prepared: PreparedCase | None
    record: RunRecord | None = None

    @property
    def ranked(self) -> list[str]:
        return [c.component for c in self.prepared.candidates] if self.prepared else []

    def best_fit(self, component: str) -> str | None:
        if self.prepared is None:
            return None
        fits = self.prepared.signature_matches.get(component, [])
        return fits[0].fault_type if fits else None


class IndexAgent(ScriptedAgent):
    """``index-top1`` (no fault type: the first applicable one) or ``index-sop`` (its best SOP fit)."""

    def __init__(self, *, diagnoser: Diagnoser, use_sop: bool, views: dict[str, CaseView]) -> None:
        super().__init__()
        self.diagnoser = diagnoser
        self.use_sop = use_sop
        self.views = views  # shared between sessions: one index query per case

    def view(self, case: Case) -> CaseView:
        if case.uuid not in self.views:
            try:
                self.views[case.uuid] = CaseView(self.diagnoser.prepare(case))
            except LookupError:
                self.views[case.uuid] = CaseView(None)
        return self.views[case.uuid]

    def plan(self, case: Case, task: str) -> list[str]:
        view = self.view(case)
        if task == "detection":
            found = detect_from_candidates(case, view.prepared.candidates if view.prepared else [],
                                           settings=self.diagnoser.settings, model=None)
            return [call("submit", {"fault": found.fault})]
        ranked = view.ranked or ["frontend"]
        top = ranked[0]
        fault_type = view.best_fit(top) if self.use_sop else None
        if task == "localisation":
            return [call("submit", {"components": ranked[:3]})]
        if task == "analysis":
            guess = fault_type or (bundled_system().applicable_fault_types(top) or list(FAULT_TYPES))[0]
            return [call("submit", {"component": top, "level": answer_level(top), "fault_type": guess,
                                    "reason": f"{guess} on {top}"})]
        action = sop_action(top, self._mitigation(fault_type)) if fault_type else default_action(top)
        return [action, call("get_status"), call("submit", {})]

    def _mitigation(self, fault_type: str | None) -> str | None:
        docs = sop_documents(self.diagnoser.settings)
        return sop_section(docs[fault_type], "Mitigation") if fault_type in docs else None


class DiagnoserAgent(IndexAgent):
    """The product: ``diagnose --detect`` for detection, one full diagnosis per case otherwise.

    A case's diagnosis is computed once and shared by its tasks; every problem that uses it
    is charged its tokens (the cost of the answer), while the wall time is paid once.
    """

    def __init__(self, *, diagnoser: Diagnoser, views: dict[str, CaseView], mode: DiagnoseMode = "pipeline") -> None:
        super().__init__(diagnoser=diagnoser, use_sop=True, views=views)
        self.mode = mode  # diagnose --mode: the harness compares the three on the same problems

    def plan(self, case: Case, task: str) -> list[str]:
        d = self.diagnoser
        if task == "detection":
            found = detect_case(case, settings=d.settings, evidence=d.evidence, model=lambda: d.llm)
            self.usage = (self.usage[0] + found.prompt_tokens, self.usage[1] + found.completion_tokens)
            return [call("submit", {"fault": found.fault})]
        view = self.views.get(case.uuid)
        if view is None or view.record is None:
            try:
                diagnosed = d.diagnose(case, mode=self.mode)
            except LookupError:
                self.views[case.uuid] = CaseView(None)
                return [call("submit", {"components": ["frontend"]})] if task == "localisation" else \
                    super().plan(case, task)
            view = self.views[case.uuid] = CaseView(prepared=None, record=diagnosed)
        record = view.record
        assert record is not None
        self.usage = (self.usage[0] + record.usage.prompt_tokens, self.usage[1] + record.usage.completion_tokens)
        decision, answer = record.decision, record.final_answer()
        component = answer.component
        fault_type = decision.fault_type if decision else None
        ranked = [component] + [c.component for c in record.candidates if c.component != component]
        if task == "localisation":
            return [call("submit", {"components": ranked[:3]})]
        if task == "analysis":
            return [call("submit", {"component": component, "level": answer_level(component),
                                    "fault_type": fault_type or "cpu stress", "reason": answer.reason})]
        return [sop_action(component, self._mitigation(fault_type)), call("get_status"), call("submit", {})]


# Tool name and arguments as separate fields: an action written as one string (``submit({"fault": true})``)
# needs escaped quotes inside JSON, which a small model under a grammar cuts at the first quote.
REACT_SCHEMA = {
    "type": "object",
    "properties": {"thought": {"type": "string"}, "tool": {"type": "string"}, "args": {"type": "object"}},
    "required": ["thought", "tool", "args"],
    "additionalProperties": False,
}


class ReactAgent:
    """Reason + act with a model: one ``{"thought", "tool", "args"}`` JSON reply per step.

    The model sees the problem, the instructions and the tool docs (system message) and the
    last ``history`` exchanges, observations clipped, so the prompt stays inside a 4k context.
    """

    def __init__(self, *, llm: Callable[[], LLMBackend], history: int = 3, observation_chars: int = 1200,
                 max_tokens: int = 160) -> None:
        self._llm = llm
        self.history = history
        self.observation_chars = observation_chars
        self.max_tokens = max_tokens
        self.usage = (0, 0)
        self.system = ""
        self.turns: list[dict[str, str]] = []

    def init_context(self, problem_desc: str, instructions: str, apis: str) -> None:
        template = (TEMPLATES / "react_system.txt").read_text(encoding="utf-8")
        self.system = template.format(problem=problem_desc, instructions=instructions, tools=apis)
        self.turns = []

    async def get_action(self, state: str) -> str:
        if not self.turns:
            if not self.system:  # driven without init_context: the first state is the whole brief
                self.system = state
            self.turns.append({"role": "user", "content": "Begin: reply with your first action."})
        else:
            self.turns.append({"role": "user", "content": f"Observation:\n{state[: self.observation_chars]}"})
        keep = self.turns[-(2 * self.history + 1):]
        reply = self._llm().chat([{"role": "system", "content": self.system}, *keep], json_schema=REACT_SCHEMA,
                                 schema_name="step", temperature=0.0, max_tokens=self.max_tokens)
        self.usage = (self.usage[0] + reply.prompt_tokens, self.usage[1] + reply.completion_tokens)
        try:
            step = json.loads(reply.text)
            action = f"{step['tool']}({json.dumps(step['args'])})"  # the interface's action string
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise LLMError(f"react step reply is not the requested JSON ({exc}): {reply.text[:200]!r}") from exc
        self.turns.append({"role": "assistant", "content": reply.text})
        return action
