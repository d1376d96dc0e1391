"""The results store: repeats average, intervals are seeded, finished sessions are skipped."""
from bench.session import SessionResult, StepRecord
from bench.store import ResultsStore, bootstrap
from bench.summary import build_report
from bench.tasks import Evaluation


def _result(problem, agent, correct, task="localisation", details=None, tokens=(100, 10)):
    return SessionResult(problem_id=problem, task=task, agent=agent, outcome="submitted", answer={"components": ["x"]},
                         evaluation=Evaluation(correct=correct, details=details or {"acc@1": correct, "acc@3": 1.0}),
                         steps=[StepRecord(1, "submit(...)", "submitted", tokens[0], tokens[1], 0.5)], seconds=0.5)


def test_repeats_average_and_resume(tmp_path):
    path = tmp_path / "results.sqlite"
    with ResultsStore(path) as store:
        for repeat, correct in enumerate([1.0, 0.0, 1.0, 1.0]):
            store.add(_result("p1-localisation", "react", correct), repeat=repeat, case_uuid="p1",
                      fault_type="cpu stress", level="pod")
        store.add(_result("p2-localisation", "react", 0.0), repeat=0, case_uuid="p2", fault_type="jvm gc", level="pod")
    with ResultsStore(path) as store:  # reopened: what was stored stays stored
        assert store.done(problem_id="p1-localisation", agent="react", repeat=3)
        assert not store.done(problem_id="p1-localisation", agent="react", repeat=4)
        [cell] = store.summary()
    assert cell.n == 5 and abs(cell.mean - 0.6) < 1e-9
    assert 0.0 <= cell.low <= cell.mean <= cell.high <= 1.0
    assert cell.tokens_in == 100 and cell.steps == 1


def test_bootstrap_interval_is_seeded_and_narrows_with_data():
    few = bootstrap([1, 0, 1, 0])
    many = bootstrap([1, 0] * 50)
    assert few == bootstrap([1, 0, 1, 0])
    assert (many[1] - many[0]) < (few[1] - few[0])
    assert bootstrap([1.0] * 10) == (1.0, 1.0)


def test_report_shows_false_positive_rate(tmp_path):
    with ResultsStore(tmp_path / "results.sqlite") as store:
        for i, (truth, answer) in enumerate([(True, True), (True, False), (False, True), (False, False), (False, False)]):
            r = _result(f"c{i}-detection", "index-top1", float(truth == answer), task="detection",
                        details={"truth": truth, "answer": answer})
            store.add(r, repeat=0, case_uuid=f"c{i}", fault_type="cpu stress" if truth else "no fault",
                      level="pod" if truth else "none")
        rows = store.rows()
    report = build_report(rows, tmp_path / "report")
    detection = next(t for t in report.tables if t.title == "Detection")
    assert detection.rows == [["index-top1", "0.60", "0.50", "0.33", "2", "3"]]
    assert all(path.is_file() for _, path in report.images)
