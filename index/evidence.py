"""Evidence items: detector events -> ``EvidenceItem`` data with a strength and a role, and one renderer.

Each builder turns one event frame (``preprocess.detect``) into items attributed to the
components they incriminate: the series owner, the log-emitting pod (and any service a
bursting template names), the callee of an anomalous call edge (and its node, weakly), or
the caller pod of a fan-out. ``render`` is the one place an item becomes the observation
line the model reads (``EvidenceItem.text``); nothing downstream parses that line.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from index.models import EvidenceItem
from index.params import RankWeights
from preprocess.detect_log import template_keyword
from preprocess.schema import MESH_CLIENT_PREFIX, MESH_SERVER_PREFIX, POD_CLIENT_LATENCY_PREFIX
from rca.system import SystemSpec

# An observation is at most this long: the challenge's limit on an answer's observation
# (data-contract.md; the rule version of change 5 will own it).
MAX_CHARS = 100

# APM KPIs and the TiDB service KPIs are what callers feel (they propagate up the call
# graph); resource KPIs (CPU, memory, disk, network, process counts) are local.
_SYMPTOM_KINDS = frozenset({"apm_pod", "apm_service"})
_SYMPTOM_KPIS = frozenset({
    "duration_99th", "duration_95th", "duration_avg", "failed_query_ops", "qps", "slow_query",
    "connection_count", "transaction_retry", "statement_avg_queries", "grpc_qps",
})


def is_server_side_latency(kpi: str) -> bool:
    """A KPI of the time a component takes to answer its inbound calls, as it measures it.

    The release's APM ``rrt`` (from the pod's server spans) and the service mesh's
    callee-side ``rrt_server_*`` (``preprocess.schema``). Not ``rrt_max``, one slow call's
    tail, nor ``rrt_client_*``, the same calls as their callers measure them (a slow network
    between them counts there).
    """
    return kpi == "rrt" or kpi.startswith(MESH_SERVER_PREFIX)


def is_mesh_measure(kpi: str) -> bool:
    """A service mesh's edge KPI (``preprocess.schema``'s mesh latencies): the workload's value, on each of its pods."""
    return kpi.startswith((MESH_CLIENT_PREFIX, MESH_SERVER_PREFIX))


def strength(z: float) -> float:
    """Bounded, slowly growing evidence strength of a robust z (z=4 -> 0.69, z=50 -> 2.6)."""
    return math.log1p(max(z, 0.0) / 4.0)


@dataclass
class Item:
    """One evidence item with its strength and role.

    role: ``local`` (the component's own resources or liveness), ``symptom`` (what a
    caller would also feel: latency, errors, log bursts) or ``edge`` (calls into the
    component went wrong). Symptom and edge evidence is discounted when something
    downstream is anomalous; local and edge evidence make a component a cause.
    """

    evidence: EvidenceItem
    strength: float
    role: str = "symptom"
    caller: str | None = None  # for call-edge evidence: the calling service
    own: float = 1.0  # the share of it the component's own fault explains (``explained_by_others``)

    @property
    def symptom(self) -> bool:
        return self.role != "local"

    def explained_by_others(self, weight: float) -> None:
        """Keep ``weight`` of it: another component's fault explains the rest (callers that stopped
        calling, a callee's errors echoed, clients waiting on a slow answer)."""
        self.strength *= weight
        self.own *= weight

    def shown(self) -> EvidenceItem:
        """The evidence line as a candidate shows it, with the share its component's fault explains."""
        return self.evidence if self.own >= 1.0 else self.evidence.model_copy(update={"own_share": round(self.own, 4)})


def _hhmm(value: datetime | None) -> str:
    return value.strftime("%H:%M") if value is not None else "?"


def render(item: EvidenceItem, *, max_chars: int = MAX_CHARS) -> str:
    """The observation line of ``item``: led by its key, at most ``max_chars`` characters."""
    text = _render(item, max_chars=max_chars)
    return text if len(text) <= max_chars else text[:max_chars - 1] + "…"


def _render(item: EvidenceItem, *, max_chars: int) -> str:
    when = _hhmm(item.onset)
    if item.modality == "metric":
        if item.signal == "silent":
            return f"{item.key} went silent on {item.component} from {when}"
        ratio = f"{item.ratio:.2g}x " if item.ratio is not None else f"from 0 to {item.value:.3g} "
        return f"{item.key} {item.direction} {ratio}(z={item.z:.1f}) on {item.component} from {when}"
    if item.modality == "log":
        if item.signal == "silent":
            return (f"log stream went silent on {item.component} "
                    f"({item.count} lines vs {item.baseline_count} before)")
        # The line's own words are what a reader looks for: the text spends what the
        # counts and pod leave of its characters on them; the onset stays in `onset`.
        if item.signal == "new_template":
            change = "new"
        elif item.signal == "fell":
            change = f"fell to {item.ratio:.1f}x, z={item.z:.1f}"
        else:
            change = f"{item.ratio:.1f}x, z={item.z:.1f}"
        suffix = f" x{item.count} ({change}) on {item.component}"
        return template_keyword(item.example, max_chars=max_chars - len(suffix)) + suffix
    edge = f"{item.caller}->{item.callee}"
    if item.signal == "calls_dropped":
        others = f" +{item.more_callees} more" if item.more_callees else ""
        return f"{edge}{others}: calls from {item.component} dropped, its callees starved, from {when}"
    if item.signal == "stopped_after":
        # The share says what happened; a full stop's z is only the strength every stop is given.
        return (f"{edge}: {item.component}'s handlers stopped after this call ({item.ratio:.2f} of their usual "
                f"next calls) from {when}")
    if item.signal == "fanout":
        others = f" +{item.more_callees} more" if item.more_callees else ""
        return (f"{edge}{others}: {item.fanout_signal} on calls from {item.component} (z={item.z:.1f}) "
                f"from {when}")
    if item.signal == "wait":
        return (f"{edge} p95 {item.ratio:.1f}x (z={item.z:.1f}), the time between the spans, "
                f"at {item.component} from {when}")
    if item.signal == "latency":
        detail = f"p95 {item.ratio:.1f}x (z={item.z:.1f})"
    elif item.signal == "errors":
        detail = f"errors {item.ratio:.0%} (z={item.z:.1f})"
    else:
        detail = "calls stopped"
    return f"{edge} {detail} to {item.component} from {when}"


def _evidence(**fields) -> EvidenceItem:
    """An item with its rendered ``text`` (rendered once, for the component it was first seen on)."""
    item = EvidenceItem.model_construct(text="", **fields)
    return EvidenceItem(**{**fields, "text": render(item)})


def metric_items(events: pl.DataFrame, *, weights: RankWeights) -> list[tuple[str, Item]]:
    items = []
    for row in events.iter_rows(named=True):
        kpi, component, direction = row["kpi"], row["component"], row["direction"]
        evidence = _evidence(modality="metric", signal="silent" if direction == "silent" else "level", key=kpi,
                             component=component, direction=direction, magnitude=round(row["z"], 2), z=row["z"],
                             ratio=row["ratio"], value=row["window_value"], onset=row["onset"])
        # Latency of any series is what a caller feels too (a pod's client-side latency is its callees').
        symptom = row["kind"] in _SYMPTOM_KINDS or kpi in _SYMPTOM_KPIS or "latency" in kpi
        role = "local" if direction == "silent" or not symptom else "symptom"
        # The latency of a pod's own calls is its callees' time (and the network's), not its work.
        own_calls = kpi.startswith(POD_CLIENT_LATENCY_PREFIX) and direction == "up"
        item_strength = strength(row["z"]) * (weights.client_latency_weight if own_calls else 1.0)
        items.append((component, Item(evidence, item_strength, role)))
    return items


_LOG_SIGNALS = {"silent": "silent", "new": "new_template", "up": "burst", "down": "fell"}


def log_items(events: pl.DataFrame, *, known_services: set[str], weights: RankWeights,
              system: SystemSpec) -> list[tuple[str, Item]]:
    items = []
    for row in events.iter_rows(named=True):
        pod, template = row["component"], row["template"] or ""
        silent = row["direction"] == "silent"
        # The example line keeps the words Drain merged into <*>.
        line = "" if silent else (row.get("example") or template)
        evidence = _evidence(modality="log", signal=_LOG_SIGNALS[row["direction"]],
                             key="log stream" if silent else template_keyword(line), component=pod,
                             direction=row["direction"], magnitude=round(row["z"], 2), z=row["z"], ratio=row["ratio"],
                             onset=row["onset"], example=line, count=row["window_count"],
                             baseline_count=row["baseline_count"])
        # Silence is local (the pod stopped); a burst, a new line or a line that stopped is a
        # symptom that may come from downstream (a failing call ends the caller's code path too).
        item_strength = strength(row["z"])
        items.append((pod, Item(evidence, item_strength, "local" if silent else "symptom")))
        if row["direction"] == "down":
            continue  # a line naming a service that stopped says nothing against that service
        own_service = system.service_of(pod)
        # The line, not Drain's template: where one statement named several services over
        # the day (a caller's failing URL), the template keeps the name as <*>.
        for service in known_services:
            if service != own_service and service in line:
                mention = evidence.model_copy(update={"component": service})
                items.append((service, Item(mention, weights.mention_weight * item_strength, "edge")))
    return items


def fanout_items(events: pl.DataFrame) -> list[tuple[str, Item]]:
    items = []
    for row in events.iter_rows(named=True):
        callees = row["callees"]
        evidence = _evidence(modality="trace", signal="fanout", key=f"{row['caller']}->{callees[0]}",
                             component=row["caller_pod"], direction="up", magnitude=round(row["z"], 2), z=row["z"],
                             onset=row["onset"], caller=row["caller"], callee=callees[0],
                             fanout_signal=row["signal"], more_callees=len(callees) - 1)
        # Failing towards many services at once is the caller pod's own problem.
        boost = 1.0 + 0.25 * (len(callees) - 1)
        items.append((row["caller_pod"], Item(evidence, boost * strength(row["z"]), "local")))
    return items


_TRACE_SIGNALS = {"latency": "latency", "errors": "errors", "silent": "calls_stopped"}


def waiting(events: pl.DataFrame, *, weights: RankWeights) -> pl.Series:
    """Which trace events were slow between the two sides of the call, not in the callee.

    A latency event whose added time was largely between the caller's client span and the
    callee's server span (``wait_share``), and at least ``wait_min_share`` of the most time
    so added on any edge: one delayed network adds about the same to every call it carries,
    and a small wait beside it is noise, not a second hop.
    """
    slow_between = ((pl.col("signal") == "latency")
                    & (pl.col("wait_share").fill_null(0.0) >= weights.wait_share_min)
                    & pl.col("wait_added_us").is_not_null())
    most = events.filter(slow_between).select(pl.col("wait_added_us").max()).item()
    if most is None:
        return pl.Series("waiting", [False] * events.height, dtype=pl.Boolean)
    return events.select(
        (slow_between & (pl.col("wait_added_us") >= weights.wait_min_share * float(most))).alias("waiting")
    ).to_series()


def wait_items(events: pl.DataFrame, *, fanout_callers: set[tuple[str, str]],
               starved: set[str], served_fine: set[str], own_slowdown: dict[str, float]) -> list[tuple[str, Item]]:
    """Calls slow between their two spans (``waiting`` events): evidence on the service whose hop it is.

    A delay on one service's network holds up what it sends, its answers to its callers and
    its own calls alike, so its edges slow down on both sides while no callee's own span
    does. Each such edge is put on whichever of its two ends the most such edges touch (on
    a tie the callee, as for any call edge): the hop where the time is spent, not the
    loudest caller nor the most downstream callee. A starved end (``starved``: its own CPU
    rose clearly) takes the edge whatever the counts: a CPU-starved callee's requests
    queue before its span opens, a starved caller's client spans hold its own stalls. The
    traces tell a stalled caller too: on a tie, the edge is the caller's when its callee
    serves another caller fine (``served_fine``: its network and its queue are not slow) and
    the caller's own spans grew more than this call can explain (``own_slowdown``: the largest
    latency ratio of the calls into it; a call that only waited longer on the way makes its
    caller's span grow by a smaller ratio than its own). A caller whose pod fans out latency
    (``fanout_callers``) already has these calls as its evidence: they count once.
    """
    rows = list(events.iter_rows(named=True))
    touching: dict[str, int] = defaultdict(int)
    for row in rows:
        touching[row["caller"]] += 1
        touching[row["callee"]] += 1
    items = []
    for row in rows:
        caller_starved, callee_starved = row["caller"] in starved, row["callee"] in starved
        stalled_caller = (touching[row["caller"]] == touching[row["callee"]] and row["callee"] in served_fine
                          and own_slowdown.get(row["caller"], 0.0) > row["ratio"])
        at_caller = (caller_starved and not callee_starved) or (
            caller_starved == callee_starved and (touching[row["caller"]] > touching[row["callee"]] or stalled_caller))
        if at_caller and (row["caller"], "latency") in fanout_callers:
            continue
        target = row["caller"] if at_caller else row["callee_pod"] or row["callee"]
        evidence = _evidence(modality="trace", signal="wait", key=f"{row['caller']}->{row['callee']}",
                             component=target, direction="up", magnitude=round(row["z"], 2), z=row["z"],
                             ratio=row["ratio"], onset=row["onset"], caller=row["caller"], callee=row["callee"])
        item = Item(evidence, strength(row["z"]), "local")
        items.append((target, item))
        if not at_caller and row["callee_pod"]:
            items.append((row["callee"], item))
    return items


def trace_items(events: pl.DataFrame, *, propagation: dict[str, float], fanout_callers: set[tuple[str, str]],
                weights: RankWeights) -> list[tuple[str, Item]]:
    """Call-edge evidence on the callee (the time the caller waited for it); ``waiting`` events go to ``wait_items``."""
    items = []
    for row in events.iter_rows(named=True):
        target = row["callee_pod"] or row["callee"]
        evidence = _evidence(modality="trace", signal=_TRACE_SIGNALS[row["signal"]],
                             key=f"{row['caller']}->{row['callee']}", component=target,
                             direction="silent" if row["signal"] == "silent" else "up",
                             magnitude=round(row["z"], 2), z=row["z"], ratio=row["ratio"], onset=row["onset"],
                             caller=row["caller"], callee=row["callee"],
                             wait_share=row["wait_share"])  # only a slow call's event measures it
        # The callee is the suspect; how much depends on whether the anomaly flows on downstream.
        weight = 0.4 + 0.6 * propagation.get(row["callee"], 0.0)
        if (row["caller"], row["signal"]) in fanout_callers:
            weight *= weights.fanout_victim_weight
        item = Item(evidence, weight * strength(row["z"]), "edge", caller=row["caller"])
        items.append((target, item))
        if row["callee_pod"]:
            items.append((row["callee"], item))
        if row["callee_node"]:
            node_evidence = evidence.model_copy(update={"component": row["callee_node"]})
            items.append((row["callee_node"], Item(node_evidence, 0.3 * item.strength, "symptom")))
    return items


def stopped_after_item(*, caller: str, callee: str, z: float, ratio: float, onset: datetime | None) -> Item:
    """A caller whose handlers stopped going on after a call: its own code past that call broke."""
    evidence = _evidence(modality="trace", signal="stopped_after", key=f"{caller}->{callee}", component=caller,
                         direction="down", magnitude=round(z, 2), z=z, ratio=ratio, onset=onset, caller=caller,
                         callee=callee)
    return Item(evidence=evidence, strength=strength(z), role="local")


def dropped_calls_item(*, caller: str, callees: list[str], z: float, onset: datetime | None) -> Item:
    """A caller that stopped making some of its calls: its callees' lost traffic is its evidence."""
    evidence = _evidence(modality="trace", signal="calls_dropped", key=f"{caller}->{callees[0]}", component=caller,
                         direction="down", magnitude=round(z, 2), z=z, onset=onset, caller=caller, callee=callees[0],
                         more_callees=len(callees) - 1)
    return Item(evidence=evidence, strength=strength(z), role="local")
