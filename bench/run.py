"""``rca bench run``: every (problem, agent, repeat) session, stored as it finishes.

The dataset is preprocessed into ``<out>/index`` (incremental), every session goes to
``<out>/results.sqlite`` the moment it ends, and a rerun skips what is stored: a killed
run resumes. ``quick_dataset`` simulates the small problem set of ``--quick``.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench.agents import CaseView, ChanceAgent, DiagnoserAgent, IndexAgent, ReactAgent
from bench.cloud import SimCloud
from bench.external import ExternalAgent, is_external, load_agent_class
from bench.interface import Agent, CloudTools, SessionTools, Toolbox
from bench.observe import SopSections, case_tools
from bench.problems import CaseTruth, Problem, ProblemSet, load_dataset
from bench.session import SessionResult, run_session
from bench.store import ResultsStore
from bench.tasks import TASKS, build_problems, task_named
from diagnose.cases import Case
from diagnose.service import Diagnoser
from rca.errors import InputError
from rca.settings import Settings

log = logging.getLogger(__name__)
# diagnoser-react / diagnoser-team: the product in its agent modes (diagnose --mode react|team).
AGENTS: tuple[str, ...] = ("chance", "index-top1", "index-sop", "diagnoser", "react", "diagnoser-react", "diagnoser-team")
DEFAULT_AGENTS: tuple[str, ...] = ("chance", "index-top1", "index-sop", "diagnoser", "react")
MODEL_AGENTS = frozenset({"diagnoser", "react", "diagnoser-react", "diagnoser-team"})
RESULTS_FILE = "results.sqlite"
# 6 steps: a small model spends one or two on malformed calls before it looks and submits.
QUICK = {"cases": 2, "no_fault_windows": 1, "seed": 7, "max_steps": 6}


@dataclass(frozen=True)
class RunOptions:
    dataset: Path
    out: Path
    tasks: list[str] = field(default_factory=lambda: list(TASKS))
    agents: list[str] = field(default_factory=lambda: list(DEFAULT_AGENTS))
    max_steps: int = 8
    repeat: int = 1
    seed: int = 0
    judge_trajectories: bool = False

    def __post_init__(self) -> None:
        unknown = [a for a in self.agents if a not in AGENTS and not is_external(a)]
        if unknown:
            raise InputError(f"--agents: unknown {', '.join(unknown)}; valid: {', '.join(AGENTS)} "
                             f"or an external package.module:Class (--agent)")
        for spec in self.agents:
            if is_external(spec):
                load_agent_class(spec)  # fails before any session runs
        bad = [t for t in self.tasks if t not in TASKS]
        if bad:
            raise InputError(f"--tasks: unknown {', '.join(bad)}; valid: {', '.join(TASKS)}")
        if self.max_steps < 1 or self.repeat < 1:
            raise InputError("--max-steps and --repeat must be at least 1")


def quick_dataset(out_dir: Path) -> Path:
    """The ``--quick`` problem set: a few simulated faults plus quiet windows (reused if present)."""
    from simulate.simulator import SimulationOptions, simulate

    data_dir = out_dir / "dataset"
    if not (data_dir / "groundtruth.jsonl").exists():
        simulate(SimulationOptions(out_dir=data_dir, cases=QUICK["cases"], seed=QUICK["seed"],
                                   no_fault_windows=QUICK["no_fault_windows"]))
    return data_dir


def observation_toolbox(diagnoser: Diagnoser, case: Case) -> list[Toolbox]:
    """The observation tools of a session: issue 14's toolbox and ``get_sop``."""
    return [case_tools(diagnoser, case), SopSections(diagnoser.settings)]


class AgentFactory:
    """Builds a fresh agent per session; model-free agents share one index view per case."""

    def __init__(self, diagnoser: Diagnoser, *, seed: int) -> None:
        self.diagnoser = diagnoser
        self.seed = seed
        self.index_views: dict[str, CaseView] = {}
        self.diagnoses: dict[str, dict[str, CaseView]] = {"pipeline": {}, "react": {}, "team": {}}

    def make(self, name: str, *, repeat: int) -> Agent:
        d = self.diagnoser
        if is_external(name):
            return ExternalAgent(load_agent_class(name))
        if name == "chance":
            return ChanceAgent(seed=self.seed * 1000 + repeat)
        if name == "index-top1":
            return IndexAgent(diagnoser=d, use_sop=False, views=self.index_views)
        if name == "index-sop":
            return IndexAgent(diagnoser=d, use_sop=True, views=self.index_views)
        if name == "diagnoser":
            return DiagnoserAgent(diagnoser=d, views=self.diagnoses["pipeline"])
        if name == "diagnoser-react":
            return DiagnoserAgent(diagnoser=d, views=self.diagnoses["react"], mode="react")
        if name == "diagnoser-team":
            return DiagnoserAgent(diagnoser=d, views=self.diagnoses["team"], mode="team")
        if name == "react":
            return ReactAgent(llm=lambda: d.llm)
        raise InputError(f"unknown agent {name!r}; valid: {', '.join(AGENTS)}")


def prepare_index(settings: Settings, *, dataset: Path, out: Path) -> Settings:
    """Preprocess the dataset into ``<out>/index`` (incremental) and point the settings at it
    (and at ``<out>/kb``, ``<out>/runs``, the dataset's raw telemetry and its ``input.json``, whose
    windows the index leaves out of each other's baselines, as the diagnoser does)."""
    from index.build import run_nightly
    from rca.system import system_from_settings

    index_dir = out / "index"
    outcomes = run_nightly(data_dir=dataset, index_dir=index_dir, naming=system_from_settings(settings).trace,
                           workers=settings.preprocess.workers)
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        raise InputError(f"preprocessing {dataset} failed for {', '.join(f'{o.day}/{o.family}' for o in failed)}")
    return settings.model_copy(update={"paths": settings.paths.model_copy(update={
        "index_dir": index_dir, "runs_dir": out / "runs", "data_dir": dataset,
        "input_file": ProblemSet(dataset).input_file,
        # The benchmark's own knowledge store: the shared user cache is rewritten by every
        # checkout whose SOPs differ, and a run must not read it half-rebuilt.
        "kb_dir": out / "kb"})})


def session_tools(problem: Problem, diagnoser: Diagnoser, *, seed: int) -> tuple[SessionTools, SimCloud | None]:
    task = task_named(problem.task)
    parts: list[Toolbox] = observation_toolbox(diagnoser, problem.case)
    env = None
    if task.needs_cloud:
        env = SimCloud(record=problem.solution.record, seed=seed)
        parts.append(CloudTools(env))
    return SessionTools(parts, submit_doc=task.submit_doc), env


def run_benchmark(settings: Settings, options: RunOptions, *, show_progress: bool = True,
                  on_result: Callable[[SessionResult], None] | None = None) -> Path:
    """Run what is not stored yet; returns the results file."""
    truths = load_dataset(options.dataset)
    problems = build_problems(truths, tasks=options.tasks)
    by_uuid: dict[str, CaseTruth] = {t.case.uuid: t for t in truths}
    settings = prepare_index(settings, dataset=options.dataset, out=options.out)
    store_path = options.out / RESULTS_FILE
    plan = [(r, a, p) for r in range(options.repeat) for a in options.agents for p in problems]
    judge = None
    with Diagnoser.from_settings(settings) as diagnoser, ResultsStore(store_path) as store:
        if options.judge_trajectories:
            from bench.trajectory_judge import TrajectoryJudge

            judge = TrajectoryJudge(llm=lambda: diagnoser.llm)
        factory = AgentFactory(diagnoser, seed=options.seed)
        todo = [(r, a, p) for r, a, p in plan if not store.done(problem_id=p.id, agent=a, repeat=r)]
        log.info("%d problem(s) x %d agent(s) x %d repeat(s): %d session(s), %d already stored",
                 len(problems), len(options.agents), options.repeat, len(plan), len(plan) - len(todo))
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, disable=not show_progress, transient=False) as progress:
            bar = progress.add_task("sessions", total=len(todo))
            for repeat, agent_name, problem in todo:
                progress.update(bar, description=f"{agent_name} {problem.id}")
                tools, env = session_tools(problem, diagnoser, seed=options.seed + repeat)
                agent = factory.make(agent_name, repeat=repeat)
                result = asyncio.run(run_session(problem, task_named(problem.task), agent, agent_name=agent_name,
                                                 tools=tools, max_steps=options.max_steps, env=env))
                truth = by_uuid[problem.case.uuid]
                judge_score = judge.score(problem, result) if judge is not None else None
                store.add(result, repeat=repeat, case_uuid=problem.case.uuid, fault_type=truth.fault_type,
                          level=truth.level, judge_score=judge_score)
                if on_result is not None:
                    on_result(result)
                progress.advance(bar)
    return store_path
