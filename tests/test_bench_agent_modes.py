"""The harness runs the product in each diagnose mode as its own agent, on the same problems."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bench.run import AGENTS, DEFAULT_AGENTS, AgentFactory, RunOptions
from diagnose.cases import Case
from rca.errors import InputError


class _Diagnoser:
    """Records the mode each diagnosis was asked in; fails the case so the agent falls back."""

    def __init__(self) -> None:
        self.modes: list[str] = []
        self.settings = None

    def diagnose(self, case, *, mode=None):
        self.modes.append(mode)
        raise LookupError("no candidates")


@pytest.mark.parametrize(("agent", "mode"), [("diagnoser", "pipeline"), ("diagnoser-react", "react"),
                                             ("diagnoser-team", "team")])
def test_each_diagnoser_agent_asks_for_its_mode(agent, mode):
    diagnoser = _Diagnoser()
    made = AgentFactory(diagnoser, seed=0).make(agent, repeat=0)  # type: ignore[arg-type]
    case = Case(uuid="u-1", description="", start=datetime(2025, 6, 5, 16, 10, tzinfo=UTC),
                end=datetime(2025, 6, 5, 16, 31, tzinfo=UTC))
    actions = made.plan(case, "localisation")
    assert diagnoser.modes == [mode]
    assert actions and "submit" in actions[0]


def test_agent_modes_are_valid_choices_but_not_in_the_default_run():
    assert {"diagnoser-react", "diagnoser-team"} <= set(AGENTS)
    assert not {"diagnoser-react", "diagnoser-team"} & set(DEFAULT_AGENTS)
    assert RunOptions(dataset=".", out=".").agents == list(DEFAULT_AGENTS)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="diagnoser-team"):
        RunOptions(dataset=".", out=".", agents=["diagnoser-solo"])  # type: ignore[arg-type]
