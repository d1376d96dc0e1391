"""Spans scored by the trace detectors alone and ranked as the index ranks them.

Shared by the tests that simulate a fault's spans and ask which service the ranking blames
(handlers that stop after a call, a delay on a service's network): the same detector tables,
metric and log ones empty, and the same ranking call, so the tests differ only in their spans.
"""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import polars as pl

from index.params import RankWeights
from index.rank import rank_candidates
from preprocess.detect_log import LOG_EVENT_SCHEMA
from preprocess.detect_metric import METRIC_EVENT_SCHEMA, PLACEMENT_SCHEMA
from preprocess.detect_trace import (
    call_graph,
    caller_fanout,
    dropped_calls,
    edge_stats,
    score_trace_window,
    stopped_after,
)
from rca.system import bundled_system
from tests.fakes import undeclared_system

SYSTEM = bundled_system()  # names a candidate's service


def trace_events(stats: pl.DataFrame, *, start: datetime, end: datetime,
                 baseline_start: datetime) -> dict[str, pl.DataFrame]:
    """Every detector table the ranker reads: the trace ones of ``stats`` over [start, end], no metric or log event."""
    window = {"start": start, "end": end, "baseline_start": baseline_start}
    return {"metric": pl.DataFrame(schema=METRIC_EVENT_SCHEMA), "log": pl.DataFrame(schema=LOG_EVENT_SCHEMA),
            "trace": score_trace_window(stats, **window), "fanout": caller_fanout(stats, **window),
            "dropped": dropped_calls(stats, **window), "stopped_after": stopped_after(stats, **window)}


def ranked_services(spans: pl.DataFrame, *, start: datetime, end: datetime, baseline_start: datetime,
                    services: Iterable[str], weights: RankWeights = RankWeights()) -> list[str]:
    """The services of the top ten candidates ranked from ``spans``' trace events (each service one pod ``<service>-0``)."""
    stats = edge_stats(spans)
    candidates = rank_candidates(events=trace_events(stats, start=start, end=end, baseline_start=baseline_start),
                                 graph=call_graph(stats), placement=pl.DataFrame(schema=PLACEMENT_SCHEMA),
                                 known_pods={f"{s}-0" for s in services}, top_k=10, window_start=start,
                                 weights=weights, system=undeclared_system())
    return [SYSTEM.service_of(c.component) for c in candidates]
