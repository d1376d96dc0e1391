"""Candidate ranking: detector events of one window -> scored service / pod / node candidates.

Rules here rank and filter; they never decide (the LLM does). The steps:

1. every event becomes an EvidenceItem attributed to the component it was seen on
   (``index.evidence``: metric series owner, log-emitting pod, callee of an anomalous
   call edge, and any service a bursting log template names);
2. each component gets per-modality scores (strongest item plus diminishing extras);
3. level logic: a service whose pods all deviate is a service candidate, a lone
   deviating pod a pod candidate, a node whose own KPIs deviate or whose pods of several
   services suffer together a node candidate; single-pod components (redis-cart,
   TiDB) are answered by their service name, which the ground truth accepts, and their
   service's and pod's evidence is scored as one component (a series on both counts once);
4. propagation: symptom evidence (latency, errors, log bursts) of a component whose
   downstream (in the call graph observed in the traces, plus the calls the system
   description declares: storage calls, which traces never show, and every call of a
   system without tracing) is anomalous is discounted, and a caller whose descendant shows
   clearly stronger cause evidence is capped just below it, so the most downstream
   anomalous component ranks first; a caller's own log trouble that began no earlier than
   a callee's error lines is their echo and weighed down (``_discount_log_echo``);
5. a caller pod failing towards several healthy callees at once (``caller_fanout``) is
   evidence against that pod, and the callees' edge evidence is mostly withdrawn; a callee
   whose own server-side latency rose is not healthy (``_fanout_of_healthy_callees``);
   a call slow between its two spans (not in the callee's own span) is the hop's, not the
   callee's: it goes to the end that most such calls touch, or to a clearly CPU-starved end
   (``index.evidence.waiting`` / ``wait_items``), and takes no part in propagation;
6. silence travels down the call graph: the silence of a component whose callers all
   stopped (or of a call edge whose caller stopped) is weighted down, as is the fall in
   requests of an entry service whose clients wait on its slow answers; a live, error-free
   service whose only caller stopped calling it is that caller's evidence, and a caller's drop
   that followed a drop further down is its echo (``_discount_drop_echo``); a pod that only
   feels its stressed node (clearly stressed, or moderately while pods of several services
   suffer there together) ranks just below that node, as does a service whose troubled
   pods all defer to their nodes; a caller whose handlers stopped after a call into a service
   with no trouble of its own broke there itself (``_stopped_after``; errors travel up, so a
   troubled callee's own evidence speaks for the stop);
7. the list shows one pod per service before other suspects, so a short list stays diverse,
   and a pod incriminated by its incoming calls is followed by its service (a fault on all
   calls into a service often stands out on one pod only).

Every constant is a field of ``index.params.RankWeights``, passed in.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal

import networkx as nx
import polars as pl

from index.evidence import (
    Item,
    dropped_calls_item,
    fanout_items,
    is_mesh_measure,
    is_server_side_latency,
    log_items,
    metric_items,
    stopped_after_item,
    trace_items,
    wait_items,
    waiting,
)
from index.models import Candidate, EvidenceItem
from index.params import RankWeights
from preprocess.detect_trace import propagation_scores
from rca.system import SystemSpec

# Correlated KPIs move together (error, server_error, error_ratio ...): one family counts once.
_KPI_FAMILIES: tuple[tuple[str, str], ...] = (
    ("error", "errors"), ("timeout", "errors"), ("rrt", "latency"), ("duration", "latency"), ("latency", "latency"),
    ("request", "traffic"), ("response", "traffic"), ("qps", "traffic"), ("network", "network"),
    ("disk", "disk"), ("fs_", "disk"), ("filesystem", "filesystem"), ("memory", "memory"),
    ("MemAvailable", "memory"), ("cpu", "cpu"),
)


def kpi_family(kpi: str) -> str:
    for fragment, family in _KPI_FAMILIES:
        if fragment in kpi:
            return family
    return kpi


@dataclass
class _Component:
    name: str
    modality_weights: dict[str, float]
    items: list[Item] = field(default_factory=list)

    def modality_scores(self, *, symptom_factor: float = 1.0) -> dict[str, float]:
        """Per modality: strongest item per KPI family, then diminishing returns over families."""
        scores: dict[str, float] = {}
        for modality, weight in self.modality_weights.items():
            best_per_family: dict[str, float] = {}
            for item in self.items:
                if item.evidence.modality != modality:
                    continue
                family = kpi_family(item.evidence.key) if modality == "metric" else item.evidence.key
                value = item.strength * (symptom_factor if item.symptom else 1.0)
                best_per_family[family] = max(best_per_family.get(family, 0.0), value)
            values = sorted(best_per_family.values(), reverse=True)
            scores[modality] = weight * sum(v * 0.5 ** rank for rank, v in enumerate(values[:4]))
        return scores

    def score(self, *, symptom_factor: float = 1.0) -> float:
        return sum(self.modality_scores(symptom_factor=symptom_factor).values())

    def cause_score(self) -> float:
        """Strongest evidence that the component itself is broken (not merely feeling it)."""
        return max((i.strength for i in self.items if i.role != "symptom"), default=0.0)


def rank_candidates(
    *,
    events: Mapping[str, pl.DataFrame],
    graph: nx.DiGraph,
    placement: pl.DataFrame,
    known_pods: set[str],
    top_k: int,
    max_evidence: int = 6,
    window_start: datetime | None = None,
    weights: RankWeights = RankWeights(),
    system: SystemSpec,
) -> list[Candidate]:
    """Ranked candidates (service, pod and node level) with evidence and score breakdown.

    ``system`` names the components (which are nodes, which service owns a pod) and declares
    calls, which join ``graph`` (the calls the traces show) where both ends are in the data: its
    storage calls always, as traces never show them (so a TiDB fault is not blamed on its
    caller); its other calls for callers ``graph`` shows calling nothing: without traces they
    are the only call graph there is, and where traces show a caller's calls they are the
    better witness of what it called in that window.

    ``events`` are the detectors' event frames by kind (``metric``, ``log``, ``trace``,
    ``fanout``, ``dropped``). With ``window_start``, evidence whose onset comes
    ``weights.late_onset_minutes`` or more after it is weakened: a fault shows at injection
    time, so late starters are more likely its consequences or unrelated.
    """
    metric_events, log_events = events["metric"], events["log"]
    trace_events, fanout_events = events["trace"], events["fanout"]
    # Time spent between a call's two spans is the network's: it does not flow on downstream.
    wait_mask = waiting(trace_events, weights=weights)
    wait_events, trace_events = trace_events.filter(wait_mask), trace_events.filter(~wait_mask)
    propagation = propagation_scores(trace_events)
    pods_by_service: dict[str, set[str]] = defaultdict(set)
    for pod in known_pods:
        pods_by_service[system.service_of(pod)].add(pod)
    known_services = set(pods_by_service) | {n for n in graph.nodes} | {
        c for c in metric_events.get_column("component").unique() if c not in known_pods and not system.is_node(c)}
    traced_calls = set(graph.edges)
    traced_callers = {caller for caller, _ in traced_calls}
    graph = graph.copy()
    for caller, callee in (*system.storage_calls, *(c for c in system.calls if c[0] not in traced_callers)):
        if caller in known_services and callee in known_services:
            graph.add_edge(caller, callee)
    fanout_events = _fanout_of_healthy_callees(fanout_events, slow=_slow_by_own_measure(metric_events, system=system),
                                               share=weights.fanout_slow_callee_share,
                                               min_callees=weights.fanout_min_healthy_callees)
    fanout_events = _fanout_of_independent_callees(
        fanout_events, untraced=nx.DiGraph([c for c in system.calls if c not in traced_calls]),
        min_callees=weights.fanout_min_healthy_callees)
    fanout_callers = {(c, s) for c, s in fanout_events.select("caller", "signal").iter_rows()}
    # Nodes that host application pods: control-plane nodes never do, so they never compete.
    worker_nodes = set(placement.get_column("node").drop_nulls().to_list()) if placement.height else set()

    components: dict[str, _Component] = {}

    late = timedelta(minutes=weights.late_onset_minutes)
    modality_weights = weights.modality_weights()

    def add(name: str, item: Item) -> None:
        onset = item.evidence.onset
        if window_start is not None and onset is not None and onset - window_start >= late:
            item = replace(item, strength=item.strength * weights.late_onset_weight)
        components.setdefault(name, _Component(name, modality_weights)).items.append(item)

    metric = metric_items(metric_events, weights=weights)
    for name, item in (metric
                       + log_items(log_events, known_services=known_services, weights=weights, system=system)
                       + trace_items(trace_events, propagation=propagation, fanout_callers=fanout_callers,
                                     weights=weights)
                       + wait_items(wait_events, fanout_callers=fanout_callers,
                                    starved=_starved(metric, min_z=weights.wait_starved_z, system=system),
                                    served_fine=_served_fine(traced_calls, events["trace"]),
                                    own_slowdown=_own_slowdown(trace_events))
                       + fanout_items(fanout_events)):
        add(name, item)

    for name, item in _dropped_calls(components, graph=graph, weights=weights, share_drops=events["dropped"],
                                     system=system):
        add(name, item)
    for name, item in _stopped_after(events):
        add(name, item)
    _discount_lone_caller(components, graph=graph, weights=weights, system=system)
    _discount_starved(components, graph=graph, weights=weights, system=system)
    _discount_log_echo(components, graph=graph, weights=weights, system=system)
    cause = _service_cause(components, pods_by_service, system=system)
    factors = _propagation_factors(graph, cause, weights=weights)

    scored: list[Candidate] = []
    for service in sorted(known_services | {system.service_of(n) for n in components if not system.is_node(n)}):
        if system.is_node(service):
            continue
        pods = sorted(pods_by_service.get(service, set()))
        factor = factors.get(service, 1.0)
        if len(pods) <= 1:
            # Single-pod component: its pod evidence is the service's evidence, scored as one
            # component. A series reported for the service and for its one pod (a service-level
            # APM row aggregated from that pod) is one observation, not two: summing the two
            # scores doubled such KPIs against those only the pod reports (CPU, memory).
            sources = [components[n] for n in [service, *pods] if n in components]
            merged = _Component(name=service, modality_weights=modality_weights,
                                items=[i for comp in sources for i in comp.items]
                                ).modality_scores(symptom_factor=factor)
            scored.append(_candidate(service, "service", merged, factor, sources, max_evidence))
            continue
        direct = components.get(service)
        direct_scores = direct.modality_scores(symptom_factor=factor) if direct else {}
        pod_scores = {p: components[p].score(symptom_factor=factor) if p in components else 0.0 for p in pods}
        deviating = [p for p, s in pod_scores.items() if s >= weights.anomalous_pod_score]
        share = len(deviating) / len(pods)
        mean_pod = sum(pod_scores.values()) / len(pods)
        service_breakdown = {k: 0.5 * v for k, v in direct_scores.items()}
        if share == 1.0:
            service_breakdown["pods"] = mean_pod
            service_breakdown["uniform"] = weights.uniform_bonus
        else:
            service_breakdown["pods"] = mean_pod * share * 0.5
        scored.append(_candidate(service, "service", service_breakdown, factor,
                                 [components[n] for n in [service, *pods] if n in components], max_evidence))
        for pod in pods:
            if pod not in components:
                continue
            breakdown = components[pod].modality_scores(symptom_factor=factor)
            breakdown["service"] = 0.3 * sum(direct_scores.values())
            if share == 1.0:
                breakdown["level"] = -0.4 * sum(breakdown.values())
            scored.append(_candidate(pod, "pod", breakdown, factor, [components[pod]], max_evidence))

    for node in sorted(worker_nodes | {n for n in components if system.is_node(n)}):
        if worker_nodes and node not in worker_nodes:
            continue
        breakdown = components[node].modality_scores() if node in components else {}
        breakdown["co_located"] = _co_located_score(node, placement, components, system=system)
        if sum(breakdown.values()) <= 0:
            continue
        scored.append(_candidate(node, "node", breakdown, 1.0,
                                 [components[node]] if node in components else [], max_evidence))

    scored = _cap_explained(scored, graph=graph, cause=cause, weights=weights, system=system)
    scored = _cap_by_node(scored, placement=placement, components=components, pods_by_service=pods_by_service,
                           weights=weights)
    scored = [c for c in scored if c.score > 0]
    scored.sort(key=lambda c: (-c.score, c.component))
    ranked = _diversify(scored, per_service=weights.max_per_service, system=system)
    if weights.service_follows_pod:
        called_wrong = {name for name, comp in components.items() if any(i.role == "edge" for i in comp.items)}
        ranked = _service_follows_pod(ranked, pods=called_wrong, system=system)
    return ranked[:top_k]


def _served_fine(traced_calls: set[tuple[str, str]], trace_events: pl.DataFrame) -> set[str]:
    """Callees with a caller the traces show calling them (``traced_calls``) and no event on its calls
    into them in the window (``trace_events``, waits included)."""
    wrong = set(trace_events.select("caller", "callee").iter_rows())
    return {callee for caller, callee in traced_calls if (caller, callee) not in wrong}


def _own_slowdown(trace_events: pl.DataFrame) -> dict[str, float]:
    """Per callee service, the largest latency ratio of the calls into it (time within its spans)."""
    slower = trace_events.filter(pl.col("signal") == "latency").group_by("callee").agg(pl.col("ratio").max())
    return dict(slower.iter_rows())


def _slow_by_own_measure(metric_events: pl.DataFrame, *, system: SystemSpec) -> dict[str, float]:
    """Services whose inbound calls got slower as they measure them themselves, with the z.

    A service's own series, or a mesh series on any of its pods (the mesh measures the workload:
    the importer writes the callee's value on every pod), not one pod's ``rrt``: one slow pod
    does not make its service slow for every caller.
    """
    slow: dict[str, float] = {}
    rising = metric_events.filter(pl.col("direction") == "up").select("component", "kpi", "z")
    for component, kpi, z in rising.iter_rows():
        if system.is_node(component) or not is_server_side_latency(kpi):
            continue
        service = system.service_of(component)
        if component == service or is_mesh_measure(kpi):
            slow[service] = max(slow.get(service, 0.0), z)
    return slow


def _fanout_of_healthy_callees(fanout_events: pl.DataFrame, *, slow: dict[str, float], share: float,
                               min_callees: int) -> pl.DataFrame:
    """Latency fan-outs counted over callees that are fine by their own measure.

    A fan-out blames the caller pod because its callees are fine for everybody else; the
    traces that say so may cover only some callers (a source that keeps traces only around
    incidents, files absent). A callee whose own server-side latency rose about as clearly
    (z at least ``share`` of the fan-out's) is not fine, and explains its callers' latency
    (not their errors). A latency fan-out that loses callees so is dropped when fewer than
    ``min_callees`` remain; the rest keep their z (the strongest callee's before the cut: the
    event carries no per-callee z).
    """
    if fanout_events.height == 0 or not slow:
        return fanout_events
    rows = []
    for row in fanout_events.iter_rows(named=True):
        if row["signal"] == "latency":
            healthy = [c for c in row["callees"] if slow.get(c, 0.0) < share * row["z"]]
            if len(healthy) < len(row["callees"]):
                if len(healthy) < min_callees:
                    continue
                row = {**row, "callees": healthy}
        rows.append(row)
    return pl.DataFrame(rows, schema=fanout_events.schema)


def _fanout_of_independent_callees(fanout_events: pl.DataFrame, *, untraced: nx.DiGraph,
                                   min_callees: int) -> pl.DataFrame:
    """Fan-outs counted over callees that are independent witnesses.

    A fan-out says that several callees are slow or failing from one caller pod only, because
    they serve everybody else. Where one callee calls another of the same fan-out in a call the
    traces show, the detector already reads that call (``caller_fanout``: a callee failing for
    two callers is broken, one whose own calls failed relays). Where the call is one the system
    description declares and the traces do not show (``untraced``), nothing says the first
    callee is fine, and a broken second one slows every caller of it, the first among them:
    the first is no independent witness. On Nezha's tuning day a CPU-starved currencyservice
    slows frontend's calls to it and to checkoutservice, whose calls to it are not traced. A
    fan-out left with fewer than ``min_callees`` is dropped.
    """
    if fanout_events.height == 0 or untraced.number_of_edges() == 0:
        return fanout_events
    rows = []
    for row in fanout_events.iter_rows(named=True):
        callees = row["callees"]
        below = {c: nx.descendants(untraced, c) if c in untraced else set() for c in callees}
        independent = [c for c in callees if not any(other in below[c] for other in callees if other != c)]
        if len(independent) >= min_callees:
            rows.append({**row, "callees": independent})
    return pl.DataFrame(rows, schema=fanout_events.schema)


def _diversify(ranked: list[Candidate], *, per_service: int, system: SystemSpec) -> list[Candidate]:
    """Keep at most ``per_service`` pods of one service ahead of other suspects.

    A short list that offers a service, its worst pod and then other suspects is more
    useful to the diagnoser than the same service's pods one after another.
    """
    head: list[Candidate] = []
    tail: list[Candidate] = []
    seen: dict[str, int] = defaultdict(int)
    for candidate in ranked:
        if candidate.level != "pod":  # a service or node entry is never pushed back
            head.append(candidate)
            continue
        service = system.service_of(candidate.component)
        seen[service] += 1
        (head if seen[service] <= per_service else tail).append(candidate)
    return head + tail


def _service_follows_pod(ranked: list[Candidate], *, pods: set[str], system: SystemSpec) -> list[Candidate]:
    """A service listed below one of ``pods`` (those whose incoming calls went wrong) moves up to just after it.

    Whether a fault is a pod's or its whole service's is what a per-pod ranking sees worst:
    a fault on all calls into a service (the network between two services) shows above
    noise on one pod's calls only as often as not, which then outranks the service by far.
    The pod keeps its place, and its service comes next, ahead of unrelated suspects, so
    the short list holds both readings of the same call evidence. A pod incriminated by
    its own KPIs alone (a busy pod on a stressed node) is not a reading of its calls and
    pulls nothing up.
    """
    services = {c.component: c for c in ranked if c.level == "service"}
    result: list[Candidate] = []
    placed: set[str] = set()
    for candidate in ranked:
        if candidate.component in placed:
            continue
        result.append(candidate)
        placed.add(candidate.component)
        if candidate.level == "pod" and candidate.component in pods:
            service = services.get(system.service_of(candidate.component))
            if service is not None and service.component not in placed:
                result.append(service)
                placed.add(service.component)
    return result


def _cap_explained(scored: list[Candidate], *, graph: nx.DiGraph, cause: dict[str, float],
                   weights: RankWeights, system: SystemSpec) -> list[Candidate]:
    """A component whose downstream is clearly broken ranks just below that downstream.

    Callers feel every downstream fault as errors and latency, often louder than the
    root cause's own evidence; when a descendant shows clear cause evidence (local or
    on its incoming calls) stronger than the caller's own, the caller is capped.
    """
    best: dict[str, float] = {}
    for candidate in scored:
        if candidate.level != "node":
            service = system.service_of(candidate.component)
            best[service] = max(best.get(service, 0.0), candidate.score)
    capped: list[Candidate] = []
    for candidate in scored:
        service = system.service_of(candidate.component)
        if candidate.level == "node" or service not in graph:
            capped.append(candidate)
            continue
        explaining = [best.get(d, 0.0) for d in nx.descendants(graph, service)
                      if cause.get(d, 0.0) >= weights.clear_anomaly and cause.get(d, 0.0) > cause.get(service, 0.0)]
        if explaining:
            candidate = _capped(candidate, weights.explained_cap * max(explaining), reason="explained_downstream")
        capped.append(candidate)
    return capped


def _capped(candidate: Candidate, cap: float, *, reason: str) -> Candidate:
    """``candidate`` with its score lowered to ``cap`` (if above), the cut booked under ``reason``."""
    if candidate.score <= cap:
        return candidate
    breakdown = {**candidate.score_breakdown, reason: round(cap - candidate.score, 3)}
    return candidate.model_copy(update={"score": round(cap, 4), "score_breakdown": breakdown})


def _discount_starved(components: dict[str, _Component], *, graph: nx.DiGraph, weights: RankWeights,
                      system: SystemSpec) -> None:
    """Silence of a component whose every caller stopped is starvation, not death.

    Errors travel up the call graph; silence travels down it: when a service dies, the
    services only it calls see their traffic stop. Their silent evidence is kept but
    weighted down so that the dead caller, not its starved callees, ranks first.
    """
    def stopped(item: Item) -> bool:
        return item.evidence.direction == "silent" and (item.evidence.key == "request"
                                                         or item.evidence.modality == "trace")

    dead = {system.service_of(name) for name, comp in components.items()
            if not system.is_node(name) and any(stopped(i) for i in comp.items)}
    # An entry service (nobody calls it) whose answers took far longer lost its traffic to its
    # clients waiting (a closed-loop load sends the next request after the last answer): its
    # fall in requests and work is its slowness, which its callees' silence passes down too.
    slow = {system.service_of(name) for name, comp in components.items() if not system.is_node(name) and any(_slower(i) for i in comp.items)}
    for name, comp in components.items():
        service = system.service_of(name)
        if not system.is_node(name) and service in slow and service in graph and not list(graph.predecessors(service)):
            for item in comp.items:
                if _idled(item):
                    item.explained_by_others(weights.starved_weight)
    starved = {s for s in graph.nodes
               if list(graph.predecessors(s)) and all(p in dead for p in graph.predecessors(s))}
    for name, comp in components.items():
        for item in comp.items:
            if item.evidence.direction != "silent":
                continue
            # Starved as a whole, or this call edge stopped because its caller did.
            if (not system.is_node(name) and system.service_of(name) in starved) or (item.caller is not None and item.caller in dead):
                item.explained_by_others(weights.starved_weight)


def _discount_log_echo(components: dict[str, _Component], *, graph: nx.DiGraph, weights: RankWeights,
                       system: SystemSpec) -> None:
    """A caller's log trouble that began no earlier than a callee's errors is their echo.

    Errors travel up the call graph: the service that throws logs it, and so does every
    caller whose request it failed (and their next statements stop). When a service below in
    the call graph burst or wrote new lines from the same minute or earlier, the caller's own
    log trouble keeps ``log_echo_weight``, so the deepest troubled service leads. Lines that
    stopped downstream do not count: a caller that stops calling starves its callees.
    """
    def own_trouble(item: Item) -> bool:
        return (item.role == "symptom" and item.evidence.modality == "log"
                and item.evidence.signal in ("burst", "new_template", "fell"))

    first_error: dict[str, datetime] = {}  # service -> earliest clear burst or new line of its own
    for name, comp in components.items():
        if system.is_node(name):
            continue
        for item in comp.items:
            onset = item.evidence.onset
            if (own_trouble(item) and item.evidence.signal != "fell" and onset is not None
                    and item.strength >= weights.log_echo_min_strength):
                service = system.service_of(name)
                first_error[service] = min(first_error.get(service, onset), onset)
    discounted: set[int] = set()  # one item is shared by a pod and its service: discount it once
    for name, comp in components.items():
        if system.is_node(name) or system.service_of(name) not in graph:
            continue
        items = [i for i in comp.items if own_trouble(i) and i.evidence.onset is not None and id(i) not in discounted]
        if not items:
            continue
        began = min(i.evidence.onset for i in items if i.evidence.onset is not None)
        below = nx.descendants(graph, system.service_of(name))
        if not any(first_error.get(d) is not None and first_error[d] <= began for d in below):
            continue
        for item in items:
            item.explained_by_others(weights.log_echo_weight)
            discounted.add(id(item))


def _lost_traffic(item: Item) -> bool:
    """Evidence that less work reached a component: its traffic fell, or calls into it stopped."""
    evidence = item.evidence
    if evidence.modality == "trace":
        return evidence.signal == "calls_stopped"
    if evidence.modality != "metric" or evidence.direction not in ("down", "silent"):
        return False
    return kpi_family(evidence.key) in ("traffic", "network") or "syscall" in evidence.key


def _slower(item: Item) -> bool:
    """Evidence that the component's own answers took longer (its latency series rose)."""
    evidence = item.evidence
    return (evidence.modality == "metric" and evidence.direction == "up" and kpi_family(evidence.key) == "latency"
            and "client" not in evidence.key)


def _idled(item: Item) -> bool:
    """Evidence of less work done: lost traffic, or a CPU that fell with it (a starved pod idles)."""
    evidence = item.evidence
    return _lost_traffic(item) or (evidence.modality == "metric" and evidence.direction in ("down", "silent")
                                   and kpi_family(evidence.key) == "cpu")


def _dropped_calls(components: dict[str, _Component], *, graph: nx.DiGraph, weights: RankWeights,
                   share_drops: pl.DataFrame, system: SystemSpec) -> list[tuple[str, Item]]:
    """Callers whose callees lost traffic together while the callers' own demand held.

    Traffic travels down the call graph: when a caller stops making some of its calls (a bad
    release that returns early, an exception thrown before the downstream call) several of
    its callees see their requests fall with nothing wrong in them. The fall is the caller's
    evidence; the callees keep ``starved_weight`` of it and of their CPU's fall (their other evidence stays).
    The traces can say so of one callee too (``share_drops``, ``dropped_calls``): a call made
    less often for the demand the caller serves, which no callee of it can bring about. A
    caller found so explains the lost traffic of every callee only it calls, dropped or not:
    an exception thrown midway stops some calls outright and thins others.
    """
    lost: dict[str, list[Item]] = defaultdict(list)
    evidence: dict[str, list[EvidenceItem]] = defaultdict(list)  # service -> its own and its pods' evidence
    for name, comp in components.items():
        if not system.is_node(name):
            lost[system.service_of(name)].extend(i for i in comp.items if _lost_traffic(i))
            evidence[system.service_of(name)].extend(i.evidence for i in comp.items)
    found: list[tuple[str, Item]] = []
    starved: set[str] = set()
    traced = share_drops.group_by("caller", maintain_order=True).agg(pl.col("callee"), pl.col("z").max(),
                                                                   pl.col("onset").min())
    witnessed: set[str] = set()  # callers whose traces show their calls dropped or stopped
    # Callers some of whose calls fail (a traced error on the call): a failed call ends its caller's
    # handler, so their drops may be that failure's echo.
    failed_callers = {e.caller for items in evidence.values() for e in items
                      if e.modality == "trace" and e.signal == "errors" and e.caller is not None}
    for caller, callees, z, onset in traced.sort("caller").iter_rows():
        # The same drop in the callees' own counters, which count every call where the traces keep a
        # sample: the stronger of the two readings counts. Only callees this caller alone calls (their
        # fall can be nobody else's), and only for a caller whose calls do not fail and which does not
        # fail itself: there the drop may be a failure's echo, and the traces' reading stands.
        if caller not in failed_callers and not _failing(evidence.get(caller, [])):
            counted = {c: [i for i in lost.get(c, []) if i.evidence.modality == "metric"] for c in callees
                       if c in graph and set(graph.predecessors(c)) == {caller}}
            counted_z = _drop_z(list(counted), counted, count=weights.dropped_callees)
            z = max(z, counted_z) if counted_z is not None else z
        found.append((caller, dropped_calls_item(caller=caller, callees=callees, z=z, onset=onset)))
        starved.update(callees)
        witnessed.add(caller)
    for caller in sorted(set(graph.nodes) - set(traced.get_column("caller"))):
        # The caller's own demand fell too (its requests, or calls into it): a victim further
        # down, not the source. Its network and syscalls fall with the calls it stops making.
        if any(i.evidence.modality == "trace" or kpi_family(i.evidence.key) == "traffic" for i in lost.get(caller, [])):
            continue
        callees = sorted((c for c in graph.successors(caller) if c != caller and lost.get(c)),
                         key=lambda c: (-max(i.strength for i in lost[c]), c))  # ties by name: stable text
        if len(callees) < weights.dropped_callees and not any(
                _abandoned(c, caller=caller, graph=graph, evidence=evidence) for c in callees):
            continue
        z = _drop_z(callees, lost, count=weights.dropped_callees)
        assert z is not None  # every callee here lost traffic
        onsets = [i.evidence.onset for c in callees for i in lost[c] if i.evidence.onset is not None]
        found.append((caller, dropped_calls_item(caller=caller, callees=callees, z=z,
                                                 onset=min(onsets) if onsets else None)))
        starved.update(callees)
        if any(i.evidence.modality == "trace" and i.evidence.caller == caller for c in callees for i in lost[c]):
            witnessed.add(caller)
    # A callee of a caller that dropped calls, which no one else calls, lost its traffic to it too.
    for caller in {caller for caller, _ in found}:
        starved.update(c for c in graph.successors(caller)
                       if c != caller and lost.get(c) and set(graph.predecessors(c)) == {caller})
    for name, comp in components.items():
        if not system.is_node(name) and system.service_of(name) in starved:
            for item in comp.items:
                if _idled(item):
                    item.explained_by_others(weights.starved_weight)
    _discount_drop_echo(found, witnessed=witnessed, graph=graph, weights=weights)
    return found


def _drop_z(callees: Sequence[str], lost: Mapping[str, Sequence[Item]], *, count: int) -> float | None:
    """The z a drop shared by the ``count`` of ``callees`` that lost the most traffic stands for: the
    weakest of their strongest traffic falls, back from strength to z; None without a callee that lost any."""
    strongest = sorted((max(i.strength for i in lost[c]) for c in callees if lost.get(c)), reverse=True)
    return 4.0 * (math.exp(min(strongest[:count])) - 1.0) if strongest else None


def _discount_drop_echo(found: list[tuple[str, Item]], *, witnessed: set[str], graph: nx.DiGraph,
                        weights: RankWeights) -> None:
    """A caller's dropped calls that began no earlier than a service below it dropped its own are their echo.

    Errors travel up: a callee that breaks midway fails its callers' requests, and their
    handlers stop there too, dropping their later calls. The deepest service whose traces show
    it dropping calls (``witnessed``: its calls thinned for the demand it served, or stopped
    while its demand held; a drop read from its callees' traffic alone may be its load's)
    leads; a caller above it keeps ``log_echo_weight`` of its drop, as of its log echo.
    """
    began: dict[str, datetime | None] = {caller: item.evidence.onset for caller, item in found if caller in witnessed}
    for caller, item in found:
        onset = item.evidence.onset
        below = nx.descendants(graph, caller) - {caller} if caller in graph else set()
        if any(d in began and _no_later(began[d], onset) for d in below):
            item.explained_by_others(weights.log_echo_weight)


def _no_later(first: datetime | None, then: datetime | None) -> bool:
    """``first`` is not after ``then`` (an unknown onset is not after anything)."""
    return first is None or then is None or first <= then


def _abandoned(service: str, *, caller: str, graph: nx.DiGraph, evidence: Mapping[str, Sequence[EvidenceItem]]) -> bool:
    """A live service that lost all its requests, whose one caller is ``caller``: that caller stopped calling.

    A dead service's callers still call it (their calls fail) and its own series (memory
    first) end with it; a failing one still receives requests and answers errors; one its
    caller cannot reach (a refused port, a name that does not resolve) leaves the caller's own
    calls failing. A service whose only caller stopped calling it idles, alive and error-free,
    and the caller's calls do not fail. Its requests falling silent as a whole, while its
    memory is still reported, is then its caller's doing: one callee is enough to say so.
    """
    if set(graph.predecessors(service)) != {caller} or _failing(evidence.get(caller, [])):
        return False
    own = evidence.get(service, [])
    silent_requests = any(e.direction == "silent" and e.component == service and e.modality == "metric"
                          and e.key == "request" for e in own)
    dead = any(e.direction == "silent" and kpi_family(e.key) == "memory" for e in own)
    return silent_requests and not dead and not _failing(own)


def _failing(evidence: Sequence[EvidenceItem]) -> bool:
    """Calls into the component fail (traced errors), or an error KPI of it rose (its answers, or its own calls, fail)."""
    return any((e.modality == "metric" and e.direction == "up" and kpi_family(e.key) == "errors")
               or (e.modality == "trace" and e.signal == "errors") for e in evidence)


def _stopped_after(events: Mapping[str, pl.DataFrame]) -> list[tuple[str, Item]]:
    """Callers whose handlers stopped after a call into a service with no trouble of its own.

    Errors travel up: a callee that fails (its answers slow, wrong or gone, its own calls
    dropped or stopped after one of its callees) ends its callers' handlers with it, and its
    own evidence says so. Where the callee shows nothing, the code that stopped is the caller's.
    """
    stops = events["stopped_after"]
    troubled = (set(events["trace"].get_column("callee")) | set(events["dropped"].get_column("caller"))
                | set(stops.get_column("caller")))
    return [(row["caller"], stopped_after_item(caller=row["caller"], callee=row["callee"], z=row["z"],
                                               ratio=row["ratio"], onset=row["onset"]))
            for row in stops.iter_rows(named=True) if row["callee"] not in troubled]


def _discount_lone_caller(components: dict[str, _Component], *, graph: nx.DiGraph, weights: RankWeights,
                          system: SystemSpec) -> None:
    """Calls into a healthy service that went wrong for one caller only, a caller that is itself broken.

    A caller's client span holds the time the caller spends too: a CPU-starved caller
    measures every call it makes as slow. When the callee has other callers whose calls to it
    are fine and the one complaining caller shows clear trouble of its own, the edge says more
    about the caller than the callee: it keeps ``fanout_victim_weight`` of its strength.
    """
    cause: dict[str, float] = defaultdict(float)
    for name, comp in components.items():
        if not system.is_node(name):
            cause[system.service_of(name)] = max(cause[system.service_of(name)], _local_score(comp))
    complaints: dict[str, set[str]] = defaultdict(set)
    for name, comp in components.items():
        for item in comp.items:
            if item.role == "edge" and item.caller:
                complaints[system.service_of(name)].add(item.caller)
    discounted: set[int] = set()  # one item is shared by a pod and its service: discount it once
    for name, comp in components.items():
        if system.is_node(name):
            continue
        service = system.service_of(name)
        callers = complaints.get(service, set())
        others = set(graph.predecessors(service)) - callers if service in graph else set()
        if len(callers) != 1 or not others:
            continue
        (caller,) = callers
        if cause.get(caller, 0.0) < weights.clear_anomaly or cause.get(caller, 0.0) <= cause.get(service, 0.0):
            continue
        for item in comp.items:
            if item.role == "edge" and item.caller == caller and id(item) not in discounted:
                item.explained_by_others(weights.fanout_victim_weight)
                discounted.add(id(item))


def _starved(metric: list[tuple[str, Item]], *, min_z: float, system: SystemSpec) -> set[str]:
    """Services whose own CPU rose clearly (z of at least ``min_z``, on the service or any of its pods)."""
    return {system.service_of(name) for name, item in metric
            if not system.is_node(name) and item.role == "local" and item.evidence.direction == "up"
            and kpi_family(item.evidence.key) == "cpu" and (item.evidence.z or 0.0) >= min_z}


def _local_score(component: _Component | None) -> float:
    return max((i.strength for i in component.items if i.role == "local"), default=0.0) if component else 0.0


def _cap_by_node(scored: list[Candidate], *, placement: pl.DataFrame, components: dict[str, _Component],
                 pods_by_service: dict[str, set[str]], weights: RankWeights) -> list[Candidate]:
    """A pod, or a service whose troubled pods all sit on one node, that only feels its node ranks below it.

    A node under stress slows every pod on it. A pod defers to its node when the node shows
    clearly stronger local evidence (CPU, memory, disk) than the pod itself, or when pods
    of several services suffer together there and only there (``co_located``) while the
    node's own KPIs moved too and the pod does not stand out of that shared pattern. A
    service whose troubled pods all defer to their nodes defers with them: two slow pods
    of one service on a stressed node are the node's victims, not a service fault.
    """
    if placement.height == 0:
        return scored
    node_scores = {c.component: c.score for c in scored if c.level == "node"}
    shared = {c.component for c in scored if c.level == "node" and c.score_breakdown.get("co_located", 0.0) > 0}
    hosts: dict[str, set[str]] = defaultdict(set)
    for pod, node in placement.select("pod", "node").iter_rows():
        hosts[pod].add(node)

    def explaining_node(pod: str) -> float | None:
        own = _local_score(components.get(pod))
        stressed = []
        for node in hosts.get(pod, set()) & set(node_scores):
            local = _local_score(components.get(node))
            clear = local >= weights.node_clear_anomaly and local > own
            in_pattern = (node in shared and local >= weights.node_shared_anomaly
                          and own < weights.node_shared_margin * local)
            if clear or in_pattern:
                stressed.append(node_scores[node])
        return max(stressed) if stressed else None

    pod_scores = {c.component: c.score for c in scored if c.level == "pod"}
    capped: list[Candidate] = []
    for candidate in scored:
        if candidate.level == "pod":
            node_score = explaining_node(candidate.component)
            if node_score is not None:
                candidate = _capped(candidate, weights.explained_cap * node_score, reason="explained_by_node")
        elif candidate.level == "service":
            pods = pods_by_service.get(candidate.component, set())
            troubled = [p for p in pods if p in components
                        and (len(pods) == 1 or pod_scores.get(p, 0.0) >= weights.anomalous_pod_score)]
            explained = [explaining_node(p) for p in troubled]
            if troubled and all(e is not None for e in explained):
                cap = weights.explained_cap * max(e for e in explained if e is not None)
                candidate = _capped(candidate, cap, reason="explained_by_node")
        capped.append(candidate)
    return capped


def _service_cause(components: dict[str, _Component], pods_by_service: dict[str, set[str]], *,
                   system: SystemSpec) -> dict[str, float]:
    """Strongest cause evidence (local or edge) of each service or any of its pods."""
    result: dict[str, float] = {service: 0.0 for service in pods_by_service}
    for name, comp in components.items():
        if system.is_node(name):
            continue
        service = system.service_of(name)
        result[service] = max(result.get(service, 0.0), comp.cause_score())
    return result


def _propagation_factors(graph: nx.DiGraph, cause: dict[str, float], *, weights: RankWeights) -> dict[str, float]:
    """Multiplier of each service's symptom evidence: < 1 when something downstream is broken."""
    factors: dict[str, float] = {}
    for service in cause:
        if service not in graph:
            continue
        downstream = max((cause.get(d, 0.0) for d in nx.descendants(graph, service)), default=0.0)
        factors[service] = 1.0 - weights.propagation_discount * min(1.0, downstream / weights.clear_anomaly)
    return factors


def _co_located_score(node: str, placement: pl.DataFrame, components: dict[str, _Component], *,
                      system: SystemSpec) -> float:
    """Evidence that pods of several services on this node, and only there, suffer together.

    A service whose pods on other nodes show the same local trouble has a problem of its
    own (a service-wide fault), so it does not count for this node.
    """
    if placement.height == 0:
        return 0.0
    pods_on = placement.filter(pl.col("node") == node).get_column("pod").unique().to_list()
    elsewhere = set(placement.filter(pl.col("node") != node).get_column("pod").unique().to_list()) - set(pods_on)
    troubled_elsewhere = {system.service_of(p) for p in elsewhere if _local_metric(components.get(p)) > 0}
    local: dict[str, float] = {}
    for pod in pods_on:
        value = _local_metric(components.get(pod))
        service = system.service_of(pod)
        if value > 0 and service not in troubled_elsewhere:
            local[service] = max(local.get(service, 0.0), value)
    if len(local) < 2:
        return 0.0
    top = sorted(local.values(), reverse=True)[:3]
    return 0.5 * sum(top) / len(top) * len(local) ** 0.5


def _local_metric(component: _Component | None) -> float:
    if component is None:
        return 0.0
    return max((i.strength for i in component.items if i.role == "local" and i.evidence.modality == "metric"),
               default=0.0)


def _candidate(name: str, level: Literal["service", "pod", "node"], breakdown: dict[str, float], factor: float,
               sources: list[_Component], max_evidence: int) -> Candidate:
    # Equal strengths are common (z is capped): a full key keeps the order the same every run.
    items = sorted((i for comp in sources for i in comp.items),
                   key=lambda i: (-i.strength, i.evidence.modality, i.evidence.component, i.evidence.key, i.evidence.text))
    # First the strongest item of each kind of signal, then the rest: a short list that
    # shows CPU, errors and a log template beats six error counters saying the same.
    def kind(item: Item) -> tuple[str, str, str]:
        key = kpi_family(item.evidence.key) if item.evidence.modality == "metric" else item.evidence.key
        return item.evidence.modality, key, item.evidence.direction

    seen_texts: set[str] = set()
    seen_kinds: set[tuple[str, str, str]] = set()
    first_pass: list[EvidenceItem] = []
    second_pass: list[EvidenceItem] = []
    for item in items:
        if item.evidence.text in seen_texts:
            continue
        seen_texts.add(item.evidence.text)
        if kind(item) in seen_kinds:
            second_pass.append(item.shown())
        else:
            seen_kinds.add(kind(item))
            first_pass.append(item.shown())
    evidence = (first_pass + second_pass)[:max_evidence]
    breakdown = {k: round(v, 3) for k, v in breakdown.items() if v != 0}
    if factor < 1.0:
        breakdown["propagation_factor"] = round(factor, 3)
    score = sum(v for k, v in breakdown.items() if k != "propagation_factor")
    return Candidate(component=name, level=level, score=round(score, 4), score_breakdown=breakdown,
                     evidence=evidence)
