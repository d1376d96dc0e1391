"""Problems from a simulated dataset, and the no-model baselines where they should land.

One small simulated dataset (3 faults + 2 quiet windows) is preprocessed once for the module.
"""
import pytest

from bench.problems import load_dataset
from bench.run import RunOptions, run_benchmark
from bench.store import ResultsStore
from bench.summary import build_report
from bench.tasks import TASKS, build_problems
from rca.settings import Settings
from simulate.simulator import SimulationOptions, simulate


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "data"
    simulate(SimulationOptions(out_dir=out, cases=3, seed=3, no_fault_windows=2))
    return out


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    base = Settings()
    kb = tmp_path_factory.mktemp("kb")
    return base.model_copy(update={"paths": base.paths.model_copy(update={"kb_dir": kb})})


def test_problems_have_stable_ids_and_no_fault_windows(dataset):
    truths = load_dataset(dataset)
    problems = build_problems(truths, tasks=list(TASKS))
    again = build_problems(load_dataset(dataset), tasks=list(TASKS))
    assert [p.id for p in problems] == [p.id for p in again]
    assert all(p.id == f"{p.case.uuid}-{p.task}" for p in problems)
    assert len({p.id for p in problems}) == len(problems)
    quiet = [t for t in truths if not t.fault]
    assert len(quiet) == 2 and len(truths) == 5
    detection = [p for p in problems if p.task == "detection"]
    assert len(detection) == 5 and sum(not p.solution.fault for p in detection) == 2
    for task in ("localisation", "analysis", "mitigation"):
        assert len([p for p in problems if p.task == task]) == 3  # fault cases only
    # quiet windows overlap no fault
    faults = [t for t in truths if t.fault]
    for q in quiet:
        assert all(q.case.end < f.case.start or q.case.start > f.case.end for f in faults)


def test_chance_near_floor_and_index_well_above(dataset, settings, tmp_path):
    out = tmp_path / "results"
    run_benchmark(settings, RunOptions(dataset=dataset, out=out, agents=["index-top1", "index-sop"], max_steps=4),
                  show_progress=False)
    run_benchmark(settings, RunOptions(dataset=dataset, out=out, agents=["chance"], repeat=20,
                                       tasks=["localisation", "analysis", "mitigation"]), show_progress=False)
    with ResultsStore(out / "results.sqlite") as store:
        cells = {(c.task, c.agent): c for c in store.summary()}
        rows = store.rows()
    assert cells[("localisation", "chance")].n == 60
    assert cells[("localisation", "chance")].mean <= 0.1  # floor: 1 / 53 components
    assert cells[("analysis", "chance")].mean <= 0.05
    assert cells[("localisation", "index-top1")].mean >= 0.66
    assert cells[("analysis", "index-sop")].mean >= cells[("analysis", "index-top1")].mean
    assert cells[("mitigation", "index-sop")].mean >= 0.66 > cells[("mitigation", "chance")].mean
    # detection includes the quiet windows, and the report computes the false-positive rate
    detection = [r for r in rows if r.task == "detection" and r.agent == "index-top1"]
    assert sum(r.details["truth"] is False for r in detection) == 2
    report = build_report(rows, tmp_path / "report")
    table = next(t for t in report.tables if t.title == "Detection")
    assert table.header[3] == "FPR" and all(row[3] != "-" for row in table.rows)
    # rerun: everything is stored, nothing runs again
    before = len(rows)
    run_benchmark(settings, RunOptions(dataset=dataset, out=out, agents=["index-top1"], max_steps=4), show_progress=False)
    with ResultsStore(out / "results.sqlite") as store:
        assert len(store.rows()) == before
