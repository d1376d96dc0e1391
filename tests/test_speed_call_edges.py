"""call_edges joins spans to their parents on 64-bit hashes: the same calls as a join on the strings."""
from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest

from preprocess.detect_trace import call_edges
from preprocess.schema import SPAN_SCHEMA
from tests.test_detect_trace import T0, synthetic_spans


def _joined_on_strings(spans: pl.DataFrame) -> pl.DataFrame:
    """The calls as the join on (trace_id, parent_span_id) strings finds them (call_edges before its hashes)."""
    parents = spans.select("trace_id", pl.col("span_id").alias("parent_span_id"), pl.col("service").alias("caller"),
                           pl.col("pod").alias("caller_pod"), pl.col("span_kind").alias("parent_kind"),
                           pl.col("duration_us").alias("parent_duration_us"), pl.col("is_error").alias("parent_error"))
    crossing = (spans.filter(pl.col("parent_span_id").is_not_null())
                .join(parents, on=["trace_id", "parent_span_id"]).filter(pl.col("caller") != pl.col("service")))
    client = pl.col("parent_kind") == "client"
    server_side = crossing.select(
        pl.col("start").alias("time"), "caller", "caller_pod", pl.col("service").alias("callee"),
        pl.col("pod").alias("callee_pod"), pl.col("node").alias("callee_node"), "operation",
        pl.when(client).then(pl.col("parent_duration_us")).otherwise(pl.col("duration_us")).alias("latency_us"),
        (pl.col("is_error").fill_null(False) | (client & pl.col("parent_error").fill_null(False))).alias("is_error"))
    client_only = (
        spans.filter((pl.col("span_kind") == "client") & pl.col("peer_service").is_not_null()
                     & (pl.col("peer_service") != pl.col("service")))
        .join(crossing.select("trace_id", pl.col("parent_span_id").alias("span_id")), on=["trace_id", "span_id"],
              how="anti")
        .select(pl.col("start").alias("time"), pl.col("service").alias("caller"), pl.col("pod").alias("caller_pod"),
                pl.col("peer_service").alias("callee"), pl.lit(None, pl.Utf8).alias("callee_pod"),
                pl.lit(None, pl.Utf8).alias("callee_node"), "operation", pl.col("duration_us").alias("latency_us"),
                pl.col("is_error").fill_null(False).alias("is_error")))
    return pl.concat([server_side, client_only])


def _odd_spans() -> pl.DataFrame:
    """Synthetic calls plus ids shared by two services, a null trace id and a null span id."""
    start = T0 + timedelta(minutes=1)

    def span(trace, sid, parent, service, kind=None, peer=None):
        return (trace, sid, parent, "op", service, f"{service}-0", "node-1", kind, peer, start, 100, 0, False)

    odd = pl.DataFrame([
        # Span id "c" twice in one trace: frontend's client span and an adservice span. The child
        # calls adservice's "c" only (frontend to frontend is no call), which answers frontend's
        # "c" too: both share the (trace_id, span_id) the call names.
        span("t1", "c", None, "frontend", "client", "adservice"),
        span("t1", "c", None, "adservice", "server"),
        span("t1", "d", "c", "frontend", "server"),
        span(None, "e", "c", "cartservice", "server"),  # no trace: no parent
        span("t1", None, None, "cartservice", "client", "redis-cart"),
        span("t2", "f", "g", "cartservice", "server"),  # its parent was never recorded
    ], schema=SPAN_SCHEMA, orient="row")
    return pl.concat([synthetic_spans(fault="cart_pod_errors", minutes=3), odd])


def _sorted(calls: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    return calls.select(columns).sort(columns, nulls_last=True)


def test_hash_join_finds_the_calls_of_the_string_join():
    spans = _odd_spans()
    reference = _joined_on_strings(spans)
    assert reference.height > 0
    assert _sorted(call_edges(spans), reference.columns).equals(_sorted(reference, reference.columns))


def test_hash_collisions_fall_back_to_the_strings(monkeypatch: pytest.MonkeyPatch):
    spans = _odd_spans()
    reference = _joined_on_strings(spans)
    # Every id hashes alike: every span pairs with every span, and the check of the strings must catch it.
    monkeypatch.setattr(pl.Expr, "hash", lambda self, *args, **kwargs: self.is_null().cast(pl.UInt64) * 0)
    assert _sorted(call_edges(spans), reference.columns).equals(_sorted(reference, reference.columns))
