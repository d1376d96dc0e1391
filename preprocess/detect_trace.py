"""Trace detector: call edges from spans, per-edge latency / error anomalies, propagation.

This module owns:

* ``edge_stats``: per (minute, caller, caller pod, callee, callee pod, callee node, operation) call
  count, errors and latency p50 / p95 / mean, the stored trace feature. A call edge is a
  span whose parent (``parent_span_id``) belongs to another service; its latency is the
  caller-side client span when there is one (it includes the network). Client spans
  with no server child in another service (the client-only services adservice,
  currencyservice, paymentservice, or a callee that did not answer) become edges to
  their ``peer_service`` with an unknown callee pod.
* ``call_graph``: the networkx service call graph observed in those edges.
* ``score_trace_window``: anomalous edges of a window against the baseline (caller pods
  pooled, so the callee is the suspect), including edges that vanish (a dead callee pod);
* ``caller_fanout``: caller pods whose calls to several callees went wrong at once while
  those callees are fine for everybody else (DNS or network fault at the source).
* ``dropped_calls``: calls a caller makes less often for the demand it serves (a code path
  that returns early or throws before the call).
* ``propagation_scores``: personalised PageRank on the anomaly subgraph oriented from
  caller to callee, so that the most downstream anomalous component collects the mass;
* ``TraceDetector``: edge statistics and the two window scorers behind the
  ``preprocess.detect.Detector`` contract (events ``trace``, ``fanout`` and ``dropped``).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import networkx as nx
import numpy as np
import polars as pl

from preprocess.baseline import (
    Span,
    bucket_spans,
    clean_minutes,
    drop_spans,
    history_span,
    spans_before,
    window_first_minute,
)
from preprocess.detect_metric import epoch_us, from_epoch_us, robust_location_scale
from preprocess.prefetch import read_ahead
from preprocess.schema import TIME, FeatureTable, RawInput, strongest_first
from rca.system import SystemSpec

log = logging.getLogger(__name__)

EDGE_KEY: tuple[str, ...] = ("caller", "caller_pod", "callee", "callee_pod", "callee_node", "operation")
# Callee-side analysis pools the caller pods (the suspect is the callee) and the callee's
# node (pods move between nodes, e.g. across days; the latest node is kept).
CALLEE_KEY: tuple[str, ...] = ("caller", "callee", "callee_pod", "operation")
EDGE_STATS_SCHEMA: dict[str, pl.DataType] = {
    "time": TIME,
    "caller": pl.Utf8(),
    "caller_pod": pl.Utf8(),
    "callee": pl.Utf8(),
    "callee_pod": pl.Utf8(),  # null when the callee is seen only from the client side
    "callee_node": pl.Utf8(),
    "operation": pl.Utf8(),
    "count": pl.Int64(),
    "errors": pl.Int64(),
    "p50_us": pl.Float64(),
    "p95_us": pl.Float64(),
    "mean_us": pl.Float64(),
    # Mean time of a call outside the callee's own server span (the caller's client span less
    # its server child: the network and both sides' queues); null where no call had both spans.
    "wait_mean_us": pl.Float64(),
    # Calls after which the caller's handler went on to make another call (``call_edges``).
    "followed": pl.Int64(),
}
TRACE_EVENT_SCHEMA: dict[str, pl.DataType] = {
    "caller": pl.Utf8(),
    "callee": pl.Utf8(),
    "callee_pod": pl.Utf8(),
    "callee_node": pl.Utf8(),
    "operation": pl.Utf8(),
    "signal": pl.Utf8(),  # latency | errors | silent
    "z": pl.Float64(),
    "ratio": pl.Float64(),  # p95 ratio for latency, error rate in window for errors
    "window_calls": pl.Int64(),
    "onset": TIME,
    # Latency only: the share of the added mean latency spent outside the callee's own server
    # span (0 = all inside the callee, 1 = all between the two sides); null where the spans
    # do not tell (no client span with a server child, or the mean did not rise) ...
    "wait_share": pl.Float64(),
    # ... and that added time between the spans in µs (window median less baseline median).
    "wait_added_us": pl.Float64(),
}
DROPPED_EVENT_SCHEMA: dict[str, pl.DataType] = {
    "caller": pl.Utf8(),
    "callee": pl.Utf8(),
    "z": pl.Float64(),
    "ratio": pl.Float64(),  # the call's share of the caller's demand in the window / its usual share
    "window_calls": pl.Int64(),
    "onset": TIME,
}
FANOUT_EVENT_SCHEMA: dict[str, pl.DataType] = {
    "caller": pl.Utf8(),
    "caller_pod": pl.Utf8(),
    "callees": pl.List(pl.Utf8),  # callees whose calls from this pod went wrong, strongest first
    "signal": pl.Utf8(),  # errors | latency
    "z": pl.Float64(),  # strongest per-callee z
    "onset": TIME,
}
Z_CAP = 50.0
# An edge that kept under this share of its expected calls has stopped (``silent``), not fallen.
STOPPED_SHARE = 0.1
STOPPED_Z = Z_CAP * 0.6  # a stop's strength: categorical, not a measure of how far the share fell
# The per-minute series of a pooled edge the window scorer reads.
_SERIES: tuple[str, ...] = ("count", "errors", "p95_us", "mean_us", "wait_mean_us")


@dataclass(frozen=True)
class TraceParams:
    """Knobs of the trace window scorers (edge anomalies and caller fan-out)."""

    min_z: float = 4.0  # robust z (latency) or Poisson z (errors) an edge must reach
    min_latency_ratio: float = 1.3  # window p95 / baseline p95 a latency anomaly needs
    min_error_rate_increase: float = 0.05  # error-rate rise an error anomaly needs
    min_callees: int = 2  # callees one caller pod must fail towards to fan out
    # A cause at the source (DNS, its network) hits every callee alike: a callee whose z is
    # below this share of the caller's strongest one is noise beside one broken callee.
    fanout_min_share: float = 0.25
    # Some sources record traces only around incidents (Nezha keeps the minutes after each
    # injection): an edge with fewer than min_baseline_minutes recorded baseline minutes is
    # judged against every recorded minute of the history_minutes before the window and the
    # after_minutes after it instead (other incidents included: each touches few edges, and
    # the median holds against a minority of bad minutes).
    min_baseline_minutes: int = 3
    history_minutes: int = 360
    after_minutes: int = 60
    # A caller that makes some of its calls less often for the demand it serves (a code path
    # that returns early or throws before the call): the call's share of the caller's demand
    # (calls into it, or for an entry service its own calls) at most this share of its usual
    # one, against at least min_expected_calls expected. A share near 0 is a stop, read as such.
    max_dropped_share: float = 0.6
    # ... also the calls an edge must have expected for their vanishing to be a stop, and the calls a
    # window minute under which its latency must clear the reference's tail (reference_quantile, below).
    min_expected_calls: float = 10.0
    # Whether the caller's handlers went on after a call is a yes or no per call: a binomial
    # share, often near 1, which the Poisson z above (built for counts) judges too timidly on few
    # calls (0 of 11 usually followed: z 3.2). A share it does not clear min_z on, or with fewer
    # than min_expected_calls expected (sampled traces: a fifth of frontend's few checkouts a
    # minute), is judged by its exact binomial tail against the usual share pooled over the usual
    # minutes' calls (``binomial_tail_z``): 0 of 4 of a share always kept is a clear stop, 0 of 4
    # of one kept 80% of the time is not.
    exact_tail: bool = True
    # A window with fewer than min_expected_calls calls a minute must also lift its p95 above this
    # quantile of the reference minutes' p95: a few sampled calls a minute make a minute's p95 the
    # slowest of a handful, and a callee with a slow path now and then (emailservice's odd 60 ms
    # answer) shows it in a fifth of the minutes, a tail the MAD does not see. Chosen on the real
    # tuning day's sampled views (0.8, 0.9 and 0.95 won 1, 3 and 4 cases, none lost). Its wait
    # between the spans must clear the same quantile of the reference's waits to tell where the
    # time went. 0 turns the check off.
    reference_quantile: float = 0.95


def call_edges(spans: pl.DataFrame) -> pl.DataFrame:
    """One row per cross-service call: time, edge key, latency_us, wait_us (null without a client span), is_error."""
    # Each span with a parent is paired (as row numbers) with the spans of its (trace_id,
    # parent_span_id). The join is on one 64-bit hash of the two strings a side, ~2.5x cheaper
    # than on the strings themselves (the trace id hashed once for both sides); every pair is
    # checked on the strings, and a collision (or a null trace id) makes it join on the
    # strings instead.
    row = pl.int_range(pl.len(), dtype=pl.get_index_type())
    trace = pl.col("trace_id").hash(seed=1)
    # A span's parent_key (null for a root) is also its handler's key: the calls one handler made
    # share it (``followed`` below groups on it, not on the two strings).
    keys = spans.select(row.alias("row"), pl.col("parent_span_id").is_not_null().alias("has_parent"),
                        pl.when(pl.col("parent_span_id").is_not_null())
                        .then(trace ^ pl.col("parent_span_id").hash(seed=2)).alias("parent_key"),
                        (trace ^ pl.col("span_id").hash(seed=2)).alias("own_key"))
    pairs = (keys.filter("has_parent").select(pl.col("row").alias("child"), pl.col("parent_key").alias("key"))
             .join(keys.select(pl.col("row").alias("parent"), pl.col("own_key").alias("key")), on="key")
             .drop("key"))
    child, parent = pairs.get_column("child"), pairs.get_column("parent")
    trace_id = spans.get_column("trace_id")
    exact = ((trace_id.gather(child) == trace_id.gather(parent))
             & (spans.get_column("parent_span_id").gather(child) == spans.get_column("span_id").gather(parent)))
    if not exact.fill_null(False).all():
        children = spans.select(row.alias("child"), "trace_id", "parent_span_id").filter(
            pl.col("parent_span_id").is_not_null())
        parents = spans.select(row.alias("parent"), "trace_id", pl.col("span_id").alias("parent_span_id"))
        pairs = children.join(parents, on=["trace_id", "parent_span_id"]).select("child", "parent")
    service = spans.get_column("service")
    crossing_pairs = pairs.filter(service.gather(pairs.get_column("parent")) != service.gather(pairs.get_column("child")))
    crossing = pl.concat([
        spans.select("start", "service", "pod", "node", "operation", "duration_us", "is_error")[
            crossing_pairs.get_column("child")],
        spans.select(pl.col("service").alias("caller"), pl.col("pod").alias("caller_pod"),
                     pl.col("span_kind").alias("parent_kind"), pl.col("duration_us").alias("parent_duration_us"),
                     pl.col("is_error").alias("parent_error"), pl.col("start").alias("parent_start"))[
            crossing_pairs.get_column("parent")],
        keys.select(pl.col("own_key").alias("parent_key"), pl.col("parent_key").alias("grandparent_key"))[
            crossing_pairs.get_column("parent")],
    ], how="horizontal")
    via_client = pl.col("parent_kind") == "client"
    server_side = crossing.select(
        pl.col("start").alias("time"), "caller", "caller_pod",
        pl.col("service").alias("callee"), pl.col("pod").alias("callee_pod"),
        pl.col("node").alias("callee_node"), "operation",
        pl.when(via_client).then(pl.col("parent_duration_us")).otherwise(pl.col("duration_us")).alias("latency_us"),
        # The caller's client span less the callee's server span of the same call.
        pl.when(via_client).then(pl.col("parent_duration_us") - pl.col("duration_us"))
        .otherwise(None).alias("wait_us"),
        # The caller's client span stands for this call; any other parent's error is its own.
        (pl.col("is_error").fill_null(False) | (via_client & pl.col("parent_error").fill_null(False))).alias("is_error"),
        # The caller's span that made the call (its handler) and the call as that handler saw it.
        pl.when(via_client).then(pl.col("grandparent_key")).otherwise(pl.col("parent_key")).alias("handler"),
        pl.when(via_client).then(pl.col("parent_start")).otherwise(pl.col("start")).alias("call_start"),
    )
    # The calls some server span answered: the parents of a crossing call's span, all the spans
    # of its (trace_id, parent_span_id) when several share them.
    # As flags over the rows (numpy): two is_in look-ups cost several times more.
    crossing_child = np.zeros(spans.height, dtype=bool)
    crossing_child[crossing_pairs.get_column("child").to_numpy()] = True
    answered = np.zeros(spans.height, dtype=bool)
    answered[pairs.get_column("parent").to_numpy()[crossing_child[pairs.get_column("child").to_numpy()]]] = True
    client_only = (
        pl.concat([spans, keys.select(pl.col("parent_key").alias("handler"))], how="horizontal")
        .filter((pl.col("span_kind") == "client") & pl.col("peer_service").is_not_null()
                & (pl.col("peer_service") != pl.col("service")) & ~pl.Series(answered))
        .select(
            pl.col("start").alias("time"), pl.col("service").alias("caller"), pl.col("pod").alias("caller_pod"),
            pl.col("peer_service").alias("callee"),
            pl.lit(None, pl.Utf8).alias("callee_pod"), pl.lit(None, pl.Utf8).alias("callee_node"),
            "operation", pl.col("duration_us").alias("latency_us"), pl.lit(None, pl.Int64).alias("wait_us"),
            pl.col("is_error").fill_null(False).alias("is_error"),
            "handler", pl.col("start").alias("call_start"),
        )
    )
    calls = pl.concat([server_side, client_only])
    # Whether the handler made another call once this one had returned: a handler whose code
    # stops after a call (an exception past it, an error it returns) makes none.
    call_end = pl.col("call_start") + pl.duration(microseconds=pl.col("latency_us"))
    later = pl.col("call_start").max().over("handler")
    return calls.with_columns(
        pl.when(pl.col("handler").is_null()).then(False).otherwise(later > call_end).alias("followed"),
    ).drop("handler", "call_start")


def edge_stats(spans: pl.DataFrame) -> pl.DataFrame:
    """Per-minute statistics of every call edge (the stored trace feature)."""
    if spans.height == 0:
        return pl.DataFrame(schema=EDGE_STATS_SCHEMA)
    # Contiguous columns: the reader's come in pieces, on which the joins below cost ~20% more.
    calls = call_edges(spans.rechunk())
    return (
        calls.with_columns(pl.col("time").dt.truncate("1m"), pl.col("latency_us").cast(pl.Float64))
        .group_by("time", *EDGE_KEY)
        .agg(
            pl.len().alias("count"),
            pl.col("is_error").sum().alias("errors"),
            pl.col("latency_us").quantile(0.5, "nearest").alias("p50_us"),
            pl.col("latency_us").quantile(0.95, "nearest").alias("p95_us"),
            pl.col("latency_us").mean().alias("mean_us"),
            pl.col("wait_us").mean().alias("wait_mean_us"),
            pl.col("followed").sum().alias("followed"),
        )
        # The whole key: group_by's row order varies from run to run, and a rebuild must
        # rewrite the same file (float sums downstream depend on the order).
        .sort("time", *EDGE_KEY, nulls_last=True)
        .cast(pl.Schema(EDGE_STATS_SCHEMA))
    )


def call_graph(stats: pl.DataFrame) -> nx.DiGraph:
    """Service call graph (caller -> callee) with total calls as edge attribute."""
    graph = nx.DiGraph()
    totals = stats.group_by("caller", "callee").agg(pl.col("count").sum()).sort("caller", "callee")  # a fixed node order
    for caller, callee, count in totals.iter_rows():
        graph.add_edge(caller, callee, calls=int(count))
    return graph


def score_trace_window(
    stats: pl.DataFrame,
    *,
    start: datetime,
    end: datetime,
    baseline_start: datetime,
    params: TraceParams = TraceParams(),
    exclude: Sequence[Span] = (),
) -> pl.DataFrame:
    """Anomalous callee edges of [start, end] against [baseline_start, start), caller pods pooled.

    Rows in ``exclude`` spans before the window (other incidents) are not baseline.
    """
    events = _edge_anomalies(stats, key=CALLEE_KEY, start=start, end=end, baseline_start=baseline_start,
                             params=params, exclude=exclude)
    if not events:
        return pl.DataFrame(schema=TRACE_EVENT_SCHEMA)
    return strongest_first(pl.DataFrame(events, schema=TRACE_EVENT_SCHEMA), "caller", "callee", "callee_pod", "signal")


def caller_fanout(
    stats: pl.DataFrame,
    *,
    start: datetime,
    end: datetime,
    baseline_start: datetime,
    params: TraceParams = TraceParams(),
    exclude: Sequence[Span] = (),
) -> pl.DataFrame:
    """Caller pods whose calls to several different callees went wrong at once.

    When one pod's outgoing calls fail or slow down towards many services (DNS failure,
    network fault at the source) the callees are victims, not causes: the pattern points
    at the caller pod.
    """
    key = ("caller", "caller_pod", "callee")
    events = _edge_anomalies(stats.filter(pl.col("caller_pod").is_not_null()), key=key, start=start, end=end,
                             baseline_start=baseline_start, params=params, exclude=exclude)
    schema: dict[str, pl.DataType] = {**{k: pl.Utf8() for k in key}, "signal": pl.Utf8(), "z": pl.Float64(),
                                      "onset": TIME}
    frame = pl.DataFrame([{k: e[k] for k in schema} for e in events if e["signal"] != "silent"], schema=schema)
    # A callee that also fails for another caller service is broken itself: it does not
    # count towards this caller's fan-out.
    # Nor does a callee whose own outgoing calls went wrong: it passes a downstream fault on.
    shared = frame.group_by("callee", "signal").agg(pl.col("caller").n_unique().alias("callers"))
    relaying = set(frame.get_column("caller").unique())
    frame = (frame.join(shared, on=["callee", "signal"])
             .filter((pl.col("callers") == 1) & ~pl.col("callee").is_in(list(relaying))))
    strongest = pl.col("z").max().over("caller", "caller_pod", "signal")
    fanout = (
        frame.filter(pl.col("z") >= params.fanout_min_share * strongest)
        .sort("z", "callee", descending=[True, False])  # tied z (capped) by name: the same list every run
        .group_by("caller", "caller_pod", "signal")
        .agg(pl.col("callee").unique(maintain_order=True).alias("callees"), pl.col("z").max(), pl.col("onset").min())
        .filter(pl.col("callees").list.len() >= params.min_callees)
    )
    return strongest_first(fanout.select(list(FANOUT_EVENT_SCHEMA)).cast(pl.Schema(FANOUT_EVENT_SCHEMA)),
                           "caller", "caller_pod", "signal")


def call_shares(
    stats: pl.DataFrame,
    *,
    start: datetime,
    end: datetime,
    baseline_start: datetime,
    params: TraceParams = TraceParams(),
    exclude: Sequence[Span] = (),
) -> pl.DataFrame:
    """Each call's share of its caller's demand in the window against its usual share.

    The demand is the calls into the caller; for an entry service, which nobody calls, its own
    calls. Per (caller, callee): the window's ``calls``, the caller's ``demand``, the usual
    ``share`` (the median over the baseline's recorded minutes, or where that is thin over the
    history the edge anomalies use), ``expected`` calls, their ``ratio`` and a Poisson ``z`` of
    the shortfall, with the window's minutes (``time``) and ``minute_shares``. Shares, not
    counts: a source that records part of a minute, or a quieter hour, moves the caller's demand
    and its calls alike.
    """
    per = stats.group_by("time", "caller", "callee").agg(pl.col("count").sum())
    called = set(per.get_column("callee").unique())
    demand = (per.group_by("time", "caller").agg(pl.col("count").sum().alias("outgoing"))
              .join(per.group_by("time", "callee").agg(pl.col("count").sum().alias("incoming"))
                    .rename({"callee": "caller"}), on=["time", "caller"], how="left")
              .with_columns(pl.when(pl.col("caller").is_in(list(called))).then(pl.col("incoming").fill_null(0))
                            .otherwise(pl.col("outgoing")).alias("demand"))
              .select("time", "caller", "demand"))
    # Every (minute, caller, callee) the caller had demand in: a minute without the call is a 0 share.
    pairs = per.select("caller", "callee").unique()
    shares = (demand.join(pairs, on="caller").join(per, on=["time", "caller", "callee"], how="left")
              .with_columns(pl.col("count").fill_null(0)).filter(pl.col("demand") > 0))
    return _against_usual_share(shares, start=start, end=end, baseline_start=baseline_start, params=params,
                                exclude=exclude)


def followed_shares(
    stats: pl.DataFrame,
    *,
    start: datetime,
    end: datetime,
    baseline_start: datetime,
    params: TraceParams = TraceParams(),
    exclude: Sequence[Span] = (),
) -> pl.DataFrame:
    """Per (caller, callee): the share of its calls after which the caller's handler made another call.

    The same columns as ``call_shares``, with ``count`` the calls followed by another and
    ``demand`` the calls made.
    """
    per = (stats.group_by("time", "caller", "callee")
           .agg(pl.col("followed").sum().alias("count"), pl.col("count").sum().alias("demand"))
           .filter(pl.col("demand") > 0))
    return _against_usual_share(per, start=start, end=end, baseline_start=baseline_start, params=params,
                                exclude=exclude)


def _against_usual_share(shares: pl.DataFrame, *, start: datetime, end: datetime, baseline_start: datetime,
                         params: TraceParams, exclude: Sequence[Span]) -> pl.DataFrame:
    """Per (caller, callee) of per-minute ``count`` out of ``demand``: the window's share against the usual one."""
    window_start = window_first_minute(start)
    in_window = (pl.col("time") >= window_start) & (pl.col("time") <= end)
    window = shares.filter(in_window).group_by("caller", "callee").agg(
        pl.col("count").sum().alias("calls"), pl.col("demand").sum(),
        pl.col("time").sort(), (pl.col("count") / pl.col("demand")).sort_by("time").alias("minute_shares"))
    spans = bucket_spans(spans_before(exclude, window_start=window_start))
    baseline = drop_spans(shares.filter((pl.col("time") >= baseline_start) & (pl.col("time") < window_start)), spans)
    history = shares.filter(~in_window & pl.col("time").is_between(
        *history_span(window_start, end, history_minutes=params.history_minutes, after_minutes=params.after_minutes)))
    usual = [part.group_by("caller", "callee").agg((pl.col("count") / pl.col("demand")).median().alias(name),
                                                   pl.len().alias(f"{name}_minutes"),
                                                   pl.col("count").sum().alias(f"{name}_count"),
                                                   pl.col("demand").sum().alias(f"{name}_demand"))
             for part, name in ((baseline, "baseline_share"), (history, "history_share"))]
    # The usual share, and the calls it was pooled from (``usual_count`` of ``usual_demand``, for
    # an exact tail), come from the baseline where it holds enough minutes, else from the history.
    from_baseline = pl.col("baseline_share_minutes").fill_null(0) >= params.min_baseline_minutes
    chosen = {"share": "share", "usual_count": "share_count", "usual_demand": "share_demand"}
    return (window.join(usual[0], on=["caller", "callee"], how="left").join(usual[1], on=["caller", "callee"], how="left")
            .with_columns(*(pl.when(from_baseline).then(pl.col(f"baseline_{source}"))
                            .otherwise(pl.col(f"history_{source}")).alias(name) for name, source in chosen.items()))
            .filter(pl.col("share") > 0)
            .with_columns((pl.col("share") * pl.col("demand")).alias("expected"))
            .with_columns((pl.col("calls") / pl.col("expected")).alias("ratio"),
                          ((pl.col("expected") - pl.col("calls")) / (pl.col("expected") + 1).sqrt()).alias("z"))
            .sort("caller", "callee"))


def dropped_calls(
    stats: pl.DataFrame,
    *,
    start: datetime,
    end: datetime,
    baseline_start: datetime,
    params: TraceParams = TraceParams(),
    exclude: Sequence[Span] = (),
) -> pl.DataFrame:
    """Calls a caller makes less often for the demand it serves: its code path stopped reaching them.

    A release that returns early, or an exception thrown before a downstream call, leaves the
    caller's demand as it was and its calls to some callees fewer: the call's share of that
    demand (``call_shares``) falls. A drop to under a tenth is left to the edge's stop
    (``score_trace_window``).
    """
    judged = call_shares(stats, start=start, end=end, baseline_start=baseline_start, params=params, exclude=exclude)
    return _shortfalls(judged.filter(pl.col("ratio") >= STOPPED_SHARE), window_start=window_first_minute(start),
                       calls="calls", params=params)


def stopped_after(
    stats: pl.DataFrame,
    *,
    start: datetime,
    end: datetime,
    baseline_start: datetime,
    params: TraceParams = TraceParams(),
    exclude: Sequence[Span] = (),
) -> pl.DataFrame:
    """Calls after which the caller's handlers stopped going on to their next call.

    An exception thrown in the caller's code past a call, or an error it returns there, ends
    the handler: the calls it made before still happen, the ones after do not. Where the
    handler is one of several that make the same call, the drop in its later calls is diluted
    among the others' (``dropped_calls`` misses it); the share of calls followed by another
    (``followed_shares``) is not. So is a caller that gives up after a failed call: the ranker
    tells the two apart by the callee's own trouble.
    """
    judged = followed_shares(stats, start=start, end=end, baseline_start=baseline_start, params=params,
                             exclude=exclude)
    if params.exact_tail:
        judged = _exact_tail_where_unsure(judged, params=params)
    return _shortfalls(judged, window_start=window_first_minute(start), calls="demand", params=params)


def _exact_tail_where_unsure(judged: pl.DataFrame, *, params: TraceParams) -> pl.DataFrame:
    """Followed shares that fell far enough for ``_shortfalls`` but that the Poisson z does not admit
    (under ``min_expected_calls`` expected, or under ``min_z``): ``z`` from the exact binomial tail
    and ``expected`` raised to the floor, so that ``_shortfalls`` judges them by it. Shares it admits
    keep their z; shares that did not fall that far are left as they are (no tail to compute)."""
    sure = (pl.col("expected") >= params.min_expected_calls) & (pl.col("z") >= params.min_z)
    unsure_mask = ~sure & (pl.col("ratio") <= params.max_dropped_share)
    unsure = judged.filter(unsure_mask)
    if unsure.is_empty():
        return judged
    tail = [binomial_tail_z(calls=int(row["calls"]), demand=int(row["demand"]),
                            usual=(int(row["usual_count"] or 0), int(row["usual_demand"] or 0)))
            for row in unsure.iter_rows(named=True)]
    rejudged = unsure.with_columns(pl.Series("z", tail, dtype=pl.Float64),
                                   pl.max_horizontal("expected", pl.lit(params.min_expected_calls)).alias("expected"))
    return pl.concat([judged.filter(~unsure_mask), rejudged]).sort("caller", "callee")


def binomial_tail_z(*, calls: int, demand: int, usual: tuple[int, int]) -> float:
    """The normal quantile of P(X <= calls), X ~ Binomial(demand, p), p the usual share pooled over
    ``usual`` = (followed, made) calls with one call each way of prior; capped at ``Z_CAP``.

    >>> round(binomial_tail_z(calls=0, demand=4, usual=(32, 32)), 1)
    4.8
    """
    from scipy.special import bdtr, ndtri  # 0.3 s to load: only when a share is judged by it

    followed, made = usual
    share = (followed + 1) / (made + 2)
    tail = float(bdtr(calls, demand, share))
    return Z_CAP if tail <= 0.0 else min(Z_CAP, max(0.0, -float(ndtri(tail))))


def _shortfalls(judged: pl.DataFrame, *, window_start: datetime, calls: str, params: TraceParams) -> pl.DataFrame:
    """Events of the shares (``_against_usual_share``) that fell clearly, onset at the first minute below midway.

    ``calls``: the column counted as the window's calls. Under a tenth of the usual share is a
    stop, as strong as an edge's (``_stop``).
    """
    found = judged.filter((pl.col("expected") >= params.min_expected_calls) & (pl.col("z") >= params.min_z)
                          & (pl.col("ratio") <= params.max_dropped_share))
    rows = []
    for row in found.iter_rows(named=True):
        midway = row["share"] * (1.0 + row["ratio"]) / 2
        below = [t for t, share in zip(row["time"], row["minute_shares"]) if share < midway]
        z = STOPPED_Z if row["ratio"] < STOPPED_SHARE else min(float(row["z"]), Z_CAP)
        rows.append({"caller": row["caller"], "callee": row["callee"], "z": z, "ratio": float(row["ratio"]),
                     "window_calls": int(row[calls]), "onset": below[0] if below else window_start})
    return strongest_first(pl.DataFrame(rows, schema=DROPPED_EVENT_SCHEMA), "caller", "callee")


def _edge_anomalies(
    stats: pl.DataFrame,
    *,
    key: tuple[str, ...],
    start: datetime,
    end: datetime,
    baseline_start: datetime,
    params: TraceParams,
    exclude: Sequence[Span] = (),
) -> list[dict]:
    """Latency, error and vanished-traffic anomalies of every edge identified by ``key``."""
    window_start = window_first_minute(start)
    spans = bucket_spans(spans_before(exclude, window_start=window_start))
    sub = _pool(drop_spans(stats.filter((pl.col("time") >= baseline_start) & (pl.col("time") <= end)), spans), key)
    if sub.height == 0:
        return []
    history = _history(stats, key=key, window_start=window_start, end=end, params=params)
    window_start_us = epoch_us(window_start)
    # Minutes in which the tracer recorded anything at all. Some sources keep traces only
    # around incidents, or lose files: a minute with no span anywhere is unrecorded, not a
    # minute in which every call stopped, and it counts neither as baseline nor as window.
    recorded = sub.group_by("time").agg(pl.col("count").sum()).filter(pl.col("count") > 0).get_column("time")
    window_recorded = int((recorded >= window_start).sum())
    if window_recorded == 0:
        return []
    baseline_minutes = max(1.0, min(clean_minutes(baseline_start, window_start, spans),
                                    float((recorded < window_start).sum())))
    window_minutes = max(1.0, min((end - window_start).total_seconds() / 60 + 1, float(window_recorded)))
    # A stop is read over the window, or from its second minute: a fault injected late in the
    # first minute (05:09:50) leaves that minute mostly the calls made before it.
    second_minute = window_start + timedelta(minutes=1)
    stop_spans = ((window_start_us, window_minutes, window_start),
                  (epoch_us(second_minute), min(window_minutes - 1, float((recorded >= second_minute).sum())),
                   second_minute))
    grouped = sub.sort("time").group_by(*key, maintain_order=True).agg(
        pl.col("time").dt.epoch("us").alias("time_us"), *_series_lists(), pl.col("callee_node").drop_nulls().last())
    events: list[dict] = []
    for row in grouped.iter_rows(named=True):
        times = np.array(row["time_us"], dtype=np.int64)
        series = {name: np.array(row[name], dtype=float) for name in _SERIES}
        in_window = times >= window_start_us
        edge = {k: row[k] for k in key} | {"callee_node": row["callee_node"]}
        edge_baseline_minutes = baseline_minutes
        from_history = False
        older = history.get(tuple(row[k] for k in key))
        if int((~in_window).sum()) < params.min_baseline_minutes and older is not None:
            # A thin baseline: the edge's recorded history stands in for it.
            minutes = len(older["count"])
            times = np.concatenate([np.full(minutes, window_start_us - 1, dtype=np.int64), times[in_window]])
            series = {name: np.concatenate([older[name], values[in_window]]) for name, values in series.items()}
            in_window = times >= window_start_us
            edge_baseline_minutes = float(minutes)
            from_history = True
        counts, errors, p95 = series["count"], series["errors"], series["p95_us"]
        base_calls, win_calls = counts[~in_window].sum(), counts[in_window].sum()
        stop = _stop(counts, times, base_calls=base_calls, baseline_minutes=edge_baseline_minutes,
                     spans=stop_spans, min_expected_calls=params.min_expected_calls)
        if stop is not None:
            events.append({**edge, "signal": "silent", "z": STOPPED_Z, "ratio": stop[0] / base_calls,
                           "window_calls": int(win_calls), "onset": stop[1]})
            continue
        if in_window.sum() == 0 or (~in_window).sum() < 3:
            continue
        first_in_window = int(np.flatnonzero(in_window)[0])
        median, scale = robust_location_scale(p95[~in_window], ordered=not from_history, spread_floor=not from_history)
        window_p95 = float(np.median(p95[in_window]))
        latency_z = (window_p95 - median) / scale
        # A window's measures are medians of per-minute ones: their raggedness is that of a minute's calls.
        minute_calls = win_calls / int(in_window.sum())
        if (latency_z >= params.min_z and median > 0 and window_p95 / median >= params.min_latency_ratio
                and _beyond_habit(window_p95, reference=p95[~in_window], calls=minute_calls, params=params)):
            events.append({**edge, "signal": "latency", "z": min(latency_z, Z_CAP), "ratio": window_p95 / median,
                           "window_calls": int(win_calls),
                           "onset": _onset(times, p95, in_window, threshold=median + 0.5 * (window_p95 - median),
                                           fallback=first_in_window),
                           **_wait_rise(series["mean_us"], series["wait_mean_us"], in_window,
                                        calls=minute_calls, params=params)})
        base_rate = errors[~in_window].sum() / max(base_calls, 1.0)
        win_errors = errors[in_window].sum()
        expected = base_rate * win_calls
        error_z = (win_errors - expected) / np.sqrt(expected + 1.0)
        win_rate = win_errors / max(win_calls, 1.0)
        if error_z >= params.min_z and win_rate - base_rate >= params.min_error_rate_increase:
            events.append({**edge, "signal": "errors", "z": min(float(error_z), Z_CAP), "ratio": win_rate,
                           "window_calls": int(win_calls),
                           "onset": _onset(times, errors / np.maximum(counts, 1), in_window,
                                           threshold=base_rate + 0.5 * (win_rate - base_rate),
                                           fallback=first_in_window)})
    return events


def _beyond_habit(window_value: float, *, reference: np.ndarray, calls: float, params: TraceParams) -> bool:
    """Whether a window's per-minute measure (p95, mean wait), over ``calls`` calls a minute, lies
    beyond what the edge's reference minutes reach now and then (``TraceParams.reference_quantile``);
    a window of many calls a minute always does."""
    if params.reference_quantile <= 0 or calls >= params.min_expected_calls:
        return True
    return window_value > float(np.quantile(reference, params.reference_quantile))


def _stop(counts: np.ndarray, times: np.ndarray, *, base_calls: float, baseline_minutes: float,
          spans: Sequence[tuple[int, float, datetime]], min_expected_calls: float) -> tuple[float, datetime] | None:
    """The calls seen and the onset of an edge's stop, if any: ten expected calls and almost none
    seen (under a tenth) from the first of ``spans`` (since epoch µs, recorded minutes, onset) that has them."""
    for since_us, minutes, onset in spans:
        expected = base_calls * minutes / max(1.0, baseline_minutes)
        calls = float(counts[times >= since_us].sum())
        if minutes >= 1 and expected >= min_expected_calls and calls < STOPPED_SHARE * expected:
            return calls, onset
    return None


def _history(stats: pl.DataFrame, *, key: tuple[str, ...], window_start: datetime, end: datetime,
             params: TraceParams) -> dict[tuple, dict[str, np.ndarray]]:
    """Per edge, the ``_SERIES`` of its recorded minutes around the window but not in it."""
    lo, hi = history_span(window_start, end, history_minutes=params.history_minutes, after_minutes=params.after_minutes)
    around = stats.filter(pl.col("time").is_between(lo, hi) & ~pl.col("time").is_between(window_start, end))
    if around.height == 0:
        return {}
    pooled = _pool(around, key).filter(pl.col("count") > 0).sort("time")
    grouped = pooled.group_by(*key, maintain_order=True).agg(*_series_lists())
    return {tuple(row[k] for k in key): {name: np.array(row[name], dtype=float) for name in _SERIES}
            for row in grouped.iter_rows(named=True)}


def _series_lists() -> list[pl.Expr]:
    """The ``_SERIES`` of a group as float lists, NaN for a null (a minute without a timed wait)."""
    return [pl.col(name).cast(pl.Float64).fill_null(float("nan")) for name in _SERIES]


def _wait_rise(mean: np.ndarray, wait: np.ndarray, in_window: np.ndarray, *, calls: float,
               params: TraceParams) -> dict[str, float | None]:
    """``wait_share`` and ``wait_added_us`` of a slow edge with ``calls`` calls a window minute
    (None: the spans do not tell).

    Medians of the per-minute means before and in the window; the wait is the client span
    less its server child, so mean latency less mean wait is the callee's own time. A window of
    few calls must lift its wait beyond the reference minutes' habit, as its p95 (``_beyond_habit``):
    a few calls' mean wait is as ragged as their p95, and a wait the fault-free minutes reach now
    and then does not tell where the time went.
    """
    rise = float(np.nanmedian(mean[in_window]) - np.nanmedian(mean[~in_window]))
    before = wait[~in_window]
    reference = before[np.isfinite(before)]
    if not np.isfinite(wait[in_window]).any() or reference.size == 0 or not rise > 0:
        return {"wait_share": None, "wait_added_us": None}
    window_wait = float(np.nanmedian(wait[in_window]))
    if not _beyond_habit(window_wait, reference=reference, calls=calls, params=params):
        return {"wait_share": None, "wait_added_us": None}
    added = window_wait - float(np.median(reference))
    return {"wait_share": min(1.0, max(0.0, added / rise)), "wait_added_us": added}


def _pool(stats: pl.DataFrame, key: tuple[str, ...]) -> pl.DataFrame:
    """Per-minute stats merged over the columns not in ``key`` (p95 and means as call-weighted means)."""
    timed = pl.col("wait_mean_us").is_not_null()
    return stats.group_by("time", *key).agg(
        pl.col("count").sum(),
        pl.col("errors").sum(),
        ((pl.col("p95_us") * pl.col("count")).sum() / pl.col("count").sum()).alias("p95_us"),
        ((pl.col("mean_us") * pl.col("count")).sum() / pl.col("count").sum()).alias("mean_us"),
        # Over the rows that timed the wait only; none of them: null, not 0/0.
        pl.when(timed.any()).then((pl.col("wait_mean_us") * pl.col("count")).filter(timed).sum()
                                  / pl.col("count").filter(timed).sum()).alias("wait_mean_us"),
        pl.col("callee_node").drop_nulls().first(),
    )


def _onset(times: np.ndarray, values: np.ndarray, in_window: np.ndarray, *, threshold: float, fallback: int):
    hits = np.flatnonzero(in_window & (values >= threshold))
    index = int(hits[0]) if hits.size else fallback
    return from_epoch_us(times[index])


def propagation_scores(events: pl.DataFrame, *, alpha: float = 0.85) -> dict[str, float]:
    """Personalised PageRank of services over the anomaly subgraph, max-normalised to 1.

    Edges point from caller to callee and are weighted by their anomaly z, so rank
    flows down the call chain and settles on the most downstream anomalous service;
    the personalisation is each service's strongest incoming anomaly.
    """
    if events.height == 0:
        return {}
    edges = events.group_by("caller", "callee").agg(pl.col("z").max()).sort("caller", "callee")  # a fixed graph order
    graph = nx.DiGraph()
    for caller, callee, z in edges.iter_rows():
        graph.add_edge(caller, callee, weight=float(z))
    incoming = {node: 0.0 for node in graph.nodes}
    for _, callee, z in edges.iter_rows():
        incoming[callee] = max(incoming[callee], float(z))
    if sum(incoming.values()) <= 0:
        return {}
    rank = nx.pagerank(graph, alpha=alpha, personalization=incoming, weight="weight")
    top = max(rank.values())
    return {node: value / top for node, value in rank.items()}


class TraceDetector:
    """Per-minute call-edge statistics at build time; edge anomalies and caller fan-out at score time."""

    Params = TraceParams
    name = "trace"
    sequential = False
    raw = RawInput(sources=("trace",), per_hour=True, rows_read="spans_read")
    feature_tables = (FeatureTable("trace_edges", EDGE_STATS_SCHEMA),)
    event_schemas = {"trace": TRACE_EVENT_SCHEMA, "fanout": FANOUT_EVENT_SCHEMA, "dropped": DROPPED_EVENT_SCHEMA,
                     "stopped_after": DROPPED_EVENT_SCHEMA}

    def __init__(self, params: TraceParams = TraceParams()) -> None:
        self.params = params

    def build(self, chunks: Iterable[Mapping[str, pl.DataFrame | None]], *, state_dir: Path | None = None,
              ) -> dict[str, pl.DataFrame]:
        """Edge statistics of one day's hour chunks ``{"trace": spans}``.

        The next hour is read on a thread while this one's edges are computed (``read_ahead``).
        """
        parts = [edge_stats(spans) for chunk in read_ahead(chunks, name="trace-read")
                 if (spans := chunk.get("trace")) is not None]
        return {"trace_edges": pl.concat(parts) if parts else pl.DataFrame(schema=EDGE_STATS_SCHEMA)}

    def context_spans(self, *, start: datetime, end: datetime, baseline_start: datetime) -> list[Span]:
        """The history that stands in for a thin baseline (traces recorded only around incidents)."""
        return [history_span(start, end, history_minutes=self.params.history_minutes,
                             after_minutes=self.params.after_minutes)]

    def score(self, features: Mapping[str, pl.DataFrame], *, start: datetime, end: datetime,
              baseline_start: datetime, system: SystemSpec, exclude: Sequence[Span] = ()) -> dict[str, pl.DataFrame]:
        edges = features["trace_edges"]
        return {
            "trace": score_trace_window(edges, start=start, end=end, baseline_start=baseline_start,
                                        params=self.params, exclude=exclude),
            "fanout": caller_fanout(edges, start=start, end=end, baseline_start=baseline_start, params=self.params,
                                    exclude=exclude),
            "dropped": dropped_calls(edges, start=start, end=end, baseline_start=baseline_start, params=self.params,
                                     exclude=exclude),
            "stopped_after": stopped_after(edges, start=start, end=end, baseline_start=baseline_start,
                                           params=self.params, exclude=exclude),
        }
