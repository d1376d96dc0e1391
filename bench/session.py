"""Sessions: the orchestrator loop between one agent and one problem's tools.

The agent gets the problem, the task's instructions and every tool's doc string as its
first state; each reply is parsed (``bench.interface.parse_action``) and run; the
observation is the next state. ``submit`` with a valid answer ends the session, and so
does the step limit. Every step is recorded: action, observation, tokens in/out (from the
agent's ``usage`` when it has one, as AIOpsLab agents may not) and wall seconds.
"""
from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from bench.interface import ActionSyntaxError, Agent, SessionTools, parse_action
from bench.problems import Problem
from bench.tasks import Evaluation, SubmissionError, Task
from rca.errors import RcaError

log = logging.getLogger(__name__)
OBSERVATION_RECORD_CHARS = 1500


@dataclass
class StepRecord:
    step: int
    action: str
    observation: str
    tokens_in: int
    tokens_out: int
    seconds: float


@dataclass
class SessionResult:
    problem_id: str
    task: str
    agent: str
    outcome: Literal["submitted", "step_limit", "agent_error"]
    answer: dict[str, Any] | None
    evaluation: Evaluation
    steps: list[StepRecord] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None

    @property
    def tokens_in(self) -> int:
        return sum(s.tokens_in for s in self.steps)

    @property
    def tokens_out(self) -> int:
        return sum(s.tokens_out for s in self.steps)

    def trajectory(self) -> list[dict[str, Any]]:
        return [asdict(s) for s in self.steps]


def _usage(agent: Agent) -> tuple[int, int]:
    usage = getattr(agent, "usage", None)
    if usage is None:
        return 0, 0
    return int(usage[0]), int(usage[1])


def first_state(problem: Problem, task: Task, tools: SessionTools) -> tuple[str, str, str]:
    """(problem description, instructions, tool docs) as AIOpsLab's ``init_context`` takes them."""
    instructions = (f"Task ({task.name}): {task.instructions}\n"
                    f"Act with one tool call per reply, e.g. get_candidates({{}}). Answer with: {task.submit_doc}")
    return problem.context, instructions, tools.describe()


def _steps_left_note(left: int) -> str:
    """What the agent is told of its budget after each observation: a session that ends at the
    step limit scores nothing, so the last step is named as the one to submit on."""
    if left == 1:
        return "\n\n[1 step left: submit your answer now]"
    return f"\n\n[{left} steps left]" if left > 1 else ""


async def run_session(problem: Problem, task: Task, agent: Agent, *, agent_name: str, tools: SessionTools,
                      max_steps: int, env: Any = None) -> SessionResult:
    """One problem, start to evaluation."""
    t0 = time.perf_counter()
    desc, instructions, apis = first_state(problem, task, tools)
    init = getattr(agent, "init_context", None)
    if callable(init):
        init(desc, instructions, apis)
    state = f"{desc}\n\n{instructions}\n\nTools:\n{apis}"
    steps: list[StepRecord] = []
    answer: dict[str, Any] | None = None
    outcome: Literal["submitted", "step_limit", "agent_error"] = "step_limit"
    error = None
    for number in range(1, max_steps + 1):
        before = _usage(agent)
        t_step = time.perf_counter()
        try:
            reply = await agent.get_action(state)
        except (RcaError, ValueError, LookupError, OSError) as exc:  # the agent broke; score what we have
            outcome, error = "agent_error", f"{type(exc).__name__}: {exc}"
            log.warning("%s on %s: %s", agent_name, problem.id, error)
            break
        try:
            action = parse_action(reply)
        except ActionSyntaxError as exc:
            observation = str(exc)
        else:
            if action.name == "submit":
                try:
                    answer = task.check_submission(action.args)
                except SubmissionError as exc:
                    observation = f"submit rejected: {exc}. Usage: {task.submit_doc}"
                else:
                    observation = "submitted"
                    outcome = "submitted"
            else:
                observation = tools.call(action.name, action.args)
        after = _usage(agent)
        steps.append(StepRecord(step=number, action=reply.strip()[:OBSERVATION_RECORD_CHARS],
                                observation=observation[:OBSERVATION_RECORD_CHARS],
                                tokens_in=after[0] - before[0], tokens_out=after[1] - before[1],
                                seconds=round(time.perf_counter() - t_step, 3)))
        if outcome == "submitted":
            break
        state = observation + _steps_left_note(max_steps - number)
    evaluation = task.evaluate(problem, answer, env=env)
    return SessionResult(problem_id=problem.id, task=task.name, agent=agent_name, outcome=outcome, answer=answer,
                         evaluation=evaluation, steps=steps, seconds=round(time.perf_counter() - t0, 3), error=error)
