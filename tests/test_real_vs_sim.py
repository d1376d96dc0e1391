"""scripts/real_vs_sim.py: its statistics on synthetic frames with known answers."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from preprocess.schema import SPAN_SCHEMA
from tests.script_modules import load_script

T0 = datetime(2025, 6, 6, 1, 0, tzinfo=UTC)
rvs = load_script("real_vs_sim")


def _minutes(values: list[float], *, start: datetime = T0) -> pl.DataFrame:
    times = [start + timedelta(minutes=i) for i in range(len(values))]
    return pl.DataFrame({"time": times, "value": values}, schema={"time": pl.Datetime("us", "UTC"), "value": pl.Float64})


def test_effect_ratio_is_window_median_over_baseline_median() -> None:
    series = _minutes([10.0] * 30 + [40.0] * 5 + [10.0] * 5)
    start, end = T0 + timedelta(minutes=30), T0 + timedelta(minutes=34, seconds=30)
    assert rvs.effect_ratio(series, start=start, end=end) == pytest.approx(4.0)


def test_effect_ratio_leaves_other_windows_out_of_the_baseline() -> None:
    # minutes 10-19 belong to an earlier fault at 100; without exclusion the median would still be 10,
    # so make the earlier fault cover most of the baseline: minutes 5-24 at 100.
    series = _minutes([10.0] * 5 + [100.0] * 20 + [10.0] * 5 + [30.0] * 3)
    start, end = T0 + timedelta(minutes=30), T0 + timedelta(minutes=32)
    assert rvs.effect_ratio(series, start=start, end=end) == pytest.approx(0.3)
    earlier = [(T0 + timedelta(minutes=5), T0 + timedelta(minutes=24))]
    assert rvs.effect_ratio(series, start=start, end=end, excluded=earlier) == pytest.approx(3.0)


def test_effect_ratio_needs_a_baseline() -> None:
    series = _minutes([10.0, 50.0, 50.0])
    assert rvs.effect_ratio(series, start=T0 + timedelta(minutes=1), end=T0 + timedelta(minutes=2)) is None


def test_robust_cv_is_mad_over_median() -> None:
    assert rvs.robust_cv([8.0, 9.0, 10.0, 11.0, 12.0]) == pytest.approx(1.0 / 10.0)
    assert rvs.robust_cv([5.0, 5.0, 5.0, 5.0]) == pytest.approx(0.0)
    assert rvs.robust_cv([0.0, 0.0, 0.0]) is None
    assert rvs.robust_cv([1.0, 2.0]) is None


def test_minute_coverage_counts_minutes_with_any_row() -> None:
    times = pl.Series([T0 + timedelta(minutes=m, seconds=s) for m, s in ((0, 1), (0, 50), (3, 0), (9, 59))],
                      dtype=pl.Datetime("us", "UTC"))
    assert rvs.minute_coverage(times, start=T0, end=T0 + timedelta(minutes=9)) == pytest.approx(3 / 10)


def test_error_share_sums_counts_over_the_window() -> None:
    apm = pl.DataFrame({"time": [T0 + timedelta(minutes=i) for i in range(4)], "request": [100.0, 100.0, 50.0, 50.0],
                        "error": [0.0, 0.0, 25.0, 50.0]}, schema_overrides={"time": pl.Datetime("us", "UTC")})
    assert rvs.error_share(apm, start=T0 + timedelta(minutes=2), end=T0 + timedelta(minutes=3)) == pytest.approx(0.75)


def test_edge_latency_profile_and_minute_p95() -> None:
    spans = []
    for minute in range(10):
        for call in range(20):
            trace = f"t{minute}-{call}"
            at = T0 + timedelta(minutes=minute, seconds=call)
            latency = 1000 * (call + 1) * (2 if minute == 9 else 1)
            spans.append({"trace_id": trace, "span_id": "a", "parent_span_id": None, "service": "frontend",
                          "pod": "frontend-0", "node": None, "span_kind": "client", "operation": "op", "peer_service": "cart",
                          "start": at, "duration_us": latency, "is_error": False})
            spans.append({"trace_id": trace, "span_id": "b", "parent_span_id": "a", "service": "cart", "pod": "cart-0",
                          "node": None, "span_kind": "server", "operation": "op", "peer_service": None,
                          "start": at, "duration_us": latency - 100, "is_error": False})
    frame = pl.DataFrame([{**span, "status_code": 0} for span in spans], schema=SPAN_SCHEMA)
    edges = rvs.edge_minutes(frame)
    assert edges.height == 10 and set(edges["calls"].to_list()) == {20}
    # p95 (linear) of 1000..20000 µs is 19050 µs; minute 9 is twice as slow
    profile = rvs.edge_latency_profile(edges)
    row = profile.row(0, named=True)
    assert (row["caller"], row["callee"]) == ("frontend", "cart")
    assert row["p50_of_p95"] == pytest.approx(19050.0)
    assert row["tail_ratio"] > 1.0
    # leaving the slow minute out (a case on cart) leaves a flat profile
    slow = (T0 + timedelta(minutes=9), T0 + timedelta(minutes=9, seconds=59), ("cart",))
    flat = rvs.edge_latency_profile(edges, excluded=[slow]).row(0, named=True)
    assert flat["p95_of_p95"] == pytest.approx(19050.0) and flat["tail_ratio"] == pytest.approx(1.0)


def test_spread_counts_other_services_above_threshold() -> None:
    ratios = {"frontend": 2.0, "checkout": 1.6, "cart": 5.0, "email": 1.2, "ad": None}
    assert rvs.spread_count(ratios, culprits=["cart"]) == 2
    assert rvs.spread_count(ratios, culprits=["cart", "frontend"], threshold=1.5) == 1


def test_coverage_inside_and_gap_outside() -> None:
    simulated = [float(v) for v in range(1, 101)]
    inside = rvs.coverage([50.0, 60.0], simulated, log_scale=False)
    assert inside["inside"] is True and inside["gap"] == 0.0 and inside["share"] == 1.0
    outside = rvs.coverage([200.0], simulated, log_scale=False)
    lo, hi = outside["lo"], outside["hi"]
    assert outside["inside"] is False and outside["gap"] == pytest.approx((200.0 - hi) / (hi - lo))
    logged = rvs.coverage([1000.0], [1.0, 10.0, 10.0, 10.0, 100.0], log_scale=True)
    assert logged["gap"] > 0 and logged["share"] == 0.0


def test_real_dir_guard_refuses_evaluation_sets(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        rvs.check_real_dir(tmp_path / "onlineboutique-2022-08-23" / "data")
    with pytest.raises(SystemExit):
        rvs.check_real_dir(tmp_path / "trainticket-all" / "data")
    rvs.check_real_dir(tmp_path / "onlineboutique-2022-08-22" / "data")


def test_coverage_gap_of_a_degenerate_range_is_finite() -> None:
    # every simulated day has a span in every minute; the real day in 21% of them
    gap = rvs.coverage([0.21], [1.0, 1.0, 1.0], log_scale=False)["gap"]
    assert gap == pytest.approx(0.79 / 0.1)


def _edge_counts(shares: dict[tuple[str, str], list[float]], *, demand: float = 20.0) -> pl.DataFrame:
    """Per minute: ``demand`` calls into checkoutservice, and its calls at the given share of it."""
    rows = []
    for minute in range(40):
        time = T0 + timedelta(minutes=minute)
        rows.append({"time": time, "caller": "frontend", "callee": "checkoutservice", "count": int(demand)})
        for (caller, callee), by_minute in shares.items():
            rows.append({"time": time, "caller": caller, "callee": callee, "count": int(demand * by_minute[minute])})
    return pl.DataFrame(rows, schema={"time": pl.Datetime("us", "UTC"), "caller": pl.Utf8, "callee": pl.Utf8,
                                      "count": pl.UInt32})


def test_fewest_made_call_is_the_lowest_window_share_over_the_usual_one() -> None:
    counts = _edge_counts({("checkoutservice", "emailservice"): [1.0] * 30 + [0.5] * 10,
                           ("checkoutservice", "paymentservice"): [1.0] * 30 + [0.0] * 10,
                           ("checkoutservice", "cartservice"): [2.0] * 40})
    start, end = T0 + timedelta(minutes=30), T0 + timedelta(minutes=34, seconds=30)
    assert rvs.fewest_made_call(counts, callers=["checkoutservice"], start=start, end=end) == pytest.approx(0.0)
    held = _edge_counts({("checkoutservice", "emailservice"): [1.0] * 30 + [0.5] * 10,
                         ("checkoutservice", "cartservice"): [2.0] * 40})
    assert rvs.fewest_made_call(held, callers=["checkoutservice"], start=start, end=end) == pytest.approx(0.5)
    # A service that calls nothing has no call to measure; frontend's demand is its own calls.
    assert rvs.fewest_made_call(held, callers=["emailservice"], start=start, end=end) is None
    assert rvs.fewest_made_call(held, callers=["frontend"], start=start, end=end) == pytest.approx(1.0)


def test_callers_going_on_is_the_lowest_callers_followed_share_over_its_usual_one() -> None:
    """frontend goes on after 9 of 10 of its calls into checkoutservice, then after 3 of 10."""
    rows = [{"time": T0 + timedelta(minutes=m), "caller": "frontend", "callee": "checkoutservice", "count": 10,
             "followed": 9 if m < 30 else 3} for m in range(40)]
    rows += [{"time": T0 + timedelta(minutes=m), "caller": "frontend", "callee": "cartservice", "count": 10,
              "followed": 10} for m in range(40)]
    counts = pl.DataFrame(rows, schema={"time": pl.Datetime("us", "UTC"), "caller": pl.Utf8, "callee": pl.Utf8,
                                        "count": pl.UInt32, "followed": pl.UInt32})
    start, end = T0 + timedelta(minutes=30), T0 + timedelta(minutes=34, seconds=30)
    assert rvs.callers_going_on(counts, callees=["checkoutservice"], start=start, end=end) == pytest.approx(1 / 3)
    assert rvs.callers_going_on(counts, callees=["cartservice"], start=start, end=end) == pytest.approx(1.0)
    # Nobody calls frontend: nothing to measure.
    assert rvs.callers_going_on(counts, callees=["frontend"], start=start, end=end) is None


@pytest.mark.parametrize(("rrt_ratio", "expected"), [(39.0, 0.25), (2.0, 0.25), (1.9, None), (None, None)])
def test_entry_backoff_is_the_request_ratio_of_a_slowed_entry_only(rrt_ratio, expected) -> None:
    requests = _minutes([500.0] * 30 + [125.0] * 3)
    start, end = T0 + timedelta(minutes=30), T0 + timedelta(minutes=32)
    assert rvs.entry_backoff(requests, rrt_ratio=rrt_ratio, start=start, end=end) == expected
