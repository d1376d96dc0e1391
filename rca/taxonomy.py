"""Vocabulary of the 2025 challenge: component kinds and the 18 fault types.

This is a vocabulary, not a lookup of answers: it names what *can* be answered so
that schemas, documents and scorers agree on spelling. Which component is guilty is
always decided from telemetry by the LLM.

The facts about the system itself (services, runtimes, storage calls, TiDB components,
node names, where each fault type can happen) are data: ``rca/system.toml``, read once here.
"""
from __future__ import annotations

import re
import tomllib
from importlib import resources
from typing import Any


def _system() -> dict[str, Any]:
    return tomllib.loads(resources.files("rca").joinpath("system.toml").read_text(encoding="utf-8"))


SYSTEM: dict[str, Any] = _system()

# Application services of HipsterShop, plus the stateful components that can be answers.
APP_SERVICES: tuple[str, ...] = tuple(SYSTEM["services"]["app"])
STATEFUL_SERVICES: tuple[str, ...] = tuple(SYSTEM["services"]["stateful"])

# Services that never emit server spans: they are seen only as client spans of callers.
CLIENT_ONLY_SERVICES: frozenset[str] = frozenset(SYSTEM["services"]["client_only"])
# (caller, callee) calls to storage that traces never show.
STORAGE_CALLS: tuple[tuple[str, str], ...] = tuple((a, b) for a, b in SYSTEM["calls"]["storage"])
# Metric family of the release -> the TiDB component it describes.
TIDB_COMPONENTS: dict[str, str] = dict(SYSTEM["tidb"])

# fault_type -> fault_category, as spelled in the released ground truth.
FAULT_TYPES: dict[str, str] = {
    "cpu stress": "stress test",
    "memory stress": "stress test",
    "jvm cpu": "jvm fault",
    "jvm gc": "jvm fault",
    "jvm exception": "jvm fault",
    "jvm latency": "jvm fault",
    "network delay": "network attack",
    "network loss": "network attack",
    "network corrupt": "network attack",
    "pod failure": "pod fault",
    "pod kill": "pod fault",
    "node cpu stress": "node fault",
    "node memory stress": "node fault",
    "node disk fill": "node fault",
    "dns error": "dns fault",
    "target port misconfig": "misconfiguration",
    "code error": "erroneous change",
    "io fault": "io fault",
}

# Older ground-truth files name two node faults differently.
FAULT_TYPE_ALIASES: dict[str, str] = {"node cpu": "node cpu stress", "node memory": "node memory stress"}

LEVELS: tuple[str, ...] = ("service", "pod", "node")

# Language runtime of each application service. JVM faults need a JVM, so they only
# apply where the runtime is Java.
SERVICE_RUNTIME: dict[str, str] = dict(SYSTEM["runtimes"])
# Where each fault type can happen: its levels, and what the component needs.
FAULT_LEVELS: dict[str, tuple[str, ...]] = {name: tuple(spec["levels"]) for name, spec in SYSTEM["faults"].items()}
NODE_FAULT_TYPES: frozenset[str] = frozenset(f for f, levels in FAULT_LEVELS.items() if levels == ("node",))
JVM_FAULT_TYPES: frozenset[str] = frozenset(f for f, spec in SYSTEM["faults"].items() if spec.get("requires") == "java")
# Disk I/O faults hit the components that own persistent storage.
STORAGE_FAULT_TYPES: frozenset[str] = frozenset(f for f, spec in SYSTEM["faults"].items() if spec.get("requires") == "storage")

_POD_SUFFIX = re.compile(r"^(?P<service>.+?)-(?P<ordinal>\d+)$")
_NODE_NAME = re.compile(SYSTEM["nodes"]["pattern"])


def canonical_fault_type(name: str) -> str:
    """Normalise a fault type name (case, aliases); unknown names are returned lower-cased."""
    key = " ".join(name.strip().lower().split())
    return FAULT_TYPE_ALIASES.get(key, key)


def fault_types_named(text: str) -> list[str]:
    """The fault types a text names, in order of first mention; a name inside a longer one
    (``cpu stress`` in ``node cpu stress``) counts only as the longer one."""
    rest = text.lower()
    found: dict[str, int] = {}
    for name in sorted(FAULT_TYPES, key=len, reverse=True):
        position = rest.find(name)
        if position >= 0:
            found[name] = position
            rest = rest.replace(name, " " * len(name))
    return sorted(found, key=found.__getitem__)


def is_node(name: str) -> bool:
    return bool(_NODE_NAME.match(name))


def service_of(component: str) -> str:
    """Service owning a pod (``cartservice-1`` -> ``cartservice``); services map to themselves."""
    if is_node(component):
        return component
    match = _POD_SUFFIX.match(component)
    return match.group("service") if match else component


def level_of(component: str) -> str:
    """``node``, ``pod`` or ``service`` for a component name."""
    if is_node(component):
        return "node"
    return "pod" if _POD_SUFFIX.match(component) else "service"


def applicable_fault_types(component: str) -> list[str]:
    """Fault types that can physically happen to ``component`` (in taxonomy order).

    The component's level must be one of the fault type's levels (``rca/system.toml``);
    JVM faults need a Java service; I/O faults need a stateful component. This filters
    impossible pairs; it says nothing about which type occurred.
    """
    level = level_of(component)
    service = service_of(component)
    allowed = []
    for fault in FAULT_TYPES:
        if level not in FAULT_LEVELS[fault]:
            continue
        if fault in JVM_FAULT_TYPES and SERVICE_RUNTIME.get(service) != "java":
            continue
        if fault in STORAGE_FAULT_TYPES and service not in STATEFUL_SERVICES:
            continue
        allowed.append(fault)
    return allowed
