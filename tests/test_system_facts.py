"""The system description (rca/system.toml) and the SOP documents agree on where faults happen."""
from __future__ import annotations

import pytest

from knowledge.documents import SHIPPED_DOCS_DIR, load_documents
from rca.system import bundled_system
from rca.taxonomy import (
    APP_SERVICES,
    FAULT_LEVELS,
    FAULT_TYPES,
    SERVICE_RUNTIME,
    STATEFUL_SERVICES,
    STORAGE_CALLS,
)

SYSTEM = bundled_system()
FAULT_DOCS = [d for d in load_documents(SHIPPED_DOCS_DIR) if d.meta.kind == "fault"]


def test_the_system_file_covers_the_vocabulary() -> None:
    assert set(FAULT_LEVELS) == set(FAULT_TYPES)
    assert set(SERVICE_RUNTIME) == set(APP_SERVICES)
    components = set(APP_SERVICES) | set(STATEFUL_SERVICES)
    assert all(caller in components and callee in components for caller, callee in STORAGE_CALLS)
    assert SYSTEM.is_node("aiops-k8s-03") and SYSTEM.is_node("k8s-master1") and not SYSTEM.is_node("aiops-k8s")


@pytest.mark.parametrize("document", FAULT_DOCS, ids=[d.id for d in FAULT_DOCS])
def test_sop_levels_are_levels_the_fault_can_hit(document) -> None:
    # The SOP says where a fault is usually answered; the system file says where it can happen.
    # The first must lie inside the second, or the model is told to answer a level the schema forbids.
    assert set(document.meta.levels) <= set(FAULT_LEVELS[document.meta.fault_type])


@pytest.mark.parametrize(("component", "example"), [
    ("checkoutservice", "checkoutservice"), ("pod", "checkoutservice-1"), ("node", "aiops-k8s-04"),
])
def test_schema_offers_exactly_the_fault_types_of_a_level(component: str, example: str) -> None:
    level = SYSTEM.level_of(example)
    offered = set(SYSTEM.applicable_fault_types(example))
    possible = {f for f, levels in FAULT_LEVELS.items() if level in levels}
    assert offered <= possible
    # Only the runtime and storage requirements remove more (checkoutservice is Go and stateless).
    assert possible - offered == ({"jvm cpu", "jvm gc", "jvm exception", "jvm latency", "io fault"} if level != "node" else set())
