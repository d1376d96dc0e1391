"""The task levels: what a problem asks, what ``submit`` must carry, and how it is scored.

A task is one small class: ``name``, the ``instructions`` shown to the agent, the
``submit_doc`` of its answer, ``applies`` (which cases make a problem of it),
``check_submission`` (a malformed answer is an observation, not a score) and ``evaluate``.
Register it with ``@register``; the registry drives ``rca bench problems`` and ``run``.
Mitigation also opens a simulated cloud (``needs_cloud``), whose actions become tools.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from bench.problems import ANSWER_LEVELS, CaseTruth, Problem, answer_level
from judge.challenge import score_cases
from judge.validation import Answer as JudgeAnswer
from rca.challenge import RuleVersion
from rca.errors import InputError
from rca.taxonomy import FAULT_TYPES, canonical_fault_type


class SubmissionError(InputError):
    """A ``submit`` whose arguments do not fit the task; the message says what it needs."""


@dataclass(frozen=True)
class Evaluation:
    """One scored session: ``correct`` in [0, 1] is the task's headline; ``details`` the rest."""

    correct: float
    details: dict[str, Any] = field(default_factory=dict)


class Task(ABC):
    name: ClassVar[str]
    instructions: ClassVar[str]
    submit_doc: ClassVar[str]
    needs_cloud: ClassVar[bool] = False

    @abstractmethod
    def applies(self, truth: CaseTruth) -> bool: ...

    @abstractmethod
    def check_submission(self, args: dict[str, Any]) -> dict[str, Any]:
        """The normalised answer, or ``SubmissionError``."""

    @abstractmethod
    def evaluate(self, problem: Problem, answer: dict[str, Any] | None, *, env: Any = None) -> Evaluation:
        """Score an answer (``None``: the session ended without one)."""

    def problem(self, truth: CaseTruth) -> Problem:
        context = (f"Incident {truth.case.uuid}: {truth.case.description}\n"
                   f"Window (UTC): {truth.case.start:%Y-%m-%dT%H:%M:%SZ} to {truth.case.end:%Y-%m-%dT%H:%M:%SZ}.")
        return Problem(id=f"{truth.case.uuid}-{self.name}", task=self.name, case=truth.case, context=context,
                       solution=truth)


TASKS: dict[str, Task] = {}


def register(cls: type[Task]) -> type[Task]:
    TASKS[cls.name] = cls()
    return cls


def task_named(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise SubmissionError(f"unknown task {name!r}; valid: {', '.join(TASKS)}") from None


def _text(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        raise SubmissionError(f'submit needs "{key}" as a non-empty string')
    return value.strip()


@register
class Detection(Task):
    name = "detection"
    instructions = ("Decide whether this window holds a fault. Some windows are quiet: benign blips "
                    "(a short latency or CPU bump) are not faults.")
    submit_doc = 'submit({"fault": true|false}) - true if a fault is present in the window.'

    def applies(self, truth: CaseTruth) -> bool:
        return True

    def problem(self, truth: CaseTruth) -> Problem:
        # Neutral wording: the case's own description says "a fault occurred" even for a quiet window.
        case = truth.case
        context = (f"Incident {case.uuid}: an alert asks whether anything is wrong in this window.\n"
                   f"Window (UTC): {case.start:%Y-%m-%dT%H:%M:%SZ} to {case.end:%Y-%m-%dT%H:%M:%SZ}.")
        return Problem(id=f"{case.uuid}-{self.name}", task=self.name, case=case, context=context, solution=truth)

    def check_submission(self, args: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(args.get("fault"), bool):
            raise SubmissionError('submit needs "fault": true or false')
        return {"fault": args["fault"]}

    def evaluate(self, problem: Problem, answer: dict[str, Any] | None, *, env: Any = None) -> Evaluation:
        said = None if answer is None else bool(answer["fault"])
        truth = problem.solution.fault
        return Evaluation(correct=float(said == truth), details={"truth": truth, "answer": said})


@register
class Localisation(Task):
    name = "localisation"
    instructions = ("Localise the faulty component: a ranked list of up to 3 components (service, pod "
                    "such as cartservice-1, node such as aiops-k8s-03, or TiDB component), most likely first.")
    submit_doc = 'submit({"components": ["first", "second", "third"]}) - ranked, most likely first.'

    def applies(self, truth: CaseTruth) -> bool:
        return truth.fault

    def check_submission(self, args: dict[str, Any]) -> dict[str, Any]:
        ranked = args.get("components")
        if not isinstance(ranked, list) or not ranked or not all(isinstance(c, str) and c for c in ranked):
            raise SubmissionError('submit needs "components": a non-empty list of component names')
        return {"components": list(dict.fromkeys(c.strip() for c in ranked))[:3]}

    def evaluate(self, problem: Problem, answer: dict[str, Any] | None, *, env: Any = None) -> Evaluation:
        assert problem.solution.truth is not None
        right = set(problem.solution.truth.instance)
        ranked = [] if answer is None else answer["components"]
        hit = next((k for k, c in enumerate(ranked) if c in right), None)
        return Evaluation(correct=float(hit == 0), details={
            "acc@1": float(hit == 0), "acc@3": float(hit is not None and hit < 3), "answer": ranked,
            "truth": sorted(right)})


@register
class Analysis(Task):
    name = "analysis"
    instructions = ("Analyse the root cause: the faulty component, its level (service, pod, node or tidb) "
                    "and the fault type, one of: " + ", ".join(FAULT_TYPES) + ". Add a short reason "
                    "(fault type and key metrics first), as in the challenge's answer format.")
    submit_doc = ('submit({"component": "...", "level": "service|pod|node|tidb", "fault_type": "...", '
                  '"reason": "..."})')

    def __init__(self, rules: RuleVersion | None = None) -> None:
        from rca.challenge import rule_version

        self.rules = rules or rule_version("early")

    def applies(self, truth: CaseTruth) -> bool:
        return truth.fault

    def check_submission(self, args: dict[str, Any]) -> dict[str, Any]:
        component = _text(args, "component")
        level = _text(args, "level").lower()
        if level not in ANSWER_LEVELS:
            raise SubmissionError(f'"level" must be one of {", ".join(ANSWER_LEVELS)}')
        fault_type = canonical_fault_type(_text(args, "fault_type"))
        if fault_type not in FAULT_TYPES:
            raise SubmissionError(f'"fault_type" must be one of: {", ".join(FAULT_TYPES)}')
        reason = args.get("reason") if isinstance(args.get("reason"), str) else ""
        return {"component": component, "level": level, "fault_type": fault_type, "reason": reason or fault_type}

    def evaluate(self, problem: Problem, answer: dict[str, Any] | None, *, env: Any = None) -> Evaluation:
        truth = problem.solution.truth
        assert truth is not None
        if answer is None:
            return Evaluation(correct=0.0, details={"component": 0.0, "level": 0.0, "fault_type": 0.0,
                                                   "reason_keyword": 0.0, "truth_fault_type": truth.fault_type})
        # The challenge's own scorer: component (LA) and the reason's keywords (TA, keyword step).
        judged = score_cases([truth], {truth.uuid: JudgeAnswer(uuid=truth.uuid, component=answer["component"],
                                                               reason=answer["reason"], steps=())},
                             rules=self.rules, embedder=None, semantic_threshold=1.0)[0]
        parts = {
            "component": float(judged.component_right),
            "level": float(answer["level"] == answer_level(truth.instance[0])),
            "fault_type": float(answer["fault_type"] == truth.fault_type),
            "reason_keyword": float(judged.reason_keyword_right),
        }
        correct = float(parts["component"] == parts["level"] == parts["fault_type"] == 1.0)
        return Evaluation(correct=correct, details=parts | {"answer_fault_type": answer["fault_type"],
                                                            "truth_fault_type": truth.fault_type,
                                                            "score": sum(parts.values()) / len(parts)})


@register
class Mitigation(Task):
    name = "mitigation"
    needs_cloud = True
    instructions = ("Mitigate the incident on the live (simulated) cluster: find the cause, act on it, "
                    "check get_status, and submit when the system is healthy. Each action takes a minute; "
                    "a wrong action can make things worse (restarting a healthy pod drops its requests). "
                    "Success means the WHOLE system is healthy after a settle window.")
    submit_doc = 'submit({}) - you believe the system is healthy; the cluster then settles and is checked.'

    def applies(self, truth: CaseTruth) -> bool:
        return truth.fault

    def check_submission(self, args: dict[str, Any]) -> dict[str, Any]:
        return {}

    def evaluate(self, problem: Problem, answer: dict[str, Any] | None, *, env: Any = None) -> Evaluation:
        from bench.cloud import SimCloud

        assert isinstance(env, SimCloud)
        minutes = (env.now - env.injected.start).total_seconds() / 60
        health = env.settle()
        return Evaluation(correct=float(health.healthy), details={
            "healthy": health.healthy, "minutes_to_mitigate": round(minutes, 1) if health.healthy else None,
            "unhealthy": (health.edges + health.entities)[:10], "actions": env.events, "submitted": answer is not None})


def build_problems(truths: list[CaseTruth], *, tasks: list[str]) -> list[Problem]:
    """Every (case, task) pair that applies, in case order then task order."""
    chosen = [task_named(t) for t in tasks]
    return [task.problem(truth) for truth in truths for task in chosen if task.applies(truth)]
