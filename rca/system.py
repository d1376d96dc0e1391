"""The system under diagnosis, as a description its user owns: ``SystemSpec``.

Everything the tool must know about the *system* (not the challenge) lives in one TOML file:
its name and a paragraph for prompts, the services, stateful components and client-only
services, runtimes, the calls between components (storage calls, every call, a few
representative chains), the metric-family -> component map, how nodes and pods are named,
how trace client spans name their peer, the time zone of file names and where each fault
type can happen. The bundled file ``rca/system.toml`` describes the challenge's HipsterShop;
``[system] file`` in Settings points at another one (``rca system infer`` drafts one from
data; docs/system.md says how to write it).

The spec is built at the command-line edge (``system_from_settings``) and passed down like
Settings; nothing falls back to a default. ``bundled_system()`` is the cached bundled
description, asked for by name where HipsterShop is meant (the simulator, bench/). The fault
*vocabulary* (types, categories, aliases) is the challenge's and stays in ``rca.taxonomy``.
"""
from __future__ import annotations

import logging
import re
import tomllib
from collections.abc import Mapping
from datetime import tzinfo
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from rca.errors import InputError
from rca.pods import NODE_NAME, POD_PATTERNS, pod_service, service_of_pod

if TYPE_CHECKING:
    from rca.settings import Settings

log = logging.getLogger(__name__)

BUNDLED_NAME = "system.toml"
LEVELS: tuple[str, ...] = ("service", "pod", "node")

# The naming rule (rca/pods.py): Deployment pods, then StatefulSet / numbered pods; the nodes.
DEFAULT_POD_PATTERNS: tuple[str, ...] = POD_PATTERNS
DEFAULT_NODE_PATTERN = NODE_NAME


class SystemSpecError(InputError):
    """A system description that cannot be used; the message names the file and the field."""


class FaultPlacement(BaseModel):
    """Where one fault type can physically happen: its levels and what the component needs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    levels: tuple[Literal["service", "pod", "node"], ...]
    # "java": a JVM runtime (JVM faults); "storage": a stateful component (disk I/O faults).
    requires: Literal["java", "storage"] | None = None


class TraceNaming(BaseModel):
    """How a client span names the service it calls (``peer_service``) and how span services are spelled.

    The trace readers (``preprocess.readers``) apply it, given by their caller. A client span's
    ``peer.service`` tag names its peer as written; else ``rpc_service`` matched against the
    ``rpc.service`` tag, else ``db_system`` (a ``db.system`` tag value, any case -> the component:
    redis -> redis-cart), else ``operation`` against the operation name; group 1 of a regex is the
    peer's name (lower-cased with ``lowercase``); else, with ``peer_host``, the host the client
    connected to (OpenTelemetry's ``server.address``, ``net.peer.name`` or the URL's host): its
    first DNS label, lower-cased, never an IP address or ``localhost`` (``redis-cart:6379`` ->
    redis-cart, ``ts-order-service.default.svc.cluster.local`` -> ts-order-service).
    ``service_aliases`` renames a span's own service name. Nothing set (``TraceNaming()``):
    ``peer.service``, then the host; services as written.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    rpc_service: str | None = None
    operation: str | None = None
    lowercase: bool = True
    db_system: dict[str, str] = Field(default_factory=dict)
    service_aliases: dict[str, str] = Field(default_factory=dict)
    peer_host: bool = True
    """Name a peer by the host its client connected to, when nothing before names one (in Kubernetes,
    the callee's Service name); false for systems whose hosts are load balancers or gateways."""


class SystemSpec(BaseModel):
    """One system's description. Build with ``load_system`` / ``bundled_system``; frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = "<memory>"  # the file it came from, named in errors
    name: str
    description: str = ""
    services: tuple[str, ...]
    stateful: tuple[str, ...] = ()
    client_only: frozenset[str] = frozenset()
    runtimes: dict[str, str] = Field(default_factory=dict)
    storage_calls: tuple[tuple[str, str], ...] = ()
    # Every call between components, as the user knows it (``[calls] edges``): the ranker's call
    # graph where traces show none (a system without tracing, an uninstrumented caller).
    calls: tuple[tuple[str, str], ...] = ()
    call_chains: tuple[str, ...] = ()
    # Known background noise and other facts the model should read before the evidence.
    prompt_notes: tuple[str, ...] = ()
    metric_components: dict[str, str] = Field(default_factory=dict)
    node_pattern: str = DEFAULT_NODE_PATTERN
    node_description: str = ""
    pod_patterns: tuple[str, ...] = DEFAULT_POD_PATTERNS
    trace: TraceNaming = TraceNaming()
    file_timezone: str = "Asia/Shanghai"
    faults: dict[str, FaultPlacement]

    _node: re.Pattern[str] = PrivateAttr()
    _pods: tuple[re.Pattern[str], ...] = PrivateAttr()
    _service_cache: dict[str, str] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any, /) -> None:
        # Compiled once; validate_spec has already checked that every pattern compiles.
        self._node = re.compile(self.node_pattern)
        self._pods = tuple(re.compile(p) for p in self.pod_patterns)

    # ----------------------------------------------------------------- names

    @property
    def components(self) -> tuple[str, ...]:
        """Every service and stateful component that can be an answer (nodes and pods aside)."""
        return tuple(dict.fromkeys((*self.services, *self.stateful)))

    def is_node(self, name: str) -> bool:
        return bool(self._node.match(name))

    def service_of(self, component: str) -> str:
        """Service owning a pod (``cartservice-1``, ``ts-order-service-5b8c7d9f4-x7k2q``); services and nodes map to themselves."""
        cached = self._service_cache.get(component)
        if cached is not None:
            return cached
        owner = service_of_pod(component, node=self._node, pods=self._pods)
        # Hot path (ranking, detectors); names are few, so the cache stays small.
        self._service_cache[component] = owner
        return owner

    def level_of(self, component: str) -> str:
        """``node``, ``pod`` or ``service`` for a component name."""
        if self.is_node(component):
            return "node"
        return "pod" if pod_service(component, self._pods) is not None else "service"

    def runtime_of(self, component: str) -> str | None:
        return self.runtimes.get(self.service_of(component))

    def is_stateful(self, component: str) -> bool:
        return self.service_of(component) in self.stateful

    def component_of_metric_family(self, family: str) -> str | None:
        """The component a metric family describes when its rows name no pod (``infra_tidb`` -> ``tidb-tidb``)."""
        return self.metric_components.get(family)

    def file_zone(self) -> tzinfo:
        """The zone file days and hours are named in (rca.timeutil functions take it as ``zone``)."""
        return ZoneInfo(self.file_timezone)

    # ----------------------------------------------------------------- faults

    def applicable_fault_types(self, component: str) -> list[str]:
        """Fault types that can physically happen to ``component``, in taxonomy order.

        The component's level must be one of the type's levels; JVM faults need a Java
        service, I/O faults a stateful component. This filters impossible pairs only.
        """
        from rca.taxonomy import FAULT_TYPES

        level = self.level_of(component)
        allowed = []
        for fault in FAULT_TYPES:
            placement = self.faults.get(fault)
            if placement is None or level not in placement.levels:
                continue
            if placement.requires == "java" and self.runtime_of(component) != "java":
                continue
            if placement.requires == "storage" and not self.is_stateful(component):
                continue
            allowed.append(fault)
        return allowed

    def possible_fault_types(self) -> list[str]:
        """Fault types that can hit some component of this system (a catalogue offers only these)."""
        from rca.taxonomy import FAULT_TYPES

        has_java = any(r == "java" for r in self.runtimes.values())
        possible = []
        for fault in FAULT_TYPES:
            placement = self.faults.get(fault)
            if placement is None or not placement.levels:
                continue
            if placement.requires == "java" and not has_java:
                continue
            if placement.requires == "storage" and not self.stateful:
                continue
            possible.append(fault)
        return possible

    # ----------------------------------------------------------------- prompts

    def prompt_paragraph(self) -> str:
        """The system paragraph of a prompt (``$system``), rendered from the spec alone: name,
        description (else the services and stateful components), nodes, call chains and notes."""
        description = self.description.strip()
        lines = [f"System: {self.name}." + (f" {description}" if description else "")]
        # The description is the user's own summary of the components; the lists are the fallback
        # (every prompt token counts on a 4k-context local model).
        if not description:
            lines.append(f"Services: {', '.join(self.services)}.")
            if self.stateful:
                lines.append(f"Stateful components: {', '.join(self.stateful)}.")
        if self.node_description:
            lines.append(f"Kubernetes nodes: {self.node_description}.")
        if self.call_chains:
            lines.append(f"Call chains (a fault propagates UP them): {'; '.join(self.call_chains)}.")
        lines.extend(self.prompt_notes)
        return "\n".join(lines)

    def prompt_values(self) -> dict[str, str]:
        """Values a prompt template may use: ``$system`` (the paragraph) and ``$system_name``."""
        return {"system": self.prompt_paragraph(), "system_name": self.name}


# --------------------------------------------------------------------------- loading


def _table(raw: Mapping[str, Any], key: str, *, source: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, Mapping):
        raise SystemSpecError(f"{source}: [{key}] must be a table, got {type(value).__name__}")
    return dict(value)


def _check_regex(pattern: object, *, source: str, field: str, group: str | None = None) -> str:
    if not isinstance(pattern, str):
        raise SystemSpecError(f"{source}: {field} must be a string regex, got {pattern!r}")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise SystemSpecError(f"{source}: {field}: bad regex {pattern!r}: {exc}") from exc
    if group is not None and group not in compiled.groupindex:
        raise SystemSpecError(f"{source}: {field}: regex {pattern!r} has no (?P<{group}>...) group")
    if group is None and field.startswith("traces.") and compiled.groups < 1:
        raise SystemSpecError(f"{source}: {field}: regex {pattern!r} needs a group for the peer name")
    return pattern


def _fault_placements(raw: Mapping[str, Any], *, source: str) -> dict[str, FaultPlacement]:
    """The file's [faults] over the bundled ones: a file lists only what differs (``levels = []`` disables one)."""
    from rca.taxonomy import FAULT_TYPES, canonical_fault_type

    placements = dict(bundled_system().faults) if source != _bundled_source() else {}
    for name, value in raw.items():
        fault = canonical_fault_type(name)
        if fault not in FAULT_TYPES:
            raise SystemSpecError(f"{source}: faults.{name!r}: unknown fault type; expected one of {sorted(FAULT_TYPES)}")
        if not isinstance(value, Mapping):
            raise SystemSpecError(f"{source}: faults.{name!r} must be a table like {{ levels = [\"service\", \"pod\"] }}")
        try:
            placements[fault] = FaultPlacement.model_validate(dict(value))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise SystemSpecError(f"{source}: faults.{name!r}.{where}: {first['msg']}") from exc
    missing = set(FAULT_TYPES) - set(placements)
    if missing:
        raise SystemSpecError(f"{source}: [faults] lacks {sorted(missing)}")
    return placements


def spec_from_toml(raw: Mapping[str, Any], *, source: str) -> SystemSpec:
    """Validate a parsed description into a SystemSpec; errors name ``source`` and the field."""
    known = {"system", "services", "runtimes", "calls", "metrics", "tidb", "nodes", "pods", "traces", "faults"}
    unknown = set(raw) - known
    if unknown:
        raise SystemSpecError(f"{source}: unknown table(s) {sorted(unknown)}; expected some of {sorted(known)}")
    system = _table(raw, "system", source=source)
    services = _table(raw, "services", source=source)
    calls = _table(raw, "calls", source=source)
    nodes = _table(raw, "nodes", source=source)
    pods = _table(raw, "pods", source=source)
    traces = _table(raw, "traces", source=source)
    # [tidb] is the old name of [metrics] components (the challenge's TiDB families).
    metric_components = {**_table(raw, "tidb", source=source),
                         **_table(_table(raw, "metrics", source=source), "components", source=source)}

    app = services.get("app")
    if not isinstance(app, list) or not app or not all(isinstance(s, str) and s for s in app):
        raise SystemSpecError(f"{source}: services.app must be a non-empty list of service names")
    stateful = services.get("stateful", [])
    components = set(app) | set(stateful)
    client_only = services.get("client_only", [])
    if not set(client_only) <= components:
        raise SystemSpecError(f"{source}: services.client_only names unknown service(s) {sorted(set(client_only) - components)}")
    runtimes = _table(raw, "runtimes", source=source)
    if not set(runtimes) <= components:
        raise SystemSpecError(f"{source}: [runtimes] names unknown service(s) {sorted(set(runtimes) - components)}")
    storage = calls.get("storage", [])
    for edge in storage:
        if not (isinstance(edge, list) and len(edge) == 2 and set(edge) <= components):
            raise SystemSpecError(f"{source}: calls.storage: {edge!r} must be [caller, callee] of known components")
    chains = [_chain(chain, components=components, source=source, field="calls.chains")
              for chain in calls.get("chains", [])]
    edges = [_chain(edge, components=components, source=source, field="calls.edges")
             for edge in calls.get("edges", [])]
    if not set(metric_components.values()) <= components:
        raise SystemSpecError(f"{source}: metrics.components maps to unknown component(s) "
                           f"{sorted(set(metric_components.values()) - components)}")
    node_pattern = _check_regex(nodes.get("pattern", DEFAULT_NODE_PATTERN), source=source, field="nodes.pattern")
    pod_patterns = pods.get("patterns", list(DEFAULT_POD_PATTERNS))
    if not isinstance(pod_patterns, list) or not pod_patterns:
        raise SystemSpecError(f"{source}: pods.patterns must be a non-empty list of regexes")
    for i, pattern in enumerate(pod_patterns):
        _check_regex(pattern, source=source, field=f"pods.patterns[{i}]", group="service")
    for key in ("rpc_service", "operation"):
        if traces.get(key) is not None:
            _check_regex(traces[key], source=source, field=f"traces.{key}")
    zone = system.get("timezone", "Asia/Shanghai")
    try:
        ZoneInfo(str(zone))
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise SystemSpecError(f"{source}: system.timezone: unknown time zone {zone!r}") from exc

    try:
        return SystemSpec(
            source=source,
            name=system.get("name", "the system"),
            description=system.get("description", ""),
            services=tuple(app),
            stateful=tuple(stateful),
            client_only=frozenset(client_only),
            runtimes=runtimes,
            storage_calls=tuple((a, b) for a, b in storage),
            calls=tuple(dict.fromkeys(pair for chain in edges for pair in zip(chain, chain[1:]))),
            call_chains=tuple(" -> ".join(chain) for chain in chains),
            prompt_notes=tuple(str(n) for n in system.get("notes", [])),
            metric_components=metric_components,
            node_pattern=node_pattern,
            node_description=nodes.get("description", ""),
            pod_patterns=tuple(pod_patterns),
            trace=TraceNaming.model_validate(traces),
            file_timezone=str(zone),
            faults=_fault_placements(_table(raw, "faults", source=source), source=source),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SystemSpecError(f"{source}: field '{where}': {first['msg']}") from exc


def _chain(text: object, *, components: set[str], source: str, field: str) -> list[str]:
    """``"a -> b [-> c]"`` as its names, callers first; every name a known component."""
    names = [part.strip() for part in str(text).split("->")]
    if len(names) < 2 or not set(names) <= components:
        raise SystemSpecError(f"{source}: {field}: {text!r} must be 'a -> b [-> c]' over known components "
                              f"(unknown: {sorted(set(names) - components)})")
    return names


def _bundled_source() -> str:
    return f"rca/{BUNDLED_NAME}"


@cache
def bundled_system() -> SystemSpec:
    """The bundled HipsterShop description (``rca/system.toml``), read once on first use."""
    text = resources.files("rca").joinpath(BUNDLED_NAME).read_text(encoding="utf-8")
    return spec_from_toml(tomllib.loads(text), source=_bundled_source())


@cache
def _load_file(path: Path, mtime_ns: int) -> SystemSpec:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SystemSpecError(f"{path}: cannot read system description: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SystemSpecError(f"{path}: invalid TOML: {exc}") from exc
    spec = spec_from_toml(raw, source=str(path))
    log.info("system description %s: %s, %d services", path, spec.name, len(spec.services))
    return spec


def load_system(path: Path | None = None) -> SystemSpec:
    """The description in ``path`` (None: the bundled one). Cached per file version."""
    if path is None:
        return bundled_system()
    path = Path(path)
    if not path.is_file():
        raise SystemSpecError(f"{path}: system description not found ([system] file)")
    return _load_file(path.resolve(), path.stat().st_mtime_ns)


def system_from_settings(settings: Settings) -> SystemSpec:
    """The description ``[system] file`` names, or the bundled one."""
    return load_system(settings.system.file)

