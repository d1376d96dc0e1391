"""An interactive simulated cloud for the mitigation task.

The world is the simulator's own: its topology and pod placement (``simulate.topology``),
its fault semantics (``simulate.effects``: per-call latency/errors/refusals and KPI shifts)
and its metric generation (``simulate.metrics``). The cloud starts a little after the
fault's start with the injected fault left running (chaos does not stop by itself) and
moves forward one step (a minute) per action. Actions change the list of active faults:

- the right action ends the fault's effects (a restarted pod loses the stress process, a
  rollback removes the bad release, a drained node no longer hosts pods, ...);
- every restart costs a short outage of the restarted pod (``POD_KILL_OUTAGE_S`` of refused
  connections), so restarting a healthy pod is a burst of errors for nothing; scaling a
  service to zero or restarting a healthy TiDB component is an outage of its own.

Health is measured over an interval: calls along every edge of the request templates
(error share, latency factor) and every pod, node and TiDB KPI compared with the same
seeded baseline without faults. ``settle()`` runs ``SETTLE_MINUTES`` forward after the
agent's last action; success means the whole system is healthy there, not only the target.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from bench.problems import is_tidb
from rca.errors import InputError
from rca.system import SystemSpec, bundled_system
from rca.taxonomy import TIDB_COMPONENTS as TIDB_FAMILIES
from rca.timeutil import cst_day_and_hour, cst_day_bounds_utc, format_utc
from simulate.effects import POD_ID, POD_KILL_OUTAGE_S, CallEffect, edge_effects, server_effects
from simulate.metrics import build_day_metrics, stable_seed
from simulate.schedule import Fault, fault_from_record
from simulate.topology import ALL_NODES, ALL_PODS, TEMPLATES, WORKER_NODES, Placement, place_pods, pods_of

STEP = timedelta(minutes=1)
START_DELAY = timedelta(minutes=2)  # the agent is called when the alert fires
SETTLE_MINUTES = 5
PERSIST = timedelta(days=1)  # "until mitigated"
TIDB_RESTART_OUTAGE_S = 30
ERROR_LIMIT = 0.02  # share of failed calls on an edge
LATENCY_LIMIT = 1.3  # callee processing time factor
ADDED_LATENCY_LIMIT_US = 5_000
KPI_LIMIT = 0.25  # relative KPI deviation from the fault-free baseline
TIDB_COMPONENTS: tuple[str, ...] = tuple(TIDB_FAMILIES.values())
# Faults a pod restart clears on the restarted pods (the chaos lives in the container).
POD_SCOPED = frozenset({"cpu stress", "memory stress", "jvm cpu", "jvm gc", "jvm exception", "jvm latency",
                        "dns error", "pod failure"})
NETWORK = frozenset({"network delay", "network loss", "network corrupt"})
NODE = frozenset({"node cpu stress", "node memory stress", "node disk fill"})


def app_services_with_pods(system: SystemSpec) -> list[str]:
    """The application services (TiDB aside) that have pods, sorted."""
    return sorted({system.service_of(p) for p in ALL_PODS if not is_tidb(p)})


class ActionError(InputError):
    """An action with a bad argument; the message lists the valid choices."""


@dataclass(frozen=True)
class Health:
    """What is unhealthy over an interval (empty lists: the whole system is healthy)."""

    start: datetime
    end: datetime
    edges: list[str]  # "caller->callee: 12% errors, latency x2.1"
    entities: list[str]  # "aiops-k8s-03 node_cpu_usage_rate +180%"

    @property
    def healthy(self) -> bool:
        return not self.edges and not self.entities

    def render(self, limit: int = 12) -> str:
        when = f"{format_utc(self.start)}..{format_utc(self.end)}"
        if self.healthy:
            return f"{when}: all services, pods, nodes and TiDB components healthy"
        lines = [f"{when}: {len(self.edges)} unhealthy call edge(s), {len(self.entities)} unhealthy KPI(s)"]
        shown = self.edges + self.entities
        lines += [f"- {item}" for item in shown[:limit]]
        if len(shown) > limit:
            lines.append(f"- ... and {len(shown) - limit} more")
        return "\n".join(lines)


@dataclass(frozen=True)
class CallEdge:
    caller: str
    callee: str


def _edges() -> list[CallEdge]:
    found = {(("cartservice" if n.service == "redis" else n.service), n.callee)
             for t in TEMPLATES for n in t.nodes if n.kind == "client"}
    return [CallEdge(a, b) for a, b in sorted(found)]


EDGES = _edges()


class SimCloud:
    """The world of one mitigation problem, stepped by actions."""

    def __init__(self, *, record: dict[str, Any], seed: int, strength: float = 1.0) -> None:
        self.system = bundled_system()  # the simulator's world is the bundled HipsterShop
        injected = fault_from_record(record, where=f"mitigation problem {record.get('uuid')}")
        if injected.fault_type != "pod kill":
            injected = dataclasses.replace(injected, end=injected.start + PERSIST)
        self.injected = injected
        self.seed = seed
        self.strength = strength
        day, _ = cst_day_and_hour(injected.start)
        self.day_start, _ = cst_day_bounds_utc(day)
        self.placement: Placement = place_pods(rng=np.random.default_rng([seed & 0xFFFFFFFF, stable_seed(day)]), day=day)
        self.node_of: dict[str, str] = dict(self.placement.node_of)
        self.cordoned: set[str] = set()
        self.replicas: dict[str, int] = {s: len(pods_of(s)) for s in app_services_with_pods(self.system)}
        self.faults: list[Fault] = [injected]
        # Pods whose restart removes a fault's chaos (network chaos sits on the source's pods).
        self.pending: dict[str, set[str]] = {}
        if injected.fault_type in POD_SCOPED and not is_tidb(injected.service):
            self.pending[injected.uuid] = set(injected.pods)
        elif injected.fault_type in NETWORK:
            self.pending[injected.uuid] = set(pods_of(injected.source))
        self.now = injected.start + START_DELAY
        self.events: list[str] = []
        self._count = 0

    # ----- the world -------------------------------------------------------------------
    @property
    def pods_on_node(self) -> dict[str, tuple[str, ...]]:
        grouped: dict[str, list[str]] = defaultdict(list)
        for pod, node in self.node_of.items():
            grouped[node].append(pod)
        return {n: tuple(p) for n, p in grouped.items()}

    def _end(self, fault: Fault) -> None:
        self.faults = [dataclasses.replace(f, end=self.now) if f.uuid == fault.uuid else f for f in self.faults]
        self.pending.pop(fault.uuid, None)

    def _active(self) -> list[Fault]:
        return [f for f in self.faults if f.end > self.now]

    def _outage(self, kind: str, *, service: str, pods: tuple[str, ...], seconds: float | None) -> Fault:
        self._count += 1
        end = self.now + (timedelta(seconds=seconds) if seconds is not None else PERSIST)
        fault = Fault(f"action-{self._count}", kind, "pod", service, pods, "", "", "", self.now, end, {})
        self.faults.append(fault)
        return fault

    def _restart(self, pods: tuple[str, ...]) -> None:
        """Fresh containers: chaos inside them is gone, and each is down for a moment."""
        for fault in self._active():
            if fault.uuid in self.pending:
                left = self.pending[fault.uuid] - set(pods)
                if not left:
                    self._end(fault)
                    continue
                self.pending[fault.uuid] = left
                if fault.fault_type in POD_SCOPED:
                    self.faults = [dataclasses.replace(f, pods=tuple(sorted(left))) if f.uuid == fault.uuid else f
                                   for f in self.faults]
        for pod in pods:
            self._count += 1
            self.faults.append(Fault(f"action-{self._count}", "pod kill", "pod", self.system.service_of(pod), (pod,), "",
                                     "", "", self.now, self.now + timedelta(seconds=POD_KILL_OUTAGE_S), {}))

    # ----- actions -----------------------------------------------------------------------
    def restart_pod(self, *, pod: str) -> str:
        self._check_pod(pod)
        self._restart((pod,))
        return self._after(f"pod {pod} restarted (new container on {self.node_of[pod]})")

    def restart_deployment(self, *, service: str) -> str:
        self._check_service(service)
        self._restart(pods_of(service))
        return self._after(f"deployment {service}: rolling restart of {', '.join(pods_of(service))}")

    def rollback_deployment(self, *, service: str) -> str:
        self._check_service(service)
        for fault in self._active():
            if fault.fault_type == "code error" and service in (fault.service, *[self.system.service_of(p) for p in fault.pods]):
                self._end(fault)
        self._restart(pods_of(service))
        return self._after(f"deployment {service} rolled back to its previous revision (pods replaced)")

    def fix_target_port(self, *, service: str) -> str:
        self._check_service(service)
        fixed = [f for f in self._active() if f.fault_type == "target port misconfig" and
                 (f.service == service or any(self.system.service_of(p) == service for p in f.pods))]
        for fault in fixed:
            self._end(fault)
        note = "targetPort corrected" if fixed else "targetPort already matched the container port; nothing changed"
        return self._after(f"service {service}: {note}")

    def scale_deployment(self, *, service: str, replicas: int) -> str:
        self._check_service(service)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or not 0 <= replicas <= 10:
            raise ActionError("replicas must be an integer from 0 to 10")
        before = self.replicas[service]
        self.replicas[service] = replicas
        if replicas == 0 and before > 0:
            self._outage("pod failure", service=service, pods=pods_of(service), seconds=None)
        elif replicas > 0 and before == 0:
            for fault in self._active():
                if fault.uuid.startswith("action-") and fault.fault_type == "pod failure" and fault.service == service:
                    self._end(fault)
        return self._after(f"deployment {service} scaled {before} -> {replicas} replicas")

    def cordon_drain_node(self, *, node: str) -> str:
        if node not in WORKER_NODES:
            raise ActionError(f"unknown worker node {node!r}; valid: {', '.join(WORKER_NODES)}")
        if node in self.cordoned:
            return self._after(f"node {node} is already cordoned and drained")
        self.cordoned.add(node)
        targets = [n for n in WORKER_NODES if n not in self.cordoned]
        if not targets:
            raise ActionError("cannot drain the last schedulable worker node")
        moved = tuple(sorted(p for p, n in self.node_of.items() if n == node))
        for k, pod in enumerate(moved):
            self.node_of[pod] = targets[k % len(targets)]
        self._restart(moved)
        for fault in self._active():
            if fault.fault_type in NODE and fault.node == node:
                self._end(fault)  # the stress keeps the node busy, but no workload runs there any more
        return self._after(f"node {node} cordoned and drained; {len(moved)} pod(s) rescheduled")

    def restart_tidb(self, *, component: str) -> str:
        if component not in TIDB_COMPONENTS:
            raise ActionError(f"unknown TiDB component {component!r}; valid: {', '.join(TIDB_COMPONENTS)}")
        fixed = [f for f in self._active() if f.service == component and f.fault_type in ("pod failure", "io fault")
                 and not f.uuid.startswith("action-")]
        for fault in fixed:
            self._end(fault)
        self._outage("pod failure", service=component, pods=(f"{component}-0",), seconds=TIDB_RESTART_OUTAGE_S)
        return self._after(f"{component} restarted ({component}-0 back after ~{TIDB_RESTART_OUTAGE_S}s)")

    def wait(self, *, minutes: int = 1) -> str:
        if not isinstance(minutes, int) or isinstance(minutes, bool) or not 1 <= minutes <= 10:
            raise ActionError("minutes must be an integer from 1 to 10")
        return self._after(f"waited {minutes} minute(s)", steps=minutes)

    def status(self) -> str:
        """Health over the last step, plus what changed so far."""
        health = self.health(self.now - STEP, self.now)
        lines = [f"now {format_utc(self.now)}", health.render()]
        if self.cordoned:
            lines.append(f"cordoned nodes: {', '.join(sorted(self.cordoned))}")
        scaled = {s: r for s, r in self.replicas.items() if r != len(pods_of(s))}
        if scaled:
            lines.append("replicas changed: " + ", ".join(f"{s}={r}" for s, r in sorted(scaled.items())))
        return "\n".join(lines)

    def _after(self, what: str, *, steps: int = 1) -> str:
        self.events.append(f"{format_utc(self.now)} {what}")
        self.now += STEP * steps
        return f"{what}. Clock now {format_utc(self.now)}."

    def _check_pod(self, pod: str) -> None:
        if pod not in self.node_of:
            raise ActionError(f"unknown pod {pod!r}; pods are <service>-0..2 (e.g. cartservice-1), redis-cart-0, "
                              f"tidb-tidb-0, tidb-pd-0, tidb-tikv-0")

    def _check_service(self, service: str) -> None:
        if service not in self.replicas:
            raise ActionError(f"unknown deployment {service!r}; valid: {', '.join(self.replicas)}")

    # ----- health ------------------------------------------------------------------------
    def health(self, start: datetime, end: datetime) -> Health:
        faults = [f for f in self.faults if f.start <= end and f.end > start]
        return Health(start=start, end=end, edges=self._edge_health(faults, start, end),
                      entities=self._kpi_health(faults, start, end))

    def _edge_health(self, faults: list[Fault], start: datetime, end: datetime) -> list[str]:
        if not faults:
            return []
        t = np.arange(start.timestamp(), end.timestamp(), 5.0)
        rng = np.random.default_rng([self.seed & 0xFFFFFFFF, int(start.timestamp())])
        pods_on_node = self.pods_on_node
        bad: list[str] = []
        for edge in EDGES:
            callee_pods = np.array([POD_ID[p] for p in pods_of(edge.callee)], dtype=np.int16)
            caller_pods = np.array([POD_ID[p] for p in pods_of(edge.caller)], dtype=np.int16)
            t_s = np.repeat(t, len(callee_pods) * len(caller_pods))
            callee = np.tile(np.repeat(callee_pods, len(caller_pods)), len(t))
            caller = np.tile(caller_pods, len(t) * len(callee_pods))
            eff = CallEffect.neutral(len(t_s))
            edge_effects(eff, faults, t_s=t_s, caller=edge.caller, caller_pods=caller, callee=edge.callee,
                         callee_pods=callee, strength=self.strength, rng=rng)
            server_effects(eff, faults, t_s=t_s, service=edge.callee, pods=callee, pods_on_node=pods_on_node,
                           strength=self.strength)
            errors = float(np.mean(1 - (1 - eff.err_p) * (1 - eff.refused_p)))
            factor, added = float(np.mean(eff.mult)), float(np.mean(eff.add_us))
            if errors > ERROR_LIMIT or factor > LATENCY_LIMIT or added > ADDED_LATENCY_LIMIT_US:
                bad.append(f"{edge.caller}->{edge.callee}: {errors:.0%} failed calls, latency x{factor:.1f} "
                           f"+{added / 1000:.0f} ms")
        return bad

    def _kpi_health(self, faults: list[Fault], start: datetime, end: datetime) -> list[str]:
        # A restart's own KPI trace (memory regrowing) is not ill health: only outages count.
        faults = [f for f in faults if f.fault_type != "pod kill"]
        if not faults:
            return []
        # Whole minutes inside the interval (a fault ended at ``start`` must not leak in).
        first = -(-int(start.timestamp()) // 60) * 60
        minutes_s = np.arange(first, int(end.timestamp()) - 59, 60, dtype=np.int64)
        if len(minutes_s) == 0:
            minutes_s = np.array([int(start.timestamp()) // 60 * 60], dtype=np.int64)
        pods_on_node = self.pods_on_node

        def frame(with_faults: list[Fault]):
            rng = np.random.default_rng([self.seed & 0xFFFFFFFF, stable_seed("cloud-metrics")])
            return build_day_metrics(minutes_s=minutes_s, faults=with_faults, placement=self.placement,
                                     pods_on_node=pods_on_node, strength=self.strength, noise_scale=1.0, rng=rng)

        sick, base = frame(faults), frame([])
        bad: list[str] = []

        def compare(names: tuple[str, ...], now: dict[str, np.ndarray], ref: dict[str, np.ndarray], skip: set[str]) -> None:
            for kpi in sorted(now):
                rel = np.abs(now[kpi] - ref[kpi]) / (np.abs(ref[kpi]) + 1e-9)
                worst = rel.max(axis=1)
                for row, name in enumerate(names):
                    if name not in skip and worst[row] > KPI_LIMIT:
                        sign = "+" if (now[kpi][row] - ref[kpi][row]).mean() >= 0 else "-"
                        size = f"{worst[row]:.0%}" if worst[row] < 10 else ">999%"
                        bad.append(f"{name} {kpi} {sign}{size}")

        compare(sick.pod_names, sick.pod, base.pod, set())
        compare(sick.node_names, sick.node, base.node, set(self.cordoned))
        compare(("tidb-tidb",), sick.tidb, base.tidb, set())
        compare(("tidb-tikv",), sick.tikv, base.tikv, set())
        compare(("tidb-pd",), sick.pd, base.pd, set())
        return bad

    def settle(self) -> Health:
        """Run ``SETTLE_MINUTES`` forward with no further action and report health there."""
        start = self.now
        self.now += STEP * SETTLE_MINUTES
        return self.health(start, self.now)

    def describe_world(self) -> str:
        """Pods per node (what ``kubectl get pods -o wide`` would tell)."""
        lines = []
        for node in ALL_NODES:
            pods = sorted(p for p, n in self.node_of.items() if n == node)
            if pods:
                mark = " (cordoned)" if node in self.cordoned else ""
                lines.append(f"{node}{mark}: {', '.join(pods)}")
        return "\n".join(lines)
