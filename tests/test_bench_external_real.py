"""Done-when of issue 26: an agent written outside the repository, with nothing but AIOpsLab's
contract, is evaluated by ``rca bench run --agent mod:Class`` on a REAL dataset (the vendored
Nezha slice, OnlineBoutique, imported with ``rca import nezha``) beside a built-in agent, and
the report shows both with their localisation scores.

The agent module lives in a temporary directory that is neither the repository nor a package of
it; it imports nothing from this project, and reaches the benchmark only through ``sys.path``
(what ``PYTHONPATH`` gives a shell user).
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from bench.store import ResultsStore, Row
from tests import nezha_fixtures
from tests.fakes import external_agent_package

REPO = Path(__file__).resolve().parents[1]
SPEC = "outside_agents.first_look:FirstLook"

# AIOpsLab's contract only: built from (problem_desc, instructions, apis), one async method.
# Two steps: ask for the candidates, then submit the first one (a guess when there is none).
AGENT_SOURCE = textwrap.dedent('''
    import re


    class FirstLook:
        def __init__(self, problem_desc, instructions, apis):
            self.problem_desc, self.instructions, self.apis = problem_desc, instructions, apis
            self.asked = False

        async def get_action(self, state):
            if not self.asked:
                self.asked = True
                return "get_candidates({})"
            found = re.search(r"\\[#1 (\\S+)", state)
            top = found.group(1) if found else "frontend"
            return 'submit({"components": ["%s"]})' % top
''')


@pytest.fixture()
def agent_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = external_agent_package(tmp_path / "elsewhere", package="outside_agents", module="first_look",
                                  source=AGENT_SOURCE)
    assert REPO not in home.parents
    monkeypatch.syspath_prepend(str(home))
    monkeypatch.setenv("PYTHONPATH", str(home))
    return home


@pytest.mark.slow
def test_an_external_agent_is_benchmarked_on_an_imported_nezha_dataset(agent_home: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    dataset = tmp_path / "nezha-ob"
    imported = runner.invoke(app, ["import", "nezha", str(nezha_fixtures.clone(tmp_path)), "--out", str(dataset),
                                   "--system", "onlineboutique"])
    assert imported.exit_code == 0, imported.output
    cases = json.loads((dataset / "input.json").read_text())
    assert len(cases) == 3  # the slice's three OnlineBoutique injections

    out = tmp_path / "bench"
    result = runner.invoke(app, ["bench", "run", "--dataset", str(dataset), "--out", str(out),
                                 "--tasks", "localisation", "--agents", "index-top1", "--agent", SPEC,
                                 "--max-steps", "2"])
    assert result.exit_code == 0, result.output

    with ResultsStore(out / "results.sqlite") as store:
        rows = list(store.rows())
    by_agent: dict[str, list[Row]] = {}
    for row in rows:
        by_agent.setdefault(row.agent, []).append(row)
    assert set(by_agent) == {"index-top1", SPEC}
    for agent, agent_rows in by_agent.items():
        assert {r.task for r in agent_rows} == {"localisation"}, agent
        assert {r.case_uuid for r in agent_rows} == {c["uuid"] for c in cases}, agent
    # the external agent got through its two steps: it asked, then submitted an answer
    assert all(r.outcome == "submitted" and r.steps == 2 for r in by_agent[SPEC]), \
        [(r.outcome, r.steps) for r in by_agent[SPEC]]

    # it read the real index's candidates: where index-top1 had an answer, its #1 is the agent's answer.
    # (The slice's first case, checkoutservice `return` at 05:09:50, has no candidates: no trace or log of
    # the slice falls in its window and the four pods' metrics do not deviate, so index-top1 ends it as
    # an agent_error while this agent submits its fallback.)
    top1 = {r.case_uuid: r.answer["components"][0] for r in by_agent["index-top1"] if r.outcome == "submitted"}
    assert top1, [(r.case_uuid, r.outcome, r.error) for r in by_agent["index-top1"]]
    assert all(r.answer["components"] == [top1[r.case_uuid]] for r in by_agent[SPEC] if r.case_uuid in top1)

    report = next(out.rglob("*.md")).read_text()
    assert "| agent | localisation |" in report and SPEC in result.output  # the CLI prints the report's head
    for agent, agent_rows in by_agent.items():
        mean = sum(r.correct for r in agent_rows) / len(agent_rows)
        cells = _row_cells(report, agent)
        assert cells, (agent, report)  # the accuracy table (| agent | localisation |) then the Localisation table
        assert cells[0].startswith(f"{mean:.2f} ") and f"(n={len(agent_rows)})" in cells[0], (agent, cells, mean)
    assert any(r.correct > 0 for r in by_agent[SPEC]), [(r.case_uuid, r.answer, r.details) for r in by_agent[SPEC]]


def _row_cells(report: str, agent: str) -> list[str]:
    """The cells after the agent's name in its first table row (the per-task accuracy table)."""
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == agent:
            return cells[1:]
    return []
