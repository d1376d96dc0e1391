"""LLM quality evals: real faults replayed by the simulator, diagnosed by the real embedded
model, scored with the challenge rules against per-scenario thresholds.

Marked ``llm_eval`` and excluded from the default run (each scenario simulates, builds an
index and makes one model call: about a minute or two on 2 cores). Run them with

    .venv/bin/python -m pytest -m llm_eval tests/llm -q
    .venv/bin/python -m pytest -m llm_eval tests/llm -q -k node-disk-fill     # one scenario

A scenario is a TOML file in ``scenarios/``: the uuid of one real fault of
``data/reference/aiops2025/groundtruth.jsonl`` (its type, target, level and duration are
replayed), the simulation seed, the model and the thresholds its one case must reach.
"""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from bench.pipeline import run_full_path, simulate_problem_set
from bench.problems import hourly_schedule, read_jsonl
from rca.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "data" / "reference" / "aiops2025" / "groundtruth.jsonl"
SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.toml"))


def _scenario(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def test_scenarios_name_real_faults() -> None:
    # Not an eval: checks the fixtures themselves, so it runs in the default tier too.
    uuids = {row["uuid"] for row in read_jsonl(REFERENCE)}
    assert SCENARIOS
    for path in SCENARIOS:
        scenario = _scenario(path)
        assert scenario["truth_uuid"] in uuids, path
        assert 0 <= scenario["expect"]["la"] <= 1 and 0 <= scenario["expect"]["final"] <= 100, path


@pytest.mark.llm_eval
@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_meets_its_thresholds(path: Path, tmp_path: Path) -> None:
    scenario = _scenario(path)
    (row,) = [r for r in read_jsonl(REFERENCE) if r["uuid"] == scenario["truth_uuid"]]
    schedule = tmp_path / "schedule.jsonl"
    schedule.write_text("".join(json.dumps(r) + "\n" for r in hourly_schedule([row], day="2025-06-06")), encoding="utf-8")
    # The schedule replays a real fault; simulate_problem_set lays out a reference file itself only
    # for the all-types benchmark, so the simulator gets the one-row schedule directly.
    from simulate.simulator import SimulationOptions, simulate

    data = tmp_path / "data"
    simulate(SimulationOptions(out_dir=data, seed=scenario["seed"], scale="small", schedule=schedule))
    problem_set = simulate_problem_set(data, seed=scenario["seed"])  # reuses what was just written
    settings = load_settings(environ={}, overrides={
        "paths": {"runs_dir": tmp_path / "runs", "kb_dir": tmp_path / "kb"},
        # A shared 2-core machine can take minutes per call: quality, not speed, is measured here.
        "llm": {"backend": "embedded", "embedded_model": scenario["model"], "timeout_s": 1800},
    })
    result = run_full_path(settings, problem_set, index_dir=tmp_path / "index", result_file=tmp_path / "result.jsonl")
    score = result.report.overall
    print(f"\n{path.stem}: LA {score.la:.2f} TA {score.ta:.2f} Eff {score.efficiency:.2f} "
          f"Expl {score.explainability:.2f} final {score.final:.1f}")
    assert result.report.valid, result.report.errors
    assert score.la >= scenario["expect"]["la"], path.stem
    assert score.final >= scenario["expect"]["final"], path.stem
