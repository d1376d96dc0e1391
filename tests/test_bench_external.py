"""``rca bench run --agent package.module:Class``: an AIOpsLab-contract agent written outside the
repository is evaluated unchanged, beside the built-in agents, and reported beside them."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from bench.external import AgentSpecError, load_agent_class
from bench.store import ResultsStore
from tests.fakes import external_agent_package

# An AIOpsLab agent: built from the problem, the instructions and the API list; one async method.
AGENT_SOURCE = textwrap.dedent('''
    class LookThenAnswer:
        def __init__(self, problem_desc, instructions, apis):
            assert "get_candidates" in apis and problem_desc.startswith("Incident ")
            self.task = instructions.split("(", 1)[1].split(")", 1)[0]
            self.seen = None

        async def get_action(self, state):
            if self.seen is None:
                self.seen = state
                return "get_candidates({})"
            top = state.split("[#1 ", 1)[1].split(" ", 1)[0] if "[#1 " in state else "frontend"
            if self.task == "detection":
                return 'submit({"fault": true})'
            if self.task == "localisation":
                return 'submit({"components": ["%s"]})' % top
            if self.task == "analysis":
                return ('submit({"component": "%s", "level": "service", "fault_type": "cpu stress", '
                        '"reason": "cpu stress"})' % top)
            return "submit({})"
''')


@pytest.fixture()
def agent_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = external_agent_package(tmp_path / "elsewhere", package="my_agents", module="sre", source=AGENT_SOURCE)
    monkeypatch.syspath_prepend(str(home))
    return home


def test_a_bad_spec_fails_before_any_session(agent_package: Path) -> None:
    with pytest.raises(AgentSpecError, match="no class"):
        load_agent_class("my_agents.sre:Missing")
    with pytest.raises(AgentSpecError, match="cannot import"):
        load_agent_class("no_such_package.x:Agent")
    assert load_agent_class(f"{agent_package / 'my_agents' / 'sre.py'}:LookThenAnswer").__name__ == "LookThenAnswer"


def test_an_external_agent_runs_beside_the_baselines(agent_package: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    spec = "my_agents.sre:LookThenAnswer"
    result = CliRunner().invoke(app, ["bench", "run", "--quick", "--out", str(out), "--agents", "index-top1",
                                      "--agent", spec, "--tasks", "detection,localisation,analysis"])
    assert result.exit_code == 0, result.output
    with ResultsStore(out / "results.sqlite") as store:
        rows = [r for r in store.rows() if r.agent == spec]
    assert {r.task for r in rows} == {"detection", "localisation", "analysis"}
    assert all(r.outcome == "submitted" for r in rows)
    assert any(r.correct > 0 for r in rows if r.task == "localisation")
    report = next(out.rglob("*.md")).read_text()
    assert spec in report and "index-top1" in report
