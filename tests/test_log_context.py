"""Errors a span's own log lines state, where its tracer records no status (Nezha's spans carry none).

A Java service that throws logs the exception in the request's thread, with the request's trace
context (``TraceID: ... SpanID: ...``); so do its callers when the call fails. Tied to their spans,
those lines say which calls failed, and the trace detector sees where in the chain the errors
start. Lines below error and lines that state no span say nothing of any span.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from index.build import RawChunk, family_inputs
from preprocess.dataset_writer import write_frames
from preprocess.detect_trace import TraceDetector, edge_stats, score_trace_window
from preprocess.log_context import error_span_ids, is_error_line, span_id_of, with_logged_errors
from preprocess.schema import LOG_SCHEMA, SPAN_SCHEMA
from tests.trace_ranking import ranked_from_edges

T0 = datetime(2023, 1, 29, 1, 0, tzinfo=UTC)
FAULT_FROM, FAULT_TO = 40, 42  # minutes after T0
WINDOW = {"start": T0 + timedelta(minutes=FAULT_FROM), "end": T0 + timedelta(minutes=FAULT_TO, seconds=59),
          "baseline_start": T0 + timedelta(minutes=10)}
SERVICES = ("gateway", "order", "payment", "route")
CHAIN = {"gateway": ("order", "route"), "order": ("payment",), "payment": (), "route": ()}


@pytest.mark.parametrize(("line", "span", "error"), [
    ("17:20:54.006 ERROR e.s.ExecuteServiceImpl#51 TraceID: a49350ad2972418a7cf5b5eb15504823 "
     "SpanID: 9fbe1d9c0daec0f0 [ticketExecute][Order Status Wrong]", "9fbe1d9c0daec0f0", True),
    ("17:20:54.004 INFO  o.s.OrderServiceImpl#365 TraceID: a49350ad2972418a7cf5b5eb15504823 "
     "SpanID: 18fab717fdf274b6 [getOrderById][error count 0]", "18fab717fdf274b6", False),
    ('{"message":"TraceID: 04c87ec97bae041b1b15b3c7676a43cc SpanID: 644c622c1c035079 charge failed",'
     '"severity":"error"}', "644c622c1c035079", True),
    ('{"severity": "INFO", "message": "SpanID: e4006dce6700e903 error budget fine"}', "e4006dce6700e903", False),
    ("2024-01-01 12:00:00,123 ERROR [app] [trace_id=0af7651916cd43dd8448eb211c80319c "
     "span_id=B7AD6B7169203331] boom", "b7ad6b7169203331", True),
    ('level=error msg="lost" otelSpanID=b7ad6b7169203331', "b7ad6b7169203331", True),
    ('{"level":"warn","spanId":"00f067aa0ba902b7","msg":"ERROR upstream"}', "00f067aa0ba902b7", False),
    ("ERROR no request context here", None, True),
    ("GET /items 200 in 3 ms", None, False),
])
def test_a_line_states_its_span_and_its_level(line: str, span: str | None, error: bool) -> None:
    frame = pl.DataFrame({"message": [line]})
    found = frame.select(span_id_of(pl.col("message")).alias("span"), is_error_line(pl.col("message")).alias("error"))
    assert found.row(0) == (span, error)
    assert error_span_ids(frame).to_list() == ([span] if span and error else [])


def _world(*, fault: bool, seed: int = 0, minutes: int = 50, per_minute: int = 40,
           ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Spans without status (server spans only, as Nezha records) and the lines each request's services log.

    Every span logs an INFO line with its context; 3% of order's requests log a business error
    every minute. In the fault minutes payment throws on 70% of its calls: payment logs the
    exception, and order and gateway, whose call failed, log an error too.
    """
    rng = np.random.default_rng(seed)
    spans: list[tuple] = []
    logs: list[tuple] = []
    for minute in range(minutes):
        faulty = fault and FAULT_FROM <= minute <= FAULT_TO
        for n in range(per_minute):
            trace = f"{seed:02d}{minute:04d}{n:04d}".ljust(32, "a")
            start = T0 + timedelta(minutes=minute, seconds=1.4 * n)
            throws = faulty and rng.random() < 0.7
            ids: dict[str, str] = {}
            for depth, service in enumerate(("gateway", "order", "payment", "route")):
                ids[service] = f"{minute:04d}{n:04d}{depth:08x}"
            parent = {"gateway": None, "order": "gateway", "payment": "order", "route": "gateway"}
            for service in SERVICES:
                at = start + timedelta(milliseconds=2 * SERVICES.index(service))
                took = int(rng.uniform(3_000, 6_000))
                span_id = ids[service]
                parent_id = ids[p] if (p := parent[service]) else None
                spans.append((trace, span_id, parent_id, f"{service}/handle", service, f"{service}-0", "node-1",
                              "server", None, at, took, None, False))
                context = f"TraceID: {trace} SpanID: {span_id}"
                logs.append((at, "shop", f"{service}-0", "node-1", f"10:00:00.000 INFO  c.{service}.Handler {context} ok"))
                if service == "order" and rng.random() < 0.03:
                    logs.append((at, "shop", "order-0", "node-1",
                                 f"10:00:00.001 ERROR c.order.Handler {context} [Order Status Wrong]"))
                if throws and service in ("gateway", "order", "payment"):
                    what = {"payment": "java.lang.RuntimeException: injected",
                            "order": "call payment failed: 500", "gateway": "request failed: 500"}[service]
                    logs.append((at, "shop", f"{service}-0", "node-1",
                                 f"10:00:00.002 ERROR c.{service}.Handler {context} {what}"))
    return (pl.DataFrame(spans, schema=SPAN_SCHEMA, orient="row"),
            pl.DataFrame(logs, schema=LOG_SCHEMA, orient="row"))


def _edges(spans: pl.DataFrame, logs: pl.DataFrame | None) -> pl.DataFrame:
    """The trace detector's nightly build of one hour chunk, as the index runs it."""
    return TraceDetector().build([{"trace": spans, "log": logs}])["trace_edges"]


@pytest.mark.parametrize("seed", range(3))
def test_errors_the_logs_state_put_the_fault_where_the_errors_start(seed: int) -> None:
    spans, logs = _world(fault=True, seed=seed)
    edges = _edges(spans, logs)
    events = score_trace_window(edges, **WINDOW).filter(pl.col("signal") == "errors")
    assert {"payment", "order"} <= set(events.get_column("callee").to_list())
    assert ranked_from_edges(edges, **WINDOW, services=SERVICES)[0] == "payment"
    # The spans alone say nothing failed: no error anywhere.
    blind = _edges(spans, None)
    assert blind.get_column("errors").sum() == 0
    assert score_trace_window(blind, **WINDOW).filter(pl.col("signal") == "errors").height == 0


@pytest.mark.parametrize("seed", range(3))
def test_a_steady_business_error_is_no_fault(seed: int) -> None:
    spans, logs = _world(fault=False, seed=seed)
    edges = _edges(spans, logs)
    assert edges.filter(pl.col("callee") == "order").get_column("errors").sum() > 0  # the 3% are counted
    assert score_trace_window(edges, **WINDOW).filter(pl.col("signal") == "errors").height == 0


def test_logs_that_state_no_span_change_nothing() -> None:
    spans, logs = _world(fault=True, minutes=3)
    bare = logs.with_columns(pl.col("message").str.replace(r"TraceID: \S+ SpanID: \S+ ", ""))
    assert error_span_ids(bare).len() == 0
    assert _edges(spans, bare).equals(edge_stats(spans))
    assert with_logged_errors(spans, error_spans=error_span_ids(bare)).equals(spans)


def test_a_status_the_tracer_recorded_stays(tmp_path: Path) -> None:
    spans, _ = _world(fault=False, minutes=1, per_minute=4)
    failed = spans.with_columns(pl.lit(True).alias("is_error"))
    assert with_logged_errors(failed, error_spans=pl.Series(["ffffffffffffffff"])).get_column("is_error").all()


def test_where_the_tracer_records_a_status_the_logs_are_not_read() -> None:
    """A status recorded is the call's outcome: an error a service logs and handles is no failed call."""
    spans, logs = _world(fault=True)
    with_status = spans.with_columns(pl.lit(0, pl.Int64).alias("status_code"))
    asked: list[str] = []

    def read_logs() -> pl.DataFrame:
        asked.append("log")
        return logs

    chunk = RawChunk({"trace": with_status}, joined={"log": read_logs})
    assert TraceDetector().build([chunk])["trace_edges"].equals(edge_stats(with_status))
    assert asked == []
    # Without a status the same chunk's logs are read, once.
    chunk = RawChunk({"trace": spans}, joined={"log": read_logs})
    assert TraceDetector().build([chunk])["trace_edges"].get_column("errors").sum() > 0
    assert asked == ["log"]


def test_the_trace_partition_is_built_from_the_hours_logs_too(tmp_path: Path) -> None:
    """A log file changed makes the trace partition stale; the logs' absent hours are the log partition's to report."""
    spans, logs = _world(fault=False, minutes=2, per_minute=2)
    write_frames(tmp_path, spans=spans, logs=logs)
    day = "2023-01-29"  # 01:00 UTC is 09:00 CST
    files, missing = family_inputs(tmp_path, day, TraceDetector.raw)
    assert {p.parent.name for p in files} == {"trace-parquet", "log-parquet"}
    assert missing and all("log" not in item.split()[0] for item in missing)
    assert len(missing) == 23  # the other trace hours only
