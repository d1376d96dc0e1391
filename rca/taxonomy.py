"""Vocabulary of the 2025 challenge: component kinds and the 18 fault types.

This is a vocabulary, not a lookup of answers: it names what *can* be answered so
that schemas, documents and scorers agree on spelling. Which component is guilty is
always decided from telemetry by the LLM.
"""
from __future__ import annotations

import re

# Application services of HipsterShop, plus the stateful components that can be answers.
APP_SERVICES: tuple[str, ...] = (
    "adservice", "cartservice", "checkoutservice", "currencyservice", "emailservice",
    "frontend", "paymentservice", "productcatalogservice", "recommendationservice",
    "shippingservice",
)
STATEFUL_SERVICES: tuple[str, ...] = ("redis-cart", "tidb-tidb", "tidb-pd", "tidb-tikv")
ALL_SERVICES: tuple[str, ...] = APP_SERVICES + STATEFUL_SERVICES

# Services that never emit server spans: they are seen only as client spans of callers.
CLIENT_ONLY_SERVICES: frozenset[str] = frozenset({"adservice", "currencyservice", "paymentservice"})

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

# Language runtime of each application service (HipsterShop's published stack). JVM
# faults need a JVM, so they only apply where the runtime is Java.
SERVICE_RUNTIME: dict[str, str] = {
    "adservice": "java", "cartservice": "csharp", "checkoutservice": "go", "currencyservice": "nodejs",
    "emailservice": "python", "frontend": "go", "paymentservice": "nodejs", "productcatalogservice": "go",
    "recommendationservice": "python", "shippingservice": "go",
}
NODE_FAULT_TYPES: frozenset[str] = frozenset({"node cpu stress", "node memory stress", "node disk fill"})
JVM_FAULT_TYPES: frozenset[str] = frozenset({"jvm cpu", "jvm gc", "jvm exception", "jvm latency"})
# Disk I/O faults hit the components that own persistent storage.
STORAGE_FAULT_TYPES: frozenset[str] = frozenset({"io fault"})

_POD_SUFFIX = re.compile(r"^(?P<service>.+?)-(?P<ordinal>\d+)$")
_NODE_NAME = re.compile(r"^(aiops-k8s-\d+|k8s-master\d+)$")


def canonical_fault_type(name: str) -> str:
    """Normalise a fault type name (case, aliases); unknown names are returned lower-cased."""
    key = " ".join(name.strip().lower().split())
    return FAULT_TYPE_ALIASES.get(key, key)


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

    Node faults need a node; JVM faults need a Java service; I/O faults need a stateful
    component. This filters impossible pairs; it says nothing about which type occurred.
    """
    if is_node(component):
        return [f for f in FAULT_TYPES if f in NODE_FAULT_TYPES]
    service = service_of(component)
    allowed = []
    for fault in FAULT_TYPES:
        if fault in NODE_FAULT_TYPES:
            continue
        if fault in JVM_FAULT_TYPES and SERVICE_RUNTIME.get(service) != "java":
            continue
        if fault in STORAGE_FAULT_TYPES and service not in STATEFUL_SERVICES:
            continue
        allowed.append(fault)
    return allowed
