"""One hour of k6 load on frontend turned into per-request span trees (vectorised with numpy).

For every request template (topology.TEMPLATES) all traces of the hour are built at once as
(traces x template nodes) arrays: pods are chosen per service, fault effects applied per call,
connections refused drop the callee's subtree, a handler failing in its own code skips the calls
after the failure, errors propagate to the callers, and durations
are summed bottom-up so parents always contain their children; k6's users wait for their answers,
so a minute whose answers are slow loses requests (``closed_loop_share``). The result is a flat
``SpanBatch`` (one row per span) plus ``CallRecords`` for the APM aggregation.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from rca.taxonomy import CLIENT_ONLY_SERVICES
from simulate.effects import (
    CHRONIC_INJECTED_SHARE,
    EARLY_RETURN_KINDS,
    POD_ID,
    CallEffect,
    ErrorKind,
    edge_effects,
    server_effects,
)
from simulate.schedule import Fault
from simulate.topology import ALL_PODS, TEMPLATES, Placement, RequestTemplate, pods_of

CST_OFFSET_S = 8 * 3600
# k6's virtual users send a request, wait for its answer, think, and send the next: a closed loop,
# so when answers slow down every user sends fewer requests, and every service called loses
# traffic with the entry. The think time fits the real tuning day (Nezha 2022-08-22): frontend's
# rrt 39x gave 0.23x its requests (currencyservice CPU stress), 10x gave 0.61x (its network delay).
THINK_S = 0.5
# A minute whose mean answer is under this multiple of the hour's usual one keeps every request:
# noise and blips are no wait a user notices (and a world without slow minutes is drawn as before).
BACKOFF_MIN_SLOWDOWN = 1.5


@dataclass
class SpanBatch:
    """Flat spans of one hour; object arrays hold strings."""

    trace_hi: np.ndarray  # uint64, high half of the 128-bit trace id
    trace_lo: np.ndarray
    span_id: np.ndarray  # uint64
    parent_id: np.ndarray  # uint64, 0 for roots
    service: np.ndarray  # process.serviceName
    pod: np.ndarray
    node: np.ndarray
    kind: np.ndarray  # server | client
    operation: np.ndarray
    callee: np.ndarray  # service called (client spans) or serving (server spans)
    callee_pod: np.ndarray  # pod called (client spans) or serving (server spans)
    start_us: np.ndarray  # int64 µs since epoch
    dur_us: np.ndarray  # int64 µs
    err_kind: np.ndarray  # int8 ErrorKind, own or propagated from a child
    fail_callee: np.ndarray  # service whose failure this span reports ("" when ok)
    origin_kind: np.ndarray  # int8 ErrorKind at the origin of the failure
    origin_callee: np.ndarray  # service where the failure originated
    http_path: np.ndarray  # root spans: request path; "" otherwise
    http_method: np.ndarray
    http_status: np.ndarray  # int16, root spans only
    tolerated: np.ndarray  # bool: a client span whose failure its caller shrugs off (``SpanNode.tolerated``)

    def __len__(self) -> int:
        return len(self.span_id)


@dataclass
class CallRecords:
    """Calls that reached a pod (for APM): time, pod id (topology.ALL_PODS), latency, error kind."""

    t_s: np.ndarray
    pod_id: np.ndarray
    dur_us: np.ndarray
    err_kind: np.ndarray


def minute_load(*, minutes_s: np.ndarray, traces_per_hour: float) -> np.ndarray:
    """Expected traces per minute: diurnal k6 load, low in the Beijing night."""
    cst_hour = ((minutes_s + CST_OFFSET_S) % 86400) / 3600.0
    diurnal = 1.0 + 0.35 * np.sin(2 * np.pi * (cst_hour - 9.0) / 24.0)
    return traces_per_hour / 60.0 * diurnal


def _children(template: RequestTemplate) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in template.nodes]
    for j, node in enumerate(template.nodes):
        if node.parent >= 0:
            kids[node.parent].append(j)
    return kids


@dataclass
class _Built:
    """One template's traces of the hour: spans, APM calls, and per trace its minute and answer time."""

    flat: dict[str, np.ndarray]
    calls: CallRecords
    span_trace: np.ndarray  # trace index of each span
    call_trace: np.ndarray  # trace index of each call
    # Per trace drawn (``kept`` leaves these whole: the two indexes above point into them).
    minute: np.ndarray  # its minute of the hour
    root_us: np.ndarray  # the answer's time (the root span's duration)

    def kept(self, keep: np.ndarray) -> _Built:
        """Only the traces ``keep`` marks."""
        spans, calls = keep[self.span_trace], keep[self.call_trace]
        return _Built(flat={k: v[spans] for k, v in self.flat.items()},
                      calls=CallRecords(*(getattr(self.calls, f)[calls] for f in ("t_s", "pod_id", "dur_us", "err_kind"))),
                      span_trace=self.span_trace[spans], call_trace=self.call_trace[calls],
                      minute=self.minute, root_us=self.root_us)


def closed_loop_share(*, minute_us: np.ndarray, usual_us: float) -> np.ndarray:
    """Per minute, the share of its requests k6's users still send when answers take ``minute_us`` on average."""
    slow = minute_us >= BACKOFF_MIN_SLOWDOWN * usual_us
    return np.where(slow, (THINK_S + usual_us / 1e6) / (THINK_S + minute_us / 1e6), 1.0)


def _closed_loop(built: list[_Built], *, rng: np.random.Generator) -> list[_Built]:
    """The hour's traces less those k6's waiting users never sent (``closed_loop_share``)."""
    total, count = np.zeros(60), np.zeros(60)
    for b in built:
        np.add.at(total, b.minute, b.root_us)
        np.add.at(count, b.minute, 1)
    busy = count > 0
    if not busy.any():
        return built
    mean = np.where(busy, total / np.maximum(count, 1), 0.0)
    share = closed_loop_share(minute_us=mean, usual_us=float(np.median(mean[busy])))
    if (share >= 1.0).all():
        return built
    return [b.kept(rng.random(len(b.minute)) < share[b.minute]) for b in built]


def _build_template(template: RequestTemplate, *, t0_us: np.ndarray, minute: np.ndarray, traced: np.ndarray,
                    pace: np.ndarray, faults: list[Fault], placement: Placement,
                    pods_on_node: dict[str, tuple[str, ...]], strength: float, rng: np.random.Generator) -> _Built:
    """The requests of ``template`` that start at ``t0_us`` (µs since epoch; ``minute``: each one's minute of
    the hour): APM calls of every one, spans of those ``traced`` marks. ``pace`` scales each pod's own
    time in each minute (pod id x minute of the hour)."""
    n, nodes = len(t0_us), template.nodes
    s_count = len(nodes)
    t_s = t0_us / 1e6
    services = sorted({nd.service for nd in nodes if nd.service != "redis"} | {nd.callee for nd in nodes})
    chosen = {svc: np.array([POD_ID[p] for p in pods_of(svc)], dtype=np.int16)[
        rng.integers(0, len(pods_of(svc)), n)] for svc in services}
    kids = _children(template)
    place = {c: k for children in kids for k, c in enumerate(children)}  # a call's place among its siblings

    own = np.zeros((n, s_count))
    present = np.zeros((n, s_count), dtype=bool)
    refused = np.zeros((n, s_count), dtype=bool)
    kind = np.zeros((n, s_count), dtype=np.int8)
    proc_pod = np.zeros((n, s_count), dtype=np.int16)
    callee_pod = np.zeros((n, s_count), dtype=np.int16)
    # Per server span: the place of the first call it does not make (past the last: all made).
    made_before = np.full((n, s_count), s_count, dtype=np.int64)
    # What each span reports (its own error, else its first failing call's; a tolerated call's
    # failure stays with it), which service it blames and where the failure began. Decided once
    # per span, after its subtree (nodes come depth first: a call's subtree precedes its next
    # sibling), when its caller's handler asks whether to go on, or at the end.
    kind_out = np.zeros((n, s_count), dtype=np.int8)
    fail_callee = np.full((n, s_count), "", dtype=object)
    origin_callee = np.full((n, s_count), "", dtype=object)
    decided: set[int] = set()

    def outcome(j: int) -> np.ndarray:
        """Whether the span at node ``j`` (made, then failed itself or below) returned an error to its caller."""
        if j not in decided:
            decided.add(j)
            nd = nodes[j]
            kind_out[:, j] = kind[:, j]
            for c in kids[j]:
                if nodes[c].tolerated:
                    continue
                child_fail = outcome(c) & (kind_out[:, j] == 0)
                kind_out[:, j] = np.where(child_fail, kind_out[:, c], kind_out[:, j])
                direct = nodes[c].callee if nodes[c].kind == "client" else fail_callee[:, c]
                fail_callee[:, j] = np.where(child_fail, direct, fail_callee[:, j])
                origin_callee[:, j] = np.where(child_fail, origin_callee[:, c], origin_callee[:, j])
            own_fail = kind[:, j] > 0
            if nd.kind == "client":
                fail_callee[:, j] = np.where(own_fail, nd.callee, fail_callee[:, j])
                origin_callee[:, j] = np.where(own_fail, nd.callee, origin_callee[:, j])
            else:
                origin_callee[:, j] = np.where(own_fail, nd.service, origin_callee[:, j])
        return present[:, j] & (kind_out[:, j] > 0)

    for j, nd in enumerate(nodes):
        eff = CallEffect.neutral(n)
        if nd.kind == "server":
            proc_pod[:, j] = chosen[nd.service]
            callee_pod[:, j] = chosen[nd.service]
            server_effects(eff, faults, t_s=t_s, service=nd.service, pods=chosen[nd.service],
                           pods_on_node=pods_on_node, strength=strength)
        else:
            caller = "cartservice" if nd.service == "redis" else nd.service
            proc_pod[:, j] = chosen["redis-cart"] if nd.service == "redis" else chosen[caller]
            callee_pod[:, j] = chosen[nd.callee]
            edge_effects(eff, faults, t_s=t_s, caller=caller, caller_pods=chosen[caller], callee=nd.callee,
                         callee_pods=chosen[nd.callee], strength=strength, rng=rng)
            if nd.callee in CLIENT_ONLY_SERVICES:
                server_effects(eff, faults, t_s=t_s, service=nd.callee, pods=chosen[nd.callee],
                               pods_on_node=pods_on_node, strength=strength)
            if nd.callee == "adservice":
                eff.fail(np.ones(n, dtype=bool), CHRONIC_INJECTED_SHARE, ErrorKind.INJECTED)
        parent_ok = np.ones(n, dtype=bool) if nd.parent < 0 else (
            present[:, nd.parent] & ~refused[:, nd.parent] & (place[j] < made_before[:, nd.parent]))
        if nd.parent >= 0 and nodes[nd.parent].kind == "server":
            # A handler whose call failed returns its error there (Go's `if err != nil`, a Java
            # client's exception): the calls it would have made after that one are never made.
            for sibling in kids[nd.parent][:place[j]]:
                if not nodes[sibling].tolerated:
                    parent_ok &= ~outcome(sibling)
        present[:, j] = parent_ok
        refused[:, j] = parent_ok & (rng.random(n) < eff.refused_p)
        failed = parent_ok & ~refused[:, j] & (rng.random(n) < eff.err_p)
        kind[:, j] = np.where(refused[:, j], np.int8(ErrorKind.REFUSED), np.where(failed, eff.err_kind, 0))
        # A name that does not resolve never reaches the callee either: treat it like a refusal.
        refused[:, j] |= failed & (eff.err_kind == ErrorKind.DNS)
        if nd.kind == "server" and kids[j]:
            early = np.isin(kind[:, j], list(EARLY_RETURN_KINDS)) & (eff.site > 0)
            for site in np.unique(eff.site[early]):
                # A code fault sits at one place of the handler, before any of its calls or
                # after all of them alike; every failing request stops there.
                gap = np.random.default_rng((int(site), zlib.crc32(nd.operation.encode()))).integers(
                    0, len(kids[j]) + 1)
                made_before[:, j] = np.where(early & (eff.site == site), gap, made_before[:, j])
        own[:, j] = nd.mean_us * rng.lognormal(-0.06, 0.35, n) * pace[proc_pod[:, j], minute] * eff.mult + eff.add_us

    for j in range(s_count):
        outcome(j)

    # Bottom-up: durations.
    dur = np.zeros((n, s_count))
    for j in reversed(range(s_count)):
        total = own[:, j].copy()
        for c in kids[j]:
            total += np.where(present[:, c], dur[:, c], 0.0)
        dur[:, j] = np.where(refused[:, j], rng.uniform(400, 3000, n), total)

    # Top-down: start times, children run one after another inside their parent.
    start = np.zeros((n, s_count))
    start[:, 0] = t0_us
    for j in range(s_count):
        cursor = start[:, j] + (nodes[j].mean_us * 0.05 if nodes[j].kind == "server" else nodes[j].mean_us * 0.4)
        for c in kids[j]:
            start[:, c] = cursor
            cursor = cursor + np.where(present[:, c], dur[:, c], 0.0) + 30.0

    ids = rng.integers(1, 2**63 - 1, size=(n, s_count), dtype=np.int64).astype(np.uint64)
    trace_hi = rng.integers(1, 2**63 - 1, size=n, dtype=np.int64).astype(np.uint64)
    trace_lo = rng.integers(1, 2**63 - 1, size=n, dtype=np.int64).astype(np.uint64)
    parent_idx = np.array([nd.parent for nd in nodes])
    parent_ids = np.where(parent_idx[None, :] >= 0, ids[:, np.maximum(parent_idx, 0)], np.uint64(0))

    rows, cols = np.nonzero(present & traced[:, None])
    pod_names = np.array(ALL_PODS, dtype=object)
    minute_of_day = (((start[rows, cols] / 1e6 + CST_OFFSET_S) % 86400) // 60).astype(int)
    proc = pod_names[proc_pod[rows, cols]]
    node_names = np.empty(len(rows), dtype=object)
    for pod in np.unique(proc):
        sel = proc == pod
        node_names[sel] = placement.node_at(str(pod), minute_of_day[sel])

    def col_attr(attr: str) -> np.ndarray:
        """A template-node attribute spread over the flat spans."""
        return np.array([getattr(nd, attr) for nd in nodes], dtype=object)[cols]

    is_root = cols == 0
    status = np.where(kind_out[:, 0] > 0, 500, template.status)  # per trace: its answer's HTTP status
    flat = {
        "trace_hi": trace_hi[rows], "trace_lo": trace_lo[rows], "span_id": ids[rows, cols],
        "parent_id": parent_ids[rows, cols], "service": col_attr("service"), "pod": proc, "node": node_names,
        "kind": col_attr("kind"), "operation": col_attr("operation"), "callee": col_attr("callee"),
        "callee_pod": pod_names[callee_pod[rows, cols]],
        "start_us": start[rows, cols].astype(np.int64), "dur_us": np.maximum(dur[rows, cols], 20).astype(np.int64),
        "err_kind": kind_out[rows, cols], "fail_callee": fail_callee[rows, cols],
        "origin_kind": kind_out[rows, cols], "origin_callee": origin_callee[rows, cols],
        "http_path": np.where(is_root, template.path, ""), "http_method": np.where(is_root, template.method, ""),
        "http_status": np.where(is_root, status[rows], 0).astype(np.int16),
        "tolerated": np.array([nd.tolerated for nd in nodes], dtype=bool)[cols],
    }
    flat["http_path"] = flat["http_path"].astype(object)
    flat["http_method"] = flat["http_method"].astype(object)

    # APM sees a call at the serving pod unless the connection was refused.
    served = present & ~refused
    calls_mask = served & np.array([nd.kind == "client" or j == 0 for j, nd in enumerate(nodes)])[None, :]
    r2, c2 = np.nonzero(calls_mask)
    calls = CallRecords(t_s=start[r2, c2] / 1e6, pod_id=callee_pod[r2, c2].astype(np.int16),
                        dur_us=dur[r2, c2], err_kind=kind_out[r2, c2])
    return _Built(flat=flat, calls=calls, span_trace=rows, call_trace=r2, minute=minute, root_us=dur[:, 0])


def generate_hour(*, hour_start: datetime, requests_per_hour: float, trace_share: float, faults: list[Fault],
                  placement: Placement, pods_on_node: dict[str, tuple[str, ...]], strength: float,
                  rng: np.random.Generator, latency_jitter: float = 0.0) -> tuple[SpanBatch, CallRecords]:
    """The requests that start in the UTC hour beginning at ``hour_start``: the calls of every
    one (what an APM counts) and the spans of the ``trace_share`` of them a tracer keeps (head
    sampling, a whole trace or none of it). Each pod's own time wobbles from minute to minute by a
    log-normal factor of sigma ``latency_jitter``."""
    base = int(hour_start.timestamp())
    minutes_s = base + 60 * np.arange(60)
    counts = rng.poisson(minute_load(minutes_s=minutes_s, traces_per_hour=requests_per_hour))
    pace = rng.lognormal(0.0, latency_jitter, (len(ALL_PODS), 60)) if latency_jitter > 0 else np.ones((len(ALL_PODS), 60))
    weights = np.array([t.weight for t in TEMPLATES])
    per_template = rng.multinomial(counts, weights / weights.sum())  # (60, templates)
    built: list[_Built] = []
    for k, template in enumerate(TEMPLATES):
        minute_idx = np.repeat(np.arange(60), per_template[:, k])
        if len(minute_idx) == 0:
            continue
        t0_us = (base + 60 * minute_idx + rng.uniform(0, 60, len(minute_idx))) * 1e6
        traced = rng.random(len(minute_idx)) < trace_share
        built.append(_build_template(template, t0_us=t0_us, minute=minute_idx, traced=traced, pace=pace,
                                     faults=faults, placement=placement, pods_on_node=pods_on_node,
                                     strength=strength, rng=rng))
    # Its own generator: the requests drawn above, and every hour without slow minutes, stay as they were.
    built = _closed_loop(built, rng=np.random.default_rng((base, zlib.crc32(b"closed loop"))))
    flats = [b.flat for b in built]
    call_parts = [b.calls for b in built]
    merged = {key: np.concatenate([f[key] for f in flats]) for key in flats[0]}
    order = np.argsort(merged["start_us"], kind="stable")
    batch = SpanBatch(**{key: value[order] for key, value in merged.items()})
    calls = CallRecords(*(np.concatenate([getattr(c, f) for c in call_parts])
                          for f in ("t_s", "pod_id", "dur_us", "err_kind")))
    return batch, calls
