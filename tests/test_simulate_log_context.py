"""Simulated lines that state their request's trace context, as Nezha's instrumented services write them.

With ``trace_context`` each line a traced service writes for a request ends with (text) or opens
with (JSON) the request's trace and span ids; the error lines of a failing service name its own
span. Without it the lines are exactly as before: the 2025 release states no context.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl

from simulate.logs import build_hour_logs
from simulate.requests import generate_hour
from simulate.schedule import Fault
from simulate.simulator import _pods_on_node
from simulate.topology import place_pods, pods_of

HOUR = datetime(2025, 6, 6, 2, 0, tzinfo=UTC)
SPAN_ID = r'span_id"?[:=]"?([0-9a-f]{16})\b'


def span_id_of(messages: pl.Expr) -> pl.Expr:
    return messages.str.extract(SPAN_ID, 1)


def error_span_ids(logs: pl.DataFrame) -> pl.Series:
    """Span ids of the JSON lines at severity error."""
    return logs.filter(pl.col("message").str.contains(r'"severity":"error"')).select(
        span_id_of(pl.col("message"))).to_series().drop_nulls()


def _hour(*, trace_context: bool):
    placement = place_pods(rng=np.random.default_rng(0), day="2025-06-06")
    faults = [Fault(uuid="f", fault_type="code error", level="service", service="checkoutservice",
                    pods=tuple(pods_of("checkoutservice")), node="", source="", destination="",
                    start=HOUR, end=HOUR + timedelta(hours=1), record={})]
    spans, _ = generate_hour(hour_start=HOUR, requests_per_hour=3000, trace_share=1.0, faults=faults,
                             placement=placement, pods_on_node=_pods_on_node(placement), strength=1.0,
                             rng=np.random.default_rng(7))
    logs = build_hour_logs(spans=spans, faults=faults, placement=placement, hour_start_s=int(HOUR.timestamp()),
                           info_share=0.5, verbose_frontend=False, rng=np.random.default_rng(3),
                           trace_context=trace_context)
    return spans, logs


def test_lines_state_the_span_they_were_written_in() -> None:
    spans, logs = _hour(trace_context=True)
    plain_spans, plain = _hour(trace_context=False)
    assert np.array_equal(spans.span_id, plain_spans.span_id)
    assert len(logs.message) == len(plain.message) and np.array_equal(logs.timestamp_us, plain.timestamp_us)
    stated = pl.DataFrame({"message": logs.message.tolist()}).select(span_id_of(pl.col("message"))).to_series()
    known = {f"{int(s):016x}" for s in spans.span_id.tolist()}
    assert stated.drop_nulls().len() > len(logs.message) // 2
    assert set(stated.drop_nulls().to_list()) <= known
    # Each line is the one written without context, the context added around it.
    for with_context, without in zip(logs.message.tolist()[:200], plain.message.tolist()[:200]):
        assert with_context == without or without[1:] in with_context or with_context.startswith(without)
    # checkoutservice's failing handlers state their own spans in their error lines.
    failing = {f"{int(s):016x}" for s, svc, kind, err in zip(spans.span_id.tolist(), spans.service.tolist(),
                                                               spans.kind.tolist(), spans.err_kind.tolist())
               if svc == "checkoutservice" and kind == "server" and err > 0}
    errors = set(error_span_ids(pl.DataFrame({"message": logs.message.tolist()})).to_list())
    assert failing and failing <= errors  # every failing checkout handler logged its error at error level
    assert stated.filter(stated.is_in(list(failing))).len() >= len(failing)
    # frontend's warning about a failed ads call is written in frontend's own span, not in its client span.
    frontend_own = {f"{int(s):016x}" for s, svc, kind in zip(spans.span_id.tolist(), spans.service.tolist(),
                                                             spans.kind.tolist()) if svc == "frontend" and kind == "server"}
    ads = pl.DataFrame({"message": logs.message.tolist()}).filter(pl.col("message").str.contains("failed to retrieve ads"))
    assert ads.height > 0
    assert set(ads.select(span_id_of(pl.col("message"))).to_series().to_list()) <= frontend_own


def test_without_context_no_line_states_a_span() -> None:
    _, plain = _hour(trace_context=False)
    assert pl.DataFrame({"message": plain.message.tolist()}).select(span_id_of(pl.col("message"))).to_series().null_count() \
        == len(plain.message)
