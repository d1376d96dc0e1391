"""Pod name -> the service that owns it, and which names are nodes: the naming rule, written once.

``SystemSpec`` (rca/system.py) applies it with its system's patterns, whose defaults are the
ones here (the bundled HipsterShop description names none of its own). The Nezha importer runs
before any description is chosen and applies the defaults (its pods are Deployment-named); the
readers and the telemetry format converters name no pod's service (log frames carry the pod).
The rule is regex strings (``NODE_NAME``, ``POD_PATTERNS``), which a system description may replace.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

# Kubernetes writes a ReplicaSet's pod-template-hash and a pod's random suffix in
# rand.SafeEncodeString's alphabet (k8s.io/apimachinery: no vowels, no 0, 1 or 3), so that a
# word such as "service" or "abcde" is never mistaken for either. Every Deployment pod of the
# Nezha data (OnlineBoutique and TrainTicket) is written in it.
_K8S = "[bcdfghjklmnpqrstvwxz2456789]"
# Deployment pods: ReplicaSet hash and pod suffix (``frontend-579b9bff58-t2dbm``,
# ``ts-order-service-5b67c48447-mv5hb``).
_HASHED = rf"{_K8S}{{6,10}}-{_K8S}{{5}}"
# StatefulSet / numbered pods (``redis-cart-0``, ``frontend-2``, as in the release).
_ORDINAL = r"\d+"


def _owned(suffix: str) -> str:
    # Lazy: the service is the shortest prefix that the suffix completes (``ts-order-service``).
    return rf"^(?P<service>.+?)-(?:{suffix})$"


# The release's nodes; a node is its own owner (``aiops-k8s-01`` is no pod of "aiops-k8s").
NODE_NAME = r"^(aiops-k8s-\d+|k8s-master\d+)$"
# Tried in order, the first match's ``service`` group wins (SystemSpec's ``pods.patterns``).
POD_PATTERNS: tuple[str, ...] = (_owned(_HASHED), _owned(_ORDINAL))

_NODE = re.compile(NODE_NAME)
_PODS = tuple(re.compile(p) for p in POD_PATTERNS)


def pod_service(name: str, pods: Sequence[re.Pattern[str]] = _PODS) -> str | None:
    """The service owning pod ``name``; None when ``name`` is no pod name under ``pods``."""
    for pattern in pods:
        match = pattern.match(name)
        if match:
            return match.group("service")
    return None


def service_of_pod(name: str, *, node: re.Pattern[str] = _NODE, pods: Sequence[re.Pattern[str]] = _PODS) -> str:
    """The service owning a pod (``cartservice-1``, ``ts-order-service-5b67c48447-mv5hb``); nodes and services are their own."""
    if node.match(name):
        return name
    return pod_service(name, pods) or name
