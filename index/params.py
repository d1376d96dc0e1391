"""Every knob of the evidence index in one frozen object: ``IndexParams``.

``IndexParams`` holds the query window's baseline, the evidence budget, the ranking
weights (``RankWeights``), each detector's ``Params`` (``preprocess.detect``) and the calls
the system description declares (the ranker's call graph beyond what traces show). It is
built from the ``[index]`` settings section and the system description (``from_settings``),
passed explicitly to the build and the query, and recorded as plain data (``as_dict``) next
to the results it made, so an ablation is a setting, not a patched constant.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import TypeAdapter, ValidationError

from preprocess.detect import DETECTORS, LogParams, MetricParams, TraceParams
from rca.settings import IndexSettings, SettingsError
from rca.system import SystemSpec, bundled_system


@dataclass(frozen=True)
class RankWeights:
    """Ranking constants of ``index.rank`` (defaults tuned on simulated data)."""

    metric_weight: float = 1.0  # modality weights of a component's score
    log_weight: float = 0.8
    trace_weight: float = 1.0
    anomalous_pod_score: float = 1.0  # a pod "deviates" from this combined score on
    propagation_discount: float = 0.75  # share of symptom score removed when downstream explains it
    clear_anomaly: float = 2.0  # downstream cause score at which the full discount applies
    node_clear_anomaly: float = 1.2  # node local evidence (z about 9) from which its pods' symptoms defer to it
    # Pods of several services suffering together on one node (its ``co_located`` evidence)
    # make even a moderate rise of the node's own KPIs (any detected one: strength 0.69 is
    # z=4) the better explanation; a pod whose own local evidence exceeds the node's by this
    # margin stands out of the shared pattern (a busy pod that also loads its node) and stays.
    node_shared_anomaly: float = 0.69
    node_shared_margin: float = 1.5
    explained_cap: float = 0.9  # a caller explained by a broken downstream scores at most this share of it
    starved_weight: float = 0.2  # silent evidence kept for a component whose callers all stopped
    uniform_bonus: float = 0.5  # a service whose pods all deviate beats each single pod
    max_per_service: int = 1  # pods of one service listed before other suspects (the service itself always stays)
    mention_weight: float = 0.8  # a log template naming a service is evidence against that service
    late_onset_minutes: int = 8  # an anomaly starting this long after the window opened ...
    late_onset_weight: float = 0.6  # ... keeps this share of its strength (a consequence or a coincidence)
    fanout_min_healthy_callees: int = 2  # a latency fan-out that lost slow callees counts while this many remain
    fanout_slow_callee_share: float = 0.5  # ... a callee is not fine when its own latency's z is this share of the fan-out's
    fanout_victim_weight: float = 0.3  # callee edge evidence kept when the caller pod fans out failures
    # A caller that stops making some of its calls (a bad release returning early, an
    # exception before the downstream call) starves its callees: when at least
    # ``dropped_callees`` of a caller's callees lose traffic (requests, network, syscalls or
    # their incoming calls) while the caller's own demand holds, the drop is the caller's
    # evidence and the callees keep ``starved_weight`` of theirs. One callee is enough when
    # the caller is its only caller and it lost every request, alive and error-free.
    dropped_callees: int = 2
    # Errors travel up the call graph, and a failing call ends its caller's code path too:
    # a service's own log trouble (bursts, new lines, lines that stopped) keeps
    # ``log_echo_weight`` of its strength when a service it calls (directly or further down)
    # burst or wrote new lines, with at least ``log_echo_min_strength`` (z about 6), from the
    # same minute or earlier. A line that stopped downstream explains nothing upstream:
    # silence travels down (a caller that stops calling starves its callees). A caller's dropped
    # calls keep the same share when a service below it, by its traces, dropped calls first.
    log_echo_weight: float = 0.5
    log_echo_min_strength: float = 0.9
    # A call whose added latency was spent largely between the caller's client span and the
    # callee's server span (``wait_share``: the network, not the callee) is evidence on the
    # service most such calls touch (``index.evidence.wait_items``); 1.01 turns it off. Below
    # a half: a delayed service with one callee adds as much to its callers' calls inside its
    # own server span (its slow call) as between the spans.
    wait_share_min: float = 0.4
    wait_min_share: float = 0.25  # ... and whose added wait is this share of the largest such wait
    # An end of such a call whose own CPU rose with at least this z takes it: a starved callee's
    # requests queue before its span opens, a starved caller's client spans hold its stalls. CPU
    # only, and clearly: memory creeping up 1.3x (z 5) beside a delayed callee stalls nothing.
    wait_starved_z: float = 10.0
    # A pod's rising client-side latency (the calls it makes, ``POD_CLIENT_LATENCY_PREFIX``)
    # keeps this share of its strength: its callees' time and the network's, not its own work.
    client_latency_weight: float = 0.25
    # A service is listed right after its highest-ranked pod (index.rank._service_follows_pod):
    # a service-wide fault often stands out on one pod only.
    service_follows_pod: bool = True
    # A first candidate scoring below this is a low-confidence answer (``index.confidence``): on
    # the tuning sets of round 16 every wrong first candidate scored below 3.0.
    confident_score: float = 3.0
    # ... and so is one that leads its first rival (a candidate of another service, or another
    # node) by less than this: on crowded days (the simulator's packed view) strong wrong first
    # candidates come with a rival as strong; one strong anomaly's worth of lead is asked.
    confident_margin: float = 1.0

    def modality_weights(self) -> dict[str, float]:
        return {"metric": self.metric_weight, "log": self.log_weight, "trace": self.trace_weight}


@dataclass(frozen=True)
class IndexParams:
    """All knobs of an index query (and of the log miner at build time)."""

    baseline_minutes: int = 30  # fault-free minutes before the window it is compared with
    # A window shorter than this (a pod kill lasts one second) is scored over this many
    # minutes from its start: a brief fault's evidence (the restart gap, refused calls, the
    # callers' burst) lands in the minutes just after it, not inside the window itself.
    brief_window_minutes: int = 3
    max_evidence: int = 12  # evidence lines per candidate
    # Other incidents' windows are excluded from the baseline with this much of their end
    # too: effects outlast a declared end (the simulator's recovery tails reach 2.5 min,
    # real restarts and queue drains longer).
    exclude_margin_minutes: int = 5
    # How far back the baseline may reach to collect ``baseline_minutes`` clean minutes
    # when other incidents' windows are excluded: four baselines' worth, so a day with an
    # incident every half hour still finds its reference, without reaching into another
    # part of the diurnal cycle.
    max_baseline_reach_minutes: int = 120
    # A modality with fewer minutes of data than this before the window has a thin baseline
    # (recording just started): twice the detectors' smallest baseline (min_baseline_points),
    # below which a median / MAD is a guess. It is said in the data status.
    thin_baseline_minutes: int = 10
    metric: MetricParams = field(default_factory=MetricParams)
    log: LogParams = field(default_factory=LogParams)
    trace: TraceParams = field(default_factory=TraceParams)
    rank: RankWeights = field(default_factory=RankWeights)
    # The system the index describes: which components are nodes, which service owns a pod, and
    # the calls its description declares, which join the call graph the traces show (its storage
    # calls always, its other calls for callers the traces show calling nothing). Default: the
    # bundled HipsterShop; ``from_settings`` takes the one the settings name.
    system: SystemSpec = field(default_factory=bundled_system)
    # The robust z every detector asks for in the second scoring of a window where nothing passed
    # the usual thresholds (``relaxed``): "no candidate" must not happen while telemetry moved.
    relaxed_min_z: float = 2.5

    def relaxed(self) -> IndexParams:
        """These parameters with the detectors' thresholds lowered: for a window where nothing passed
        the usual ones although telemetry was there (a weak fault must still get a candidate list)."""
        return replace(
            self,
            metric=replace(self.metric, min_z=self.relaxed_min_z,
                           min_relative_change=self.metric.min_relative_change / 2),
            trace=replace(self.trace, min_z=self.relaxed_min_z, min_latency_ratio=1.0 + (self.trace.min_latency_ratio - 1.0) / 2,
                          min_error_rate_increase=self.trace.min_error_rate_increase / 2),
            log=replace(self.log, min_z=self.relaxed_min_z, min_ratio=max(1.5, self.log.min_ratio / 2)),
        )

    def detector_params(self) -> dict[str, object]:
        """Params of each registered detector, by detector name."""
        return {name: getattr(self, name) for name in DETECTORS}

    def as_dict(self) -> dict[str, Any]:
        """The knobs, with the system by its name (its description is a file of its own)."""
        groups = {"metric": dataclasses.asdict(self.metric), "log": dataclasses.asdict(self.log),
                  "trace": dataclasses.asdict(self.trace), "rank": dataclasses.asdict(self.rank)}
        knobs = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in {*groups, "system"}}
        return {**knobs, **groups, "system": self.system.name}

    @classmethod
    def from_settings(cls, section: IndexSettings, *, system: SystemSpec) -> IndexParams:
        """Params from the ``[index]`` settings section and the system description; an unknown or
        ill-typed key names its field."""
        groups: dict[str, Any] = {}
        for name, params_type in (("metric", MetricParams), ("log", LogParams), ("trace", TraceParams),
                                  ("rank", RankWeights)):
            values = getattr(section, name)
            known = {f.name for f in dataclasses.fields(params_type)}
            unknown = sorted(set(values) - known)
            if unknown:
                raise SettingsError(f"setting 'index.{name}.{unknown[0]}': unknown; expected one of "
                                    f"{', '.join(sorted(known))}")
            try:
                groups[name] = TypeAdapter(params_type).validate_python(values, strict=False)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise SettingsError(f"setting 'index.{name}.{where}': {first['msg']}") from exc
        return cls(baseline_minutes=section.baseline_minutes, max_evidence=section.max_evidence,
                   brief_window_minutes=section.brief_window_minutes, system=system, **groups)
