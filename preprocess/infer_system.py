"""Draft a system description (``rca/system.py``'s TOML) from a dataset in the canonical layout.

    rca system infer --data-dir D --out system.toml

What the data shows is learned: services (span services, APM objects, log pods), pods and
their services, pod -> node placement, the call graph (cross-service parent/child spans and
client spans' peers), storage components (client-span peers named like a database or cache
that never serve a span themselves) and runtimes where the data gives them away, strongest
first: the language the spans' instrumentation states (OpenTelemetry's ``telemetry.sdk.language``,
a Jaeger client's ``jaeger.version``), JVM metric names, then log stack traces and logger names
(Java, Python tracebacks, Go panics, Node.js and .NET stack frames). The result is a commented
TOML for a person to review; ``rca.system.load_system`` loads it as it is.

Spans are read with the ``[traces]`` of a description given (``spec``), else with none: a
client span names its peer by its ``peer.service`` tag, else by the host it connected to
(``server.address``: the callee's Service name), services as written. The ``rpc.service``,
``db.system`` and host values of client spans that then name no peer are listed in the drafted
``[traces]``, with the line that would name them. A callee named by the host alone (a database,
a cache, any service that is not traced) is a call edge like any other.
"""
from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import polars as pl

from preprocess import layout
from preprocess.readers import read_day
from preprocess.schema import SPAN_PEER_TAG_KEYS, language_key
from rca.errors import DataError
from rca.pods import pod_service
from rca.system import SystemSpec, TraceNaming, bundled_system

log = logging.getLogger(__name__)

# A client-span peer that never serves a span and is named like one of these is storage.
_STORAGE_WORDS = re.compile(r"redis|mysql|mariadb|postgres|mongo|tidb|tikv|cassandra|memcache|elastic|etcd|db\b|sql")
# Stack-trace and metric signatures of a runtime, strongest first.
_RUNTIME_LOG_SIGNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("java", re.compile(r"\bjava\.(lang|io|util|net)\.|\n?\s+at [a-z][\w$]*(\.[\w$]+)+\([\w$]+\.java:\d+\)|Exception in thread \"")),
    # A JVM's logging gives it away without an exception: Tomcat's request threads
    # ("http-nio-8080-exec-1", Spring Boot's "[nio-8080-exec-1]") and Spring's own loggers.
    ("java", re.compile(r"\b(?:http-)?nio-\d+-exec-\d+\b|\borg\.springframework\.|\bo\.s\.(?:web|b|boot|c|data)\.")),
    ("python", re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\.py\", line \d+")),
    ("go", re.compile(r"\bgoroutine \d+ \[|\bpanic: |\.go:\d+\b")),
    ("nodejs", re.compile(r"\bat .+ \(?/[^)]*\.js:\d+:\d+\)?|node_modules/")),
    ("csharp", re.compile(r"\bSystem\.[A-Z]\w*Exception\b|\.cs:line \d+")),
)
_JVM_METRIC = re.compile(r"jvm|java_lang|gc_pause|garbage_collect", re.IGNORECASE)
# The runtimes of the languages an OpenTelemetry SDK states (``telemetry.sdk.language``, the semantic
# conventions' values); the others (cpp, erlang, php, ruby, rust, swift, webjs) run no fault type of
# their own here: listed in the log, not drafted.
_SDK_RUNTIMES: dict[str, str] = {"java": "java", "python": "python", "go": "go", "nodejs": "nodejs", "dotnet": "csharp"}
# The runtimes of the Jaeger clients, by the language their ``jaeger.version`` starts with (``Java-1.8.1``).
_JAEGER_CLIENT_RUNTIMES: dict[str, str] = {"java": "java", "go": "go", "python": "python", "node": "nodejs",
                                           "csharp": "csharp"}


class InferError(DataError):
    """A dataset from which no system description can be drafted; the message names the directory."""


@dataclass
class InferredSystem:
    """What the data shows, before it is written out for review."""

    services: list[str] = field(default_factory=list)
    stateful: list[str] = field(default_factory=list)
    client_only: list[str] = field(default_factory=list)
    pods: dict[str, str] = field(default_factory=dict)  # pod -> service
    placement: dict[str, list[str]] = field(default_factory=dict)  # pod -> nodes it ran on
    nodes: list[str] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)  # (caller, callee), by call count
    runtimes: dict[str, str] = field(default_factory=dict)
    runtime_evidence: dict[str, str] = field(default_factory=dict)
    days: list[str] = field(default_factory=list)
    # Pod-name rules learned from spans that name both a pod and its service, where the given
    # rules name the pod otherwise (``cart_0`` of ``cart``); they go before the given ones.
    pod_patterns: list[str] = field(default_factory=list)
    unnamed_pods: dict[str, str] = field(default_factory=dict)  # pod -> its spans' service, no rule names it
    trace: TraceNaming = field(default_factory=TraceNaming)  # the [traces] the spans were read with
    # Tag (``rpc.service``, ``db.system``) -> value -> client spans carrying it whose peer ``trace`` does not name.
    unnamed_peers: dict[str, dict[str, int]] = field(default_factory=dict)
    newest: datetime | None = None  # the newest row's time (UTC) in the days read; None when they hold none
    # Calls added from a service mesh's counts (``with_mesh_calls``), not seen in the spans, and the
    # query that counted them; the mesh's workloads that are no component here (not added).
    mesh_edges: list[tuple[str, str]] = field(default_factory=list)
    mesh_query: str | None = None
    mesh_source: str | None = None  # the server and the instant the query was evaluated at
    mesh_unknown: list[str] = field(default_factory=list)

    @property
    def unreached_stateful(self) -> list[str]:
        """Stateful components no seen call reaches: the data does not say who uses them.

        The release's layout traces no call into a database, so its TiDB shows up only in its own
        metrics; without a declared caller the ranker reads a store's fault as its caller's own.
        """
        reached = {callee for _, callee in self.edges}
        return [s for s in self.stateful if s not in reached]


def with_runtimes(inferred: InferredSystem, *, given: Sequence[str]) -> InferredSystem:
    """``inferred`` with the runtimes a person knows (``SERVICE=RUNTIME``; ``*`` for every service).

    A runtime given for a service by name wins over the data's evidence (whoever names one service
    knows it; the draft's comment keeps what the data said, or only the data's evidence where it
    agrees), the first given for it if several are; ``*`` then fills the services still without
    one (a service that never logged a stack trace and states no language looks like any other).
    """
    parsed: list[tuple[str, str, str]] = []
    for spec in given:
        service, sep, runtime = (part.strip() for part in spec.partition("="))
        if not sep or not service or not runtime:
            raise InferError(f"--runtime {spec!r}: expected SERVICE=RUNTIME, e.g. ts-order-service=java or '*=java'")
        if service != "*" and service not in inferred.services:
            raise InferError(f"--runtime {spec!r}: no service {service!r} in the data")
        parsed.append((service, runtime, spec))
    named: set[str] = set()
    for service, runtime, spec in parsed:
        if service == "*" or service in named:
            continue
        named.add(service)
        found = inferred.runtimes.get(service)
        if found == runtime:
            continue  # the data says so too: its evidence stays
        said = f" (the data said {found}: {inferred.runtime_evidence.get(service, '')})" if found is not None else ""
        inferred.runtimes[service] = runtime
        inferred.runtime_evidence[service] = f"given: --runtime {spec}{said}"
    for service, runtime, spec in parsed:
        if service != "*":
            continue
        for name in inferred.services:
            if name not in inferred.runtimes:
                inferred.runtimes[name] = runtime
                inferred.runtime_evidence[name] = f"given: --runtime {spec}"
    return inferred


def with_mesh_calls(inferred: InferredSystem, *, calls: Sequence[tuple[str, str, float]],
                    query: str, source: str) -> InferredSystem:
    """``inferred`` with the calls a service mesh counted (``preprocess.mesh_calls``; caller, callee, count;
    most first) after the ones the spans showed, each once. A workload that is no component of the
    draft is listed in ``mesh_unknown``, its calls left out: a call through an unknown component
    would not load."""
    known = {*inferred.services, *inferred.stateful, *inferred.client_only}
    seen = set(inferred.edges)
    unknown: set[str] = set()
    for caller, callee, _ in calls:
        strangers = {caller, callee} - known
        if strangers:
            unknown |= strangers
            continue
        if (caller, callee) not in seen:
            seen.add((caller, callee))
            inferred.edges.append((caller, callee))
            inferred.mesh_edges.append((caller, callee))
    inferred.mesh_query, inferred.mesh_source = query, source
    inferred.mesh_unknown = sorted(unknown)
    log.info("the mesh added %d call edge(s); %d workload(s) are no component of the draft",
             len(inferred.mesh_edges), len(inferred.mesh_unknown))
    return inferred


def _newest(frame: pl.DataFrame | None, column: str, newest: datetime | None) -> datetime | None:
    """The later of ``newest`` and ``frame``'s latest ``column``."""
    if frame is None or column not in frame.columns:
        return newest
    latest = frame[column].max()
    if not isinstance(latest, datetime):
        return newest
    return latest if newest is None or latest > newest else newest


def _frames(data_dir: Path, days: list[str], family: str, *, naming: TraceNaming) -> pl.DataFrame | None:
    frames = []
    for day in days:
        # Spans with their raw peer tags: the values no rule names are listed in the draft.
        result = read_day(layout.day_dir(data_dir, day), family, naming=naming, peer_tags=True, skip_unreadable=True,
                          report_missing=False)
        if result.frame.height:
            frames.append(result.frame)
    return pl.concat(frames, how="vertical_relaxed") if frames else None


def _call_edges(spans: pl.DataFrame) -> Counter[tuple[str, str]]:
    """Cross-service calls: parent span's service -> child span's service, and client span -> its peer."""
    calls: Counter[tuple[str, str]] = Counter()
    parents = spans.select(pl.col("trace_id"), pl.col("span_id").alias("parent_span_id"),
                           pl.col("service").alias("caller"))
    joined = spans.join(parents, on=["trace_id", "parent_span_id"], how="inner")
    for caller, callee, n in joined.filter(pl.col("caller") != pl.col("service")).group_by(
            ["caller", "service"]).len().iter_rows():
        calls[(caller, callee)] += n
    peers = spans.filter(pl.col("peer_service").is_not_null() & (pl.col("peer_service") != pl.col("service")))
    for caller, callee, n in peers.group_by(["service", "peer_service"]).len().iter_rows():
        calls[(caller, callee)] += n
    return calls


def unnamed_peers(spans: pl.DataFrame) -> dict[str, dict[str, int]]:
    """Tag -> value -> how many client spans carry it and name no peer (``spans`` read with ``peer_tags``)."""
    unnamed = spans.filter((pl.col("span_kind") == "client") & pl.col("peer_service").is_null())
    found: dict[str, dict[str, int]] = {}
    for column, key in SPAN_PEER_TAG_KEYS.items():
        counts = unnamed.group_by(column).len().drop_nulls(column).sort(["len", column], descending=[True, False])
        if counts.height:
            found[key] = dict(counts.iter_rows())
    return found


def stated_runtime(language: str) -> str | None:
    """The runtime a span's stated language (``sdk_language``, as written) names, else None (not one we offer
    faults for): OpenTelemetry's ``java`` / ``dotnet`` ..., a Jaeger client's ``Java-1.8.1`` / ``Node-3.18.1``."""
    if language_key(language) == "jaeger.version":
        return _JAEGER_CLIENT_RUNTIMES.get(language.partition("-")[0].lower())
    return _SDK_RUNTIMES.get(language.strip().lower())


def runtime_from_spans(spans: pl.DataFrame) -> dict[str, tuple[str, str]]:
    """Service -> (runtime, evidence) from the language its spans' instrumentation states (``spans`` read with
    ``peer_tags``): the instrumentation says so itself, the strongest evidence there is.

    A service stating two languages (two SDKs, a service name shared by two deployments) takes the runtime of
    the most spans, and the evidence lists every value stated with its count. A service whose most spans
    state a language that is no runtime here gets none (listed in the log): its few other spans do not
    outvote it.
    """
    counts = (spans.drop_nulls(["service", "sdk_language"]).group_by("service", "sdk_language").len()
              .sort(["service", "len", "sdk_language"], descending=[False, True, False]))
    found: dict[str, tuple[str, str]] = {}
    unknown: dict[str, str] = {}
    for (service,), stated in counts.group_by("service", maintain_order=True):
        values = list(stated.select("sdk_language", "len").iter_rows())
        # Values naming one runtime (``java``, ``Java-1.8.1``) count together; an unknown one is its own.
        votes: Counter[str] = Counter()
        for language, n in values:
            votes[stated_runtime(language) or f"?{language}"] += n
        runtime = min(votes, key=lambda name: (-votes[name], name))
        if runtime.startswith("?"):
            unknown[service] = runtime[1:]
            continue
        found[service] = (runtime, "spans: " + _stated(values))
    if unknown:
        log.info("spans of %d service(s) state a language that is no runtime with fault types of its own, "
                 "not drafted: %s", len(unknown), ", ".join(f"{s} ({v})" for s, v in sorted(unknown.items())))
    return found


def _stated(values: Sequence[tuple[str, int]]) -> str:
    """``telemetry.sdk.language = "java"``; with several values each with its count, grouped by key, most first."""
    if len(values) == 1:
        return f"{language_key(values[0][0])} = {_s(values[0][0])}"
    by_key: dict[str, list[str]] = {}
    for language, n in values:
        by_key.setdefault(language_key(language), []).append(f"{_s(language)} ({n} spans)")
    return "; ".join(f"{key} = {', '.join(listed)}" for key, listed in by_key.items())


def _runtime_from_logs(logs: pl.DataFrame, spec: SystemSpec) -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for pod, message in logs.select("pod", "message").drop_nulls().iter_rows():
        service = spec.service_of(pod)
        if service in found:
            continue
        for runtime, sign in _RUNTIME_LOG_SIGNS:
            match = sign.search(message)
            if match:
                found[service] = (runtime, f"log of {pod}: {match.group(0).strip()[:60]!r}")
                break
    return found


def learned_pod_patterns(recorded: dict[str, str], *, spec: SystemSpec) -> tuple[list[str], dict[str, str]]:
    """Pod-name rules for the pods whose service, as their spans record it, ``spec``'s rules miss;
    and the pods (with their services) that no rule can name.

    A rule is ``^(?P<service>a|b)<separator><suffix>$``: the services whose pods are named by one
    separator (``_``, ``.``, ...) and one suffix shape (an ordinal, or anything). A rule that would
    name a service seen in the spans, or a pod they record, otherwise than they do (``cart_db``
    beside ``cart``'s pods ``cart_0``, ``cart_1``: ``^(?P<service>cart)_.+$``) is not kept.
    """
    missed = {pod: service for pod, service in recorded.items() if spec.service_of(pod) != service}
    shapes: dict[tuple[str, str], set[str]] = {}
    for pod, service in missed.items():
        rest = pod[len(service):] if pod.startswith(service) else ""
        if len(rest) >= 2 and not rest[0].isalnum():
            suffix = r"\d+" if rest[1:].isdigit() else ".+"
            shapes.setdefault((re.escape(rest[0]), suffix), set()).add(service)
    expected = {**{service: service for service in recorded.values()}, **recorded}
    patterns = []
    for (separator, suffix), owners in sorted(shapes.items()):
        alternatives = "|".join(re.escape(name) for name in sorted(owners, key=lambda name: (-len(name), name)))
        pattern = f"^(?P<service>{alternatives}){separator}{suffix}$"
        rule = [re.compile(pattern)]
        if all(pod_service(name, rule) in (None, want) for name, want in expected.items()):
            patterns.append(pattern)
    rules = [re.compile(pattern) for pattern in patterns]
    unnamed = {pod: service for pod, service in missed.items() if pod_service(pod, rules) != service}
    return patterns, unnamed


def _with_pod_patterns(spec: SystemSpec, patterns: list[str]) -> SystemSpec:
    """``spec`` with ``patterns`` tried before its own pod-name rules."""
    return SystemSpec.model_validate({**spec.model_dump(), "pod_patterns": (*patterns, *spec.pod_patterns)})


def infer_system(data_dir: Path, *, days: list[str] | None = None, spec: SystemSpec | None = None) -> InferredSystem:
    """Learn a system's shape from the days of ``data_dir`` (all present by default).

    ``spec`` supplies the pod-name rules used to group pods into services (default: the bundled
    generic rules, which know StatefulSet and Deployment names) and the ``[traces]`` the spans are
    read with (default: none, as a system not yet described has: peers from ``peer.service``
    only; not the bundled HipsterShop rules). Where spans name a pod's service and those rules
    name it otherwise, rules learned from the spans go first (``learned_pod_patterns``), for the
    logs and metrics read after them and in the written file.
    """
    data_dir = Path(data_dir)
    naming = spec.trace if spec is not None else TraceNaming()
    spec = spec or bundled_system()
    if not data_dir.is_dir():
        raise InferError(f"{data_dir}: no such data directory")
    chosen = days or layout.list_days(data_dir)
    if not chosen:
        raise InferError(f"{data_dir}: no day directories (YYYY-MM-DD) to learn from")
    out = InferredSystem(days=list(chosen), trace=naming)
    services: Counter[str] = Counter()
    pods: dict[str, str] = {}
    placement: dict[str, set[str]] = {}
    nodes: set[str] = set()
    calls: Counter[tuple[str, str]] = Counter()

    spans = _frames(data_dir, chosen, "trace", naming=naming)
    out.newest = _newest(spans, "start", out.newest)
    serving: set[str] = set()
    from_spans: dict[str, tuple[str, str]] = {}
    if spans is not None:
        out.unnamed_peers = unnamed_peers(spans)
        from_spans = runtime_from_spans(spans)
        services.update(dict(spans.group_by("service").len().drop_nulls().iter_rows()))
        serving = set(spans.filter(pl.col("span_kind") != "client")["service"].drop_nulls().to_list())
        recorded: dict[str, str] = {}
        for pod, service, node in spans.select("pod", "service", "node").unique().drop_nulls(["pod"]).iter_rows():
            pods.setdefault(pod, service or spec.service_of(pod))
            if service:
                recorded.setdefault(pod, service)
            if node:
                placement.setdefault(pod, set()).add(node)
                nodes.add(node)
        calls = _call_edges(spans)
        out.pod_patterns, out.unnamed_pods = learned_pod_patterns(recorded, spec=spec)
        if out.pod_patterns:
            spec = _with_pod_patterns(spec, out.pod_patterns)
        if out.unnamed_pods:
            log.warning("%d pod(s) whose service no pod-name rule names (e.g. %s of %s): add a [pods] pattern",
                        len(out.unnamed_pods), *next(iter(out.unnamed_pods.items())))

    logs = _frames(data_dir, chosen, "log", naming=naming)
    out.newest = _newest(logs, "time", out.newest)
    from_logs: dict[str, tuple[str, str]] = {}
    if logs is not None:
        for pod, node in logs.select("pod", "node").unique().drop_nulls(["pod"]).iter_rows():
            pods.setdefault(pod, spec.service_of(pod))
            if node:
                placement.setdefault(pod, set()).add(node)
                nodes.add(node)
        from_logs = _runtime_from_logs(logs, spec)

    apm = _frames(data_dir, chosen, "apm", naming=naming)
    out.newest = _newest(apm, "time", out.newest)
    if apm is not None:
        for kind, name in apm.select("object_type", "object_id").unique().drop_nulls().iter_rows():
            if kind == "pod":
                pods.setdefault(name, spec.service_of(name))
            else:
                services[name] += 0

    infra = _frames(data_dir, chosen, "infra", naming=naming)
    out.newest = _newest(infra, "time", out.newest)
    from_metrics: dict[str, str] = {}
    if infra is not None:
        nodes.update(infra["node"].drop_nulls().unique().to_list())
        for component in infra["component"].drop_nulls().unique().to_list():
            if spec.is_node(component) or component in nodes:
                continue
            if spec.level_of(component) == "pod":
                pods.setdefault(component, spec.service_of(component))
            else:
                services[component] += 0  # a component without pods (the release's TiDB families)
        for component, kpi in infra.select("component", "kpi_key").unique().drop_nulls().iter_rows():
            if _JVM_METRIC.search(kpi) and not spec.is_node(component):
                from_metrics.setdefault(spec.service_of(component), f"metric {kpi} of {component}")

    for service in pods.values():
        services[service] += 0
    for caller, callee in calls:
        services[caller] += 0
        services[callee] += 0
    # Seen only as the peer of client spans: the service never emits a span of its own (its pods
    # may still log and report metrics).
    peers_only = ({callee for (_, callee) in calls} - serving) if spans is not None else set()
    out.stateful = sorted(s for s in services if _STORAGE_WORDS.search(s))
    out.client_only = sorted(s for s in peers_only if s not in out.stateful)
    out.services = sorted(s for s in services if s not in out.stateful and s not in nodes and not spec.is_node(s))
    out.pods = dict(sorted(pods.items()))
    out.placement = {pod: sorted(found) for pod, found in sorted(placement.items())}
    out.nodes = sorted(nodes)
    # Most frequent first, ties by name: the drafted file must be the same on every run.
    out.edges = [edge for edge, _ in sorted(calls.items(), key=lambda item: (-item[1], item[0]))]
    # Strongest first: what the instrumentation states, then JVM metrics, then log signs.
    for service, (runtime, evidence) in from_spans.items():
        out.runtimes[service], out.runtime_evidence[service] = runtime, evidence
    for service, evidence in from_metrics.items():
        if service not in out.runtimes:
            out.runtimes[service], out.runtime_evidence[service] = "java", evidence
    for service, (runtime, evidence) in from_logs.items():
        if service not in out.runtimes:
            out.runtimes[service], out.runtime_evidence[service] = runtime, evidence
    if not out.services:
        raise InferError(f"{data_dir}: days {', '.join(chosen)} show no service (no spans, logs, APM or pods)")
    log.info("inferred %d services, %d stateful, %d pods, %d nodes, %d call edges from %s",
             len(out.services), len(out.stateful), len(out.pods), len(out.nodes), len(out.edges), data_dir)
    return out


def node_pattern(nodes: list[str]) -> str:
    """A regex matching the node names seen, digits generalised (``aiops-k8s-03`` -> ``aiops-k8s-\\d+``)."""
    # Only a trailing number is a node's ordinal; digits inside a word ("k8s") are part of the name.
    shapes = sorted({re.escape(re.sub(r"\d+$", "", name)) + (r"\d+" if re.search(r"\d$", name) else "")
                     for name in nodes})
    return "^(" + "|".join(shapes) + ")$" if shapes else r"^$"


def _chains(edges: list[tuple[str, str]], *, limit: int = 3) -> list[str]:
    """Up to ``limit`` longest simple call paths from the roots (services nobody calls)."""
    callees: dict[str, list[str]] = {}
    for caller, callee in edges:
        callees.setdefault(caller, []).append(callee)
    called = {callee for _, callee in edges}
    roots = [caller for caller in callees if caller not in called] or list(callees)[:1]
    paths: list[list[str]] = []

    def walk(path: list[str]) -> None:
        nexts = [c for c in callees.get(path[-1], []) if c not in path]
        if not nexts:
            if len(path) > 1:
                paths.append(path)
            return
        for callee in nexts:
            walk([*path, callee])

    for root in roots:
        walk([root])
    paths.sort(key=len, reverse=True)
    chosen: list[list[str]] = []
    for path in paths:
        # Prefer chains that end somewhere new, so the few shown cover more of the graph.
        if all(path[-1] != other[-1] for other in chosen):
            chosen.append(path)
        if len(chosen) == limit:
            break
    return [" -> ".join(path) for path in chosen]


def _node_description(nodes: list[str]) -> str:
    return ", ".join(nodes) if len(nodes) <= 3 else f"{nodes[0]}, {nodes[1]}, ... {nodes[-1]} ({len(nodes)} nodes)"


def _s(value: str) -> str:
    return json.dumps(value)  # a TOML basic string (JSON escapes are TOML escapes for these names)


def _list(values: list[str]) -> str:
    return "[" + ", ".join(_s(v) for v in values) + "]"


def render_toml(inferred: InferredSystem, *, data_dir: Path, name: str) -> str:
    """The inferred description as a commented TOML that ``rca.system.load_system`` reads."""
    lines = [
        f"# System description drafted by `rca system infer` from {data_dir} (days {', '.join(inferred.days)}).",
        "# Review it: every list below is what the data showed, not what the system is. Fill in the",
        "# description, check stateful/client_only, add runtimes the data did not reveal, and trim",
        "# the call chains to the few a person would draw. docs/system.md explains each field.",
        "",
        "[system]",
        f"name = {_s(name)}",
        "# One paragraph for the prompts: what the system is and runs on.",
        f"description = {_s(f'{name}: {len(inferred.services)} services on Kubernetes.')}",
        "# Zone that day directories and hour files are named in (contents are UTC).",
        'timezone = "Asia/Shanghai"',
        "",
        "[services]",
        "# Every service seen in spans, APM objects or log pods.",
        f"app = {_list(inferred.services)}",
        "# Components named like a database or cache: can be answers, take I/O faults.",
        f"stateful = {_list(inferred.stateful)}",
        "# Peers seen only as client spans of their callers.",
        f"client_only = {_list(inferred.client_only)}",
        "",
        "[runtimes]",
        "# Only where the data gave it away; JVM faults are offered only for java services.",
    ]
    for service, runtime in sorted(inferred.runtimes.items()):
        lines.append(f"# {inferred.runtime_evidence.get(service, '')}")
        lines.append(f"{_s(service)} = {_s(runtime)}")
    storage = [(a, b) for a, b in inferred.edges if b in inferred.stateful]
    lines += [
        "",
        "[calls]",
        "# Calls into storage: traces rarely show them (a client span naming its database), so they always join the ranker's call graph.",
        "storage = [" + ", ".join(f"[{_s(a)}, {_s(b)}]" for a, b in storage) + "]",
    ]
    if inferred.unreached_stateful:
        lines += [
            f"# No call seen reaches {', '.join(inferred.unreached_stateful)}: add who calls them above, e.g.",
            f"# [\"SERVICE\", {_s(inferred.unreached_stateful[0])}]. Until then a fault of theirs is blamed on their callers.",
        ]
    if inferred.mesh_query is not None:
        added = ", ".join(f"{a} -> {b}" for a, b in inferred.mesh_edges) or "none the spans had not shown"
        lines += [
            f"# From the service mesh, not the spans (calls here and in storage): {added}.",
            f"# Counted by (at {inferred.mesh_source}): {inferred.mesh_query}",
        ]
        if inferred.mesh_unknown:
            lines.append(f"# The mesh also names workloads that are no service here (their calls not added): "
                         f"{', '.join(inferred.mesh_unknown)}.")
    lines += [
        "# Every other call seen, most frequent first: the ranker's call graph for a caller the",
        "# traces of a window show calling nothing. Add the calls the data did not show"
        + (" (it holds no spans: without calls here the ranker has no call graph)." if not inferred.edges else "."),
        f"edges = {_list([f'{a} -> {b}' for a, b in inferred.edges if (a, b) not in storage])}",
        "# Representative call chains for the prompt (callers first).",
        f"chains = {_list(_chains(inferred.edges))}",
    ]
    lines += [
        "",
        "[nodes]",
        f"# Seen: {', '.join(inferred.nodes) or 'none'}",
        f"pattern = '{node_pattern(inferred.nodes)}'",
        "# How the prompt names them.",
        f"description = {_s(_node_description(inferred.nodes))}",
        "",
        "[pods]",
        "# Pod name -> service: ordered regexes, the first match's `service` group wins (the defaults",
        "# know Deployment `svc-<hash>-<id>` and StatefulSet `svc-N` names). Pods seen, with their nodes:",
    ]
    lines += [f"#   {pod} -> {service} on {', '.join(inferred.placement.get(pod, [])) or '?'}"
              for pod, service in inferred.pods.items()]
    if inferred.pod_patterns:
        lines.append("# The first pattern(s): learned from the spans, which name these pods' services.")
    if inferred.unnamed_pods:
        lines.append("# No pattern names these pods as their spans do (pod -> service): write one.")
        lines += [f"#   {pod} -> {service}" for pod, service in sorted(inferred.unnamed_pods.items())]
    patterns = [*inferred.pod_patterns, *bundled_system().pod_patterns]
    lines.append("patterns = [" + ", ".join(f"'{p}'" for p in patterns) + "]")
    lines += ["", *_traces_section(inferred.trace, inferred.unnamed_peers)]
    lines += [
        "",
        "# [faults] may narrow where a fault type can happen, e.g. \"io fault\" = { levels = [\"pod\"], requires = \"storage\" }.",
        "",
    ]
    return "\n".join(lines)


def _regex(pattern: str) -> str:
    # A TOML literal string keeps a regex readable (no doubled backslashes) unless it holds a quote.
    return f"'{pattern}'" if "'" not in pattern and "\n" not in pattern else _s(pattern)


def _table_of(values: Mapping[str, str]) -> str:
    return "{ " + ", ".join(f"{_s(k)} = {_s(v)}" for k, v in values.items()) + " }"


def _rpc_rule(values: Sequence[str]) -> str:
    """An ``rpc_service`` regex naming the services of the most frequent package of ``values`` (ordered by count)."""
    package = values[0].rpartition(".")[0]
    return f"^{re.escape(package)}\\.([A-Za-z0-9]+)$" if package else "^(.+)$"


def _traces_section(naming: TraceNaming, unnamed: Mapping[str, Mapping[str, int]], *, shown: int = 8) -> list[str]:
    """The drafted ``[traces]``: the rules the spans were read with, and the values no rule named."""
    lines = [
        "[traces]",
        "# How a client span without a peer.service tag names the service it calls: group 1 of `rpc_service`",
        "# on its rpc.service tag, else `db_system` on its db.system tag, else group 1 of `operation` on its",
        "# operation name (`lowercase`: lower-cased), else (`peer_host`, on unless false) the first DNS label",
        "# of the host it connected to (server.address, net.peer.name, the URL's host; never an IP address);",
        "# `service_aliases` renames a span's own service. rca/system.toml has HipsterShop's. The spans were",
        "# read with the rules below (none: peer.service, then the host).",
    ]
    if naming.rpc_service is not None:
        lines.append(f"rpc_service = {_regex(naming.rpc_service)}")
    if naming.operation is not None:
        lines.append(f"operation = {_regex(naming.operation)}")
    if naming != TraceNaming():
        lines.append(f"lowercase = {'true' if naming.lowercase else 'false'}")
    if naming.db_system:
        lines.append(f"db_system = {_table_of(naming.db_system)}")
    if naming.service_aliases:
        lines.append(f"service_aliases = {_table_of(naming.service_aliases)}")
    if not naming.peer_host:
        lines.append("peer_host = false")
    # A host the host rule does not name is an IP address, localhost or a socket path: no rule
    # names those, the instrumentation's peer.service does.
    host_rule = ("peer_host = true" if not naming.peer_host
                 else "none: no rule names an IP address or localhost (a peer.service attribute would)")
    suggestions: dict[str, Callable[[list[str]], str]] = {
        "db.system": lambda values: f"db_system = {_table_of({**naming.db_system, **{v: '<component>' for v in values}})}",
        "rpc.service": lambda values: f"rpc_service = {_regex(_rpc_rule(values))}",
        SPAN_PEER_TAG_KEYS["peer_host"]: lambda values: host_rule,
    }
    for key, suggest in suggestions.items():
        counts = unnamed.get(key)
        if not counts:
            continue
        values = list(counts)
        listed = ", ".join(f"{value} ({counts[value]} spans)" for value in values[:shown])
        more = f", and {len(values) - shown} more" if len(values) > shown else ""
        lines.append(f"# {key} values no peer names: {listed}{more} -> {suggest(values)}")
    return lines
