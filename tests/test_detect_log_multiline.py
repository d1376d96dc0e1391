"""A stack trace stored one record per printed line is one event, told by its head, not by its frames.

Container runtimes (and log shippers without a multiline rule) keep each printed line as a
record of its own: a Java exception arrives as its logger's line, the exception's line, dozens
of indented ``\tat ...`` frames and ``\t... N more``; a Python traceback as indented ``File``
and code lines (the 2025 release's error templates hold ``raise InactiveRpcError(state)``
with the count of its head line). The frames are the same for every throw of a statement and
say nothing the head does not: counted as lines, a thrower's evidence was the frames, and one
exception counted as thirty lines.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from preprocess.detect_log import LogTemplateMiner, is_continuation, log_counts, score_log_window
from preprocess.schema import LOG_SCHEMA

T0 = datetime(2023, 1, 29, 9, 0, tzinfo=UTC)
WINDOW_START, WINDOW_END = T0 + timedelta(minutes=40), T0 + timedelta(minutes=43)

HEAD = "2023-01-29 17:{m:02d}:{s:02d}.{ms:03d} ERROR 1 --- [nio-12031-exec-{n}] o.a.c.c.C.[.[.[/].[dispatcherServlet] : " \
       "Servlet.service() for servlet [dispatcherServlet] threw exception"
EXCEPTION = "java.lang.NullPointerException: null"
FRAMES = [f"\tat order.service.OrderServiceImpl.step{k}(OrderServiceImpl.java:{100 + k})" for k in range(24)] + [
    "\tat org.springframework.web.servlet.FrameworkServlet.service(FrameworkServlet.java:883)",
    "Caused by: java.lang.IllegalStateException: order {n} has no route",
    "\tat order.repository.RouteClient.find(RouteClient.java:57)",
    "\t... 87 common frames omitted",
]
PYTHON = ["Traceback (most recent call last):",
          '  File "/usr/local/lib/python3.7/site-packages/grpc/_server.py", line 435, in _call_behavior',
          "    response_or_iterator = behavior(argument, context)",
          "    raise InactiveRpcError(state)",
          "grpc._channel._InactiveRpcError: <_InactiveRpcError of RPC that terminated with:",
          "\tstatus = StatusCode.UNAVAILABLE"]
INFO = "2023-01-29 17:{m:02d}:{s:02d}.{ms:03d} INFO 1 --- [nio-12031-exec-{n}] order.controller.OrderController : " \
       "[getOrderById][Get Order By ID Success][OrderId: {n}]"


def _day(*, throws: int, seed: int) -> tuple[pl.DataFrame, int]:
    """An hour of one pod's INFO lines; from minute 40, ``throws`` exceptions a minute, each printed in full."""
    rng = np.random.default_rng(seed)
    rows, thrown = [], 0
    for minute in range(60):
        for second in range(0, 60, 6):
            rows.append((minute, second, INFO.format(m=minute, s=second, ms=int(rng.integers(999)),
                                                     n=int(rng.integers(1, 10**6)))))
        if minute >= 40:
            for k in range(throws):
                second, n = 3 + 5 * k, int(rng.integers(1, 200))
                printed = [HEAD.format(m=minute, s=second, ms=int(rng.integers(999)), n=n), EXCEPTION, *FRAMES]
                rows += [(minute, second, line.format(n=n)) for line in printed]
                thrown += 1
    frame = pl.DataFrame(
        [(T0 + timedelta(minutes=m, seconds=s), "default", "ts-order-service-5b8c7d9f4-x7k2q", "node-1",
          line) for m, s, line in rows], schema=LOG_SCHEMA, orient="row")
    return frame, thrown


@pytest.mark.parametrize("line", [*(f for f in FRAMES if not f.startswith("Caused by")), *PYTHON[1:4], PYTHON[5]])
def test_indented_lines_continue_the_record_above(line: str) -> None:
    assert pl.select(is_continuation(pl.lit(line))).item()


@pytest.mark.parametrize("line", [HEAD, EXCEPTION, FRAMES[-3], PYTHON[0], PYTHON[4], INFO, "", '{"message": " x"}'])
def test_a_head_line_is_a_record_of_its_own(line: str) -> None:
    assert not pl.select(is_continuation(pl.lit(line))).item()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_an_exception_is_counted_once_and_told_by_its_lines_not_its_frames(seed: int) -> None:
    logs, thrown = _day(throws=4, seed=seed)
    miner = LogTemplateMiner(state_path=None)
    counts = log_counts(logs, miner=miner)
    # Every counted line is a record of its own: no template of frames, and the INFO lines, the
    # head, the exception and its cause are each counted once a throw.
    templates = miner.templates().get_column("template").to_list()
    assert not any(t.lstrip().startswith(("at ", "...")) for t in templates), templates
    assert counts.get_column("count").sum() == logs.height - thrown * sum(f.startswith("\t") for f in FRAMES)
    events = score_log_window(counts, miner.templates(), start=WINDOW_START, end=WINDOW_END,
                              baseline_start=T0 + timedelta(minutes=10))
    told = events.filter(pl.col("direction") == "new")
    assert told.height == 3, told.select("template", "window_count")  # head, exception, cause
    assert set(told.get_column("window_count")) == {4 * 4}  # four throws a minute, four window minutes
    assert any("NullPointerException" in t for t in told.get_column("template"))
