"""The agent-cloud interface: action parsing, bad calls as observations, the step limit, records."""
import asyncio
from datetime import UTC, datetime

import pytest

from bench.interface import ActionSyntaxError, SessionTools, parse_action
from bench.problems import CaseTruth
from bench.session import run_session
from bench.tasks import task_named
from diagnose.cases import Case
from judge.groundtruth import TruthCase


class StubToolbox:
    """The observation Toolbox contract (names / describe / call), as diagnose.tools will offer it."""

    names = ["get_metrics", "get_candidates"]

    def __init__(self):
        self.calls = []

    def describe(self) -> str:
        return 'get_metrics({"component": "x"}) - metrics\nget_candidates({}) - ranked components'

    def call(self, name, args):
        self.calls.append((name, args))
        return f"{name} ok {sorted(args)}"


class Scripted:
    def __init__(self, replies, usage_per_step=(10, 2)):
        self.replies = list(replies)
        self.states = []
        self.usage = (0, 0)
        self.step_usage = usage_per_step
        self.context = None

    def init_context(self, problem_desc, instructions, apis):
        self.context = (problem_desc, instructions, apis)

    async def get_action(self, state):
        self.states.append(state)
        self.usage = (self.usage[0] + self.step_usage[0], self.usage[1] + self.step_usage[1])
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


def _problem(task="localisation"):
    start, end = datetime(2025, 6, 5, 17, 10, tzinfo=UTC), datetime(2025, 6, 5, 17, 20, tzinfo=UTC)
    case = Case(uuid="abc-1", description="A fault occurred.", start=start, end=end)
    truth = TruthCase(uuid="abc-1", fault_type="cpu stress", instance=["emailservice-1"], key_metrics=["pod_cpu_usage"])
    return task_named(task).problem(CaseTruth(case=case, fault=True, truth=truth))


def _run(agent, *, task="localisation", max_steps=6):
    problem = _problem(task)
    toolbox = StubToolbox()
    tools = SessionTools([toolbox], submit_doc=task_named(task).submit_doc)
    result = asyncio.run(run_session(problem, task_named(task), agent, agent_name="stub", tools=tools,
                                     max_steps=max_steps))
    return result, toolbox


@pytest.mark.parametrize("reply,name,args", [
    ('get_metrics({"component": "cartservice"})', "get_metrics", {"component": "cartservice"}),
    ("get_candidates()", "get_candidates", {}),
    ('```\nget_candidates({"top": 3})\n```', "get_candidates", {"top": 3}),
    ('```python\nsubmit({"fault": true})\n```', "submit", {"fault": True}),
    ('Thought: look first.\nAction: get_metrics({"component": "a"})', "get_metrics", {"component": "a"}),
])
def test_parse_action_forms(reply, name, args):
    action = parse_action(reply)
    assert (action.name, action.args) == (name, args)


@pytest.mark.parametrize("reply", ["I think it is cartservice", "get_metrics(component='x')", "get_metrics([1, 2])",
                                   "(oops)"])
def test_parse_action_rejects_with_the_expected_form(reply):
    with pytest.raises(ActionSyntaxError, match="tool_name"):
        parse_action(reply)


def test_malformed_and_unknown_calls_come_back_as_observations():
    agent = Scripted(["what now?", 'kubectl_get({"x": 1})', 'get_metrics({"component": "emailservice"})',
                      'submit({"components": "emailservice-1"})', 'submit({"components": ["emailservice-1", "frontend"]})'])
    result, toolbox = _run(agent)
    observations = [s.observation for s in result.steps]
    assert "tool_name" in observations[0]  # the syntax help
    assert "unknown tool 'kubectl_get'" in observations[1] and "get_metrics" in observations[1] and "submit" in observations[1]
    assert observations[2] == "get_metrics ok ['component']"
    assert observations[3].startswith("submit rejected") and "components" in observations[3]
    assert result.outcome == "submitted" and result.answer == {"components": ["emailservice-1", "frontend"]}
    assert result.evaluation.correct == 1.0 and result.evaluation.details["acc@3"] == 1.0
    assert toolbox.calls == [("get_metrics", {"component": "emailservice"})]
    # the agent saw the tool docs as context, and each step is recorded with its cost
    assert "get_metrics" in agent.context[2] and "submit(" in agent.context[2]
    assert [s.tokens_in for s in result.steps] == [10] * 5 and result.tokens_out == 10
    assert all(s.seconds >= 0 for s in result.steps)


def test_step_limit_ends_a_session_without_an_answer():
    agent = Scripted(['get_candidates({})'])
    result, toolbox = _run(agent, max_steps=4)
    assert result.outcome == "step_limit" and len(result.steps) == 4 and result.answer is None
    assert result.evaluation.correct == 0.0 and len(toolbox.calls) == 4
    # every observation tells the budget, and the last step is named as the one to submit on
    assert agent.states[1].endswith("[3 steps left]") and agent.states[2].endswith("[2 steps left]")
    assert agent.states[3].endswith("[1 step left: submit your answer now]")


def test_a_broken_agent_is_recorded_not_raised():
    class Broken:
        async def get_action(self, state):
            raise ValueError("model returned nonsense")

    result, _ = _run(Broken())
    assert result.outcome == "agent_error" and "nonsense" in result.error and result.evaluation.correct == 0.0


def test_react_agent_submits_arguments_with_quotes_through_separate_fields():
    """The model gives tool and args as fields; the agent writes the interface's action string,
    so a submission with quoted strings reaches the task intact (a one-string action was cut at
    the first inner quote by the grammar-constrained decoder)."""
    import json

    from bench.agents import REACT_SCHEMA, ReactAgent
    from tests.fakes import RecordedBackend

    backend = RecordedBackend([
        json.dumps({"thought": "look", "tool": "get_candidates", "args": {}}),
        json.dumps({"thought": "done", "tool": "submit", "args": {"components": ["emailservice-1", "emailservice"]}}),
    ])
    agent = ReactAgent(llm=lambda: backend)
    result, toolbox = _run(agent, max_steps=4)
    assert result.outcome == "submitted" and result.evaluation.correct == 1.0
    assert toolbox.calls == [("get_candidates", {})]
    assert backend.requests[0]["json_schema"] == REACT_SCHEMA
    assert result.steps[1].action == 'submit({"components": ["emailservice-1", "emailservice"]})'
