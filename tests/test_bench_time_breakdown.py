"""scripts/bench_diagnose.py time_breakdown: where a batch's seconds go, and the 400-case projection."""
from __future__ import annotations

import pytest

from diagnose.record import RunRecord
from tests.script_modules import load_script


def _record(uuid: str, total_s: float) -> RunRecord:
    return RunRecord(uuid=uuid, window={"start": "", "end": ""}, timings_s={"total_s": total_s, "prepare_wait_s": 0.0})


@pytest.mark.parametrize("cases", [2, 36, 400])
def test_one_time_costs_are_paid_once_in_the_projection(cases: int) -> None:
    # A model load of 7 s, an uncached first case of 47 s, then 7.5 s a case (preparation overlapped).
    cold, first, steady = 7.0, 47.0, 7.5
    records = [_record("c0", first), *(_record(f"c{i}", steady) for i in range(1, cases))]
    figures = load_script("bench_diagnose").time_breakdown(records, diagnose_wall_s=cold + first + steady * (cases - 1))

    assert figures["cold_start_s"] == pytest.approx(cold)
    assert figures["first_case_s"] == pytest.approx(first)
    assert figures["median_case_s"] == pytest.approx(steady)
    # Whatever the batch's size, a 400-case phase is one first case and 399 others; the model
    # load is spread over those (over-counted by at most one load a batch's size).
    spread = steady + cold / (cases - 1)
    assert figures["steady_s_per_case"] == pytest.approx(spread, abs=0.005)
    assert figures["projected_400_cases_min"] == pytest.approx((first + 399 * spread) / 60, abs=0.05)
    wall = cold + first + steady * (cases - 1)
    if cases < 400:  # spreading the first case over the batch (the old projection) charged it 400 / cases times
        assert figures["projected_400_cases_min"] < (cold + 400 * wall / cases) / 60


def test_waits_between_cases_count_in_the_steady_seconds() -> None:
    # 10 cases of 7 s each, but the batch's wall holds 1 s more a case (answer writing, waits):
    # the projection carries that second (and the 5 s load), the median does not.
    records = [_record(f"c{i}", 7.0) for i in range(10)]
    figures = load_script("bench_diagnose").time_breakdown(records, diagnose_wall_s=5.0 + 8.0 * 10)
    assert figures["median_case_s"] == pytest.approx(7.0)
    assert figures["steady_s_per_case"] == pytest.approx((5.0 + 8.0 * 10 - 7.0) / 9, abs=0.005)


def test_a_failed_first_case_is_still_the_one_paid_once() -> None:
    # The model load's victim failed (a timeout after 47 s); 35 cases of 7.5 s followed.
    failed = RunRecord(uuid="c0", window={"start": "", "end": ""}, status="failed",
                       timings_s={"total_s": 47.0, "prepare_wait_s": 0.0})
    records = [failed, *(_record(f"c{i}", 7.5) for i in range(1, 36))]
    figures = load_script("bench_diagnose").time_breakdown(records, diagnose_wall_s=7.0 + 47.0 + 7.5 * 35)
    assert figures["steady_s_per_case"] == pytest.approx(7.5 + 7.0 / 35, abs=0.005)
    assert figures["projected_400_cases_min"] == pytest.approx((47.0 + 399 * (7.5 + 7.0 / 35)) / 60, abs=0.05)


def test_one_case_gives_no_projection() -> None:
    figures = load_script("bench_diagnose").time_breakdown([_record("c0", 47.0)], diagnose_wall_s=54.0)
    assert figures["first_case_s"] == pytest.approx(47.0)
    assert "projected_400_cases_min" not in figures and "steady_s_per_case" not in figures
