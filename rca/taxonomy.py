"""Vocabulary of the 2025 challenge: component kinds and the 18 fault types.

This is a vocabulary, not a lookup of answers: it names what *can* be answered so
that schemas, documents and scorers agree on spelling. Which component is guilty is
always decided from telemetry by the LLM.

The facts about the system itself (services, runtimes, storage calls, metric-family
components, node and pod names, where each fault type can happen) are a ``SystemSpec``
(``rca/system.py``): ask the one you were given (``system.service_of(name)``,
``system.level_of``, ``system.is_node``, ``system.applicable_fault_types``); there is no default.
The old module constants below are views of the bundled HipsterShop description
(``rca/system.toml``), read on first access, never at import.
"""
from __future__ import annotations

from typing import Any

from rca.system import LEVELS, bundled_system

__all__ = ["FAULT_TYPES", "FAULT_TYPE_ALIASES", "LEVELS", "canonical_fault_type", "fault_types_named"]

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

# The old module constants of the bundled description, computed on first access (PEP 562) so
# nothing is read at import; new code asks a SystemSpec (``bundled_system()`` or the one passed down).
_BUNDLED_VIEWS: dict[str, Any] = {
    "APP_SERVICES": lambda s: s.services,
    "STATEFUL_SERVICES": lambda s: s.stateful,
    "CLIENT_ONLY_SERVICES": lambda s: s.client_only,
    "STORAGE_CALLS": lambda s: s.storage_calls,
    "TIDB_COMPONENTS": lambda s: dict(s.metric_components),
    "SERVICE_RUNTIME": lambda s: dict(s.runtimes),
    "FAULT_LEVELS": lambda s: {name: p.levels for name, p in s.faults.items()},
    "NODE_FAULT_TYPES": lambda s: frozenset(f for f, p in s.faults.items() if p.levels == ("node",)),
    "JVM_FAULT_TYPES": lambda s: frozenset(f for f, p in s.faults.items() if p.requires == "java"),
    "STORAGE_FAULT_TYPES": lambda s: frozenset(f for f, p in s.faults.items() if p.requires == "storage"),
}


def __getattr__(name: str) -> Any:
    view = _BUNDLED_VIEWS.get(name)
    if view is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return view(bundled_system())


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

