"""Log detector: masking, template mining with persisted state, bursts vs chronic noise."""
from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from preprocess.detect_log import (
    LogDetector,
    LogTemplateMiner,
    MinerStateError,
    _map_ahead,
    extract_and_mask,
    log_counts,
    score_log_window,
    template_keyword,
)
from preprocess.schema import LOG_SCHEMA

T0 = datetime(2025, 6, 5, 16, 0, tzinfo=UTC)
WINDOW_START, WINDOW_END = T0 + timedelta(minutes=35), T0 + timedelta(minutes=50)
BASELINE_START = T0 + timedelta(minutes=5)

NOISE = 'Exception in thread "grpc-default-executor-{n}" java.lang.Error: Injected error'
INFO = '{{"severity":"info","message":"request complete","http.req.id":"{n:08x}-aaaa-bbbb-cccc-0123456789ab","took_ms":{n}}}'
FAULT = ('{{"severity":"error","message":"request error","error":"could not retrieve cart: rpc error: code = '
         'Unavailable desc = dial tcp 10.233.{n}.4:7070: connect: connection refused"}}')


def _logs(rows: list[tuple[int, str, str]]) -> pl.DataFrame:
    return pl.DataFrame(
        [(T0 + timedelta(minutes=m, seconds=7), "hipstershop", pod, "aiops-k8s-01", msg)
         for m, pod, msg in rows], schema=LOG_SCHEMA, orient="row")


def _day(*, fault: str | None, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for minute in range(60):
        for _ in range(rng.poisson(20)):
            rows.append((minute, "adservice-0", NOISE.format(n=int(rng.integers(1, 99)))))
        for _ in range(rng.poisson(8)):
            rows.append((minute, "frontend-0", INFO.format(n=int(rng.integers(1, 10**6)))))
        if fault == "burst" and 35 <= minute <= 50:
            rows += [(minute, "frontend-1", FAULT.format(n=int(rng.integers(1, 250))))] * 6
    return _logs(rows)


def test_masking_collapses_variable_parts():
    frame = pl.DataFrame({"message": [INFO.format(n=5), INFO.format(n=123456), FAULT.format(n=9), NOISE.format(n=3)]})
    masked = frame.select(extract_and_mask(pl.col("message"))).to_series().to_list()
    assert masked[0] == masked[1] == "request complete"
    assert "<IP>" in masked[2] and "connection refused" in masked[2] and masked[2].startswith("request error: ")
    assert "<NUM>" in masked[3] and "Injected error" in masked[3]


def test_burst_is_found_and_chronic_noise_is_not():
    miner = LogTemplateMiner(state_path=None)
    counts = log_counts(_day(fault="burst"), miner=miner)
    events = score_log_window(counts, miner.templates(), start=WINDOW_START, end=WINDOW_END,
                              baseline_start=BASELINE_START)
    assert events.get_column("component").to_list() == ["frontend-1"]
    event = events.row(0, named=True)
    assert event["direction"] == "new" and "connection refused" in event["template"]
    assert event["onset"] == T0 + timedelta(minutes=35)


@pytest.mark.parametrize("seed", range(5))
def test_noise_only_gives_no_event(seed):
    miner = LogTemplateMiner(state_path=None)
    counts = log_counts(_day(fault=None, seed=seed), miner=miner)
    events = score_log_window(counts, miner.templates(), start=WINDOW_START, end=WINDOW_END,
                              baseline_start=BASELINE_START)
    assert events.height == 0


def test_rate_increase_of_known_template_is_a_burst():
    rows = [(m, "adservice-1", NOISE.format(n=m)) for m in range(60) for _ in range(2 if m < 35 or m > 50 else 30)]
    miner = LogTemplateMiner(state_path=None)
    events = score_log_window(log_counts(_logs(rows), miner=miner), miner.templates(), start=WINDOW_START,
                              end=WINDOW_END, baseline_start=BASELINE_START)
    assert events.height == 1 and events.item(0, "direction") == "up" and events.item(0, "ratio") > 10


def test_silent_pod_is_reported():
    # Another pod keeps logging through the window: the logs were recorded, cartservice-2 went quiet.
    rows = [(m, "cartservice-2", INFO.format(n=m)) for m in range(35) for _ in range(5)]
    rows += [(m, "frontend-0", INFO.format(n=m)) for m in range(60) for _ in range(5)]
    miner = LogTemplateMiner(state_path=None)
    events = score_log_window(log_counts(_logs(rows), miner=miner), miner.templates(), start=WINDOW_START,
                              end=WINDOW_END, baseline_start=BASELINE_START)
    assert events.get_column("direction").to_list() == ["silent"]
    assert events.item(0, "component") == "cartservice-2"


def test_a_window_no_pod_logged_in_is_unrecorded_not_silent():
    """Logs kept only around incidents, or a lost file: when no pod at all logged in the window, no
    pod is called silent (the recording stopped, not the pods)."""
    rows = [(m, pod, INFO.format(n=m)) for m in range(35) for pod in ("cartservice-2", "frontend-0") for _ in range(5)]
    miner = LogTemplateMiner(state_path=None)
    events = score_log_window(log_counts(_logs(rows), miner=miner), miner.templates(), start=WINDOW_START,
                              end=WINDOW_END, baseline_start=BASELINE_START)
    assert events.height == 0


START_CHARGE = '{{"severity":"info","message":"Start charge card for order {n}"}}'
CHARGED = '{{"severity":"info","message":"Charge successfully, transaction id {n}"}}'
EMPTY_CART = '{{"severity":"info","message":"Cart emptied for user {n}"}}'


def _checkout_day(*, broken: set[str], pod_level: float = 1.0, seed: int = 0) -> pl.DataFrame:
    """A checkout pod logging three steady statements a minute; in the window, the ``broken``
    ones stop and the others keep ``pod_level`` of their rate."""
    rng = np.random.default_rng(seed)
    rows = []
    for minute in range(60):
        in_window = 35 <= minute <= 50
        for name, template, rate in (("start", START_CHARGE, 6), ("charged", CHARGED, 6), ("empty", EMPTY_CART, 4)):
            if in_window and name in broken:
                continue
            for _ in range(rng.poisson(rate * (pod_level if in_window else 1.0))):
                rows.append((minute, "checkoutservice-0", template.format(n=int(rng.integers(1, 10**6)))))
    return _logs(rows)


@pytest.mark.parametrize("seed", range(3))
def test_a_statement_that_stops_while_its_pod_keeps_logging_has_fallen(seed):
    """A code fault between two log statements: the later one stops, the earlier ones go on."""
    miner = LogTemplateMiner(state_path=None)
    events = score_log_window(log_counts(_checkout_day(broken={"charged"}, seed=seed), miner=miner),
                              miner.templates(), start=WINDOW_START, end=WINDOW_END, baseline_start=BASELINE_START)
    assert events.get_column("direction").to_list() == ["down"]
    event = events.row(0, named=True)
    assert event["component"] == "checkoutservice-0" and "Charge successfully" in event["example"]
    assert event["window_count"] == 0 and event["z"] >= 4 and event["onset"] == WINDOW_START


@pytest.mark.parametrize("level", [0.5, 2.0])
def test_a_pod_whose_traffic_changed_as_a_whole_has_no_fallen_statement(level):
    miner = LogTemplateMiner(state_path=None)
    events = score_log_window(log_counts(_checkout_day(broken=set(), pod_level=level), miner=miner),
                              miner.templates(), start=WINDOW_START, end=WINDOW_END, baseline_start=BASELINE_START)
    assert "down" not in events.get_column("direction").to_list()


def test_a_statement_stops_at_half_traffic_still_falls():
    miner = LogTemplateMiner(state_path=None)
    events = score_log_window(log_counts(_checkout_day(broken={"charged"}, pod_level=0.5), miner=miner),
                              miner.templates(), start=WINDOW_START, end=WINDOW_END, baseline_start=BASELINE_START)
    assert events.get_column("direction").to_list() == ["down"]


def test_a_pod_that_stops_logging_is_silent_not_fallen():
    rows = _checkout_day(broken={"start", "charged", "empty"})
    rows = pl.concat([rows, _logs([(m, "frontend-0", INFO.format(n=m)) for m in range(60) for _ in range(5)])])
    miner = LogTemplateMiner(state_path=None)
    events = score_log_window(log_counts(rows, miner=miner), miner.templates(), start=WINDOW_START,
                              end=WINDOW_END, baseline_start=BASELINE_START)
    assert events.get_column("direction").to_list() == ["silent"]


def test_template_ids_are_stable_across_runs(tmp_path):
    state = tmp_path / "miner.bin"
    first = LogTemplateMiner(state_path=state)
    counts_one = log_counts(_day(fault=None), miner=first)
    first.save()
    ids_before = dict(first.templates().iter_rows())

    second = LogTemplateMiner(state_path=state)
    counts_two = log_counts(_day(fault="burst", seed=1), miner=second)
    ids_after = dict(second.templates().iter_rows())
    assert set(ids_before) < set(ids_after)  # old ids kept, the fault template is new
    assert set(counts_one.get_column("template_id")) <= set(counts_two.get_column("template_id"))
    new_ids = set(ids_after) - set(ids_before)
    assert any("connection refused" in ids_after[i] for i in new_ids)


def test_corrupt_miner_state_names_the_file(tmp_path):
    state = tmp_path / "miner.bin"
    state.write_bytes(b"not a state")
    with pytest.raises(MinerStateError, match="miner.bin"):
        LogTemplateMiner(state_path=state)


def test_template_keyword_drops_masks():
    assert template_keyword("request error: could not retrieve cart <*> <IP> refused") == \
        "request error: could not retrieve cart refused"


def test_build_counts_hours_on_threads_as_one_by_one():
    hours = [_day(fault=None, seed=s).with_columns(pl.col("time") + timedelta(hours=h))
             for h, s in enumerate([0, 1, 2, 3, 4])]
    hours[2] = hours[2].with_columns(pl.col("message").str.replace("request", "reply"))  # a template of its own
    miner = LogTemplateMiner(state_path=None)
    expected = pl.concat([log_counts(h, miner=miner) for h in hours])
    chunks = [{"log": h} for h in hours[:2]] + [{"log": None}] + [{"log": h} for h in hours[2:]]
    built = LogDetector().build(chunks, state_dir=None)
    assert built["log_counts"].equals(expected)
    assert built["log_templates"].equals(miner.templates())


def test_map_ahead_keeps_order_and_raises_where_it_failed():
    def slow_square(n: int) -> int:
        time.sleep(0.01 * (n % 3))
        if n == 7:
            raise ValueError("seven")
        return n * n

    assert list(_map_ahead(slow_square, range(7), ahead=3)) == [n * n for n in range(7)]
    seen = []
    with pytest.raises(ValueError, match="seven"):
        for value in _map_ahead(slow_square, range(10), ahead=3):
            seen.append(value)
    assert seen == [n * n for n in range(7)]


# Java lines as TrainTicket writes them (Nezha): a time of day, the level, the logger, the request's
# trace context, then the statement. Header and context mask alike in every line.
def _java(level: str, logger: str, body: str, *, n: int) -> str:
    return (f"17:20:{n % 60:02d}.{n:03d} {level}  {logger}#{100 + n % 7} TraceID: {n:032x} SpanID: {n:016x} "
            f"{body}")


STATEMENTS = [  # (level, logger, body): four different statements, two loggers, two levels
    ("INFO", "o.s.OrderServiceImpl", "[getOrderById][Get Order By ID Success][OrderId: {id}]"),
    ("INFO", "o.s.OrderServiceImpl", "[cancelOrder][Order Status Wrong, cannot cancel][{id}]"),
    ("INFO", "t.s.TravelServiceImpl", "[getRouteById][Get Route By ID Success][RouteId: {id}]"),
    ("ERROR", "o.s.OrderServiceImpl", "[getOrderById][Get Order By ID Success][OrderId: {id}]"),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_java_lines_of_different_statements_loggers_or_levels_stay_apart(seed):
    rng = np.random.default_rng(seed)
    lines, truth = [], []
    for k in range(200):
        s = int(rng.integers(len(STATEMENTS)))
        level, logger, body = STATEMENTS[s]
        lines.append(_java(level, logger, body.format(id=f"{rng.integers(1 << 60):x}-{k}"), n=int(rng.integers(999))))
        truth.append(s)
    masked = pl.DataFrame({"m": lines}).select(extract_and_mask(pl.col("m"))).get_column("m").to_list()
    assert not any(m[:2].isdigit() or "TraceID" in m for m in masked), masked[:3]
    ids = LogTemplateMiner(state_path=None).template_ids(masked)
    # One template per statement: lines of one statement share it, different statements never do.
    assert len(set(zip(truth, ids, strict=True))) == len(set(truth)) == len(set(ids))
