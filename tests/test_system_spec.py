"""SystemSpec: a system description the user owns (rca/system.py), and the name and fault helpers on it."""
from __future__ import annotations

from pathlib import Path

import pytest

from rca.settings import load_settings
from rca.system import SystemSpecError, bundled_system, load_system, system_from_settings
from rca.taxonomy import FAULT_TYPES

TRAINTICKET = '''
[system]
name = "TrainTicket"
description = "A train booking system of Java Spring Boot microservices with MySQL, on Kubernetes."
timezone = "UTC"

[services]
app = ["ts-ui-dashboard", "ts-order-service", "ts-travel-service", "ts-auth-service"]
stateful = ["ts-mysql"]

[runtimes]
ts-ui-dashboard = "nodejs"
ts-order-service = "java"
ts-travel-service = "java"
ts-auth-service = "java"

[calls]
storage = [["ts-order-service", "ts-mysql"]]
edges = ["ts-ui-dashboard -> ts-travel-service -> ts-order-service", "ts-ui-dashboard -> ts-auth-service",
         "ts-travel-service -> ts-order-service"]
chains = ["ts-ui-dashboard -> ts-travel-service -> ts-order-service -> ts-mysql"]

[nodes]
pattern = '^node-\\d+$'
description = "node-1..6"
'''


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "system.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def trainticket(tmp_path: Path):
    return load_system(write(tmp_path, TRAINTICKET))


@pytest.mark.parametrize(("name", "service", "level"), [
    ("frontend-2", "frontend", "pod"),
    ("redis-cart-0", "redis-cart", "pod"),
    ("frontend-579b9bff58-t2dbm", "frontend", "pod"),
    ("ts-order-service-5b8c7d9f4-x7k2q", "ts-order-service", "pod"),
    ("ts-order-service", "ts-order-service", "service"),
    ("checkoutservice", "checkoutservice", "service"),
    ("tidb-tikv", "tidb-tikv", "service"),
    ("aiops-k8s-03", "aiops-k8s-03", "node"),
])
def test_default_pod_rules_know_statefulset_and_deployment_names(name: str, service: str, level: str) -> None:
    # The bundled spec's rule is the generic one, so Deployment pods work with it too.
    assert bundled_system().service_of(name) == service
    assert bundled_system().level_of(name) == level


def test_bundled_spec_keeps_the_challenge_facts() -> None:
    spec = bundled_system()
    assert spec.name == "HipsterShop" and "frontend" in spec.services and "tidb-tidb" in spec.stateful
    assert spec.metric_components["infra_tikv"] == "tidb-tikv"
    assert spec.trace.db_system == {"redis": "redis-cart"}
    assert str(spec.file_zone()) == "Asia/Shanghai"
    assert set(spec.faults) == set(FAULT_TYPES)
    assert load_system(None) is spec


def test_a_users_spec_drives_the_helpers(trainticket) -> None:
    assert trainticket.service_of("ts-order-service-5b8c7d9f4-x7k2q") == "ts-order-service"
    assert trainticket.is_node("node-3") and not trainticket.is_node("aiops-k8s-03")
    assert "jvm gc" in trainticket.applicable_fault_types("ts-order-service")
    assert "jvm gc" not in trainticket.applicable_fault_types("ts-ui-dashboard")
    assert "io fault" in trainticket.applicable_fault_types("ts-mysql")
    assert trainticket.applicable_fault_types("node-2") == ["node cpu stress", "node memory stress", "node disk fill"]
    # [faults] omitted: the bundled placements apply.
    assert trainticket.faults == bundled_system().faults


def test_prompt_paragraph_names_only_the_users_system(trainticket) -> None:
    text = trainticket.prompt_paragraph().lower()
    assert "trainticket" in text and "ts-order-service" in text and "node-1..6" in text
    assert "ts-ui-dashboard -> ts-travel-service" in text
    for hipster in ("hipstershop", "tidb", "redis-cart", "frontend", "checkoutservice", "aiops-k8s"):
        assert hipster not in text


def test_without_storage_or_java_the_system_offers_no_such_fault(tmp_path: Path) -> None:
    spec = load_system(write(tmp_path, '[system]\nname = "tiny"\n[services]\napp = ["api", "worker"]\n'))
    possible = spec.possible_fault_types()
    assert "io fault" not in possible and not any(f.startswith("jvm") for f in possible)
    assert not any("tidb" in f for f in possible)


@pytest.mark.parametrize(("text", "field"), [
    ('[services]\napp = []\n', "services.app"),
    ('[services]\napp = ["a"]\n[faults]\n"disk melt" = { levels = ["pod"] }\n', "faults.'disk melt'"),
    ('[services]\napp = ["a"]\n[pods]\npatterns = ["(unclosed"]\n', "pods.patterns[0]"),
    ('[services]\napp = ["a"]\n[pods]\npatterns = ["^(.+)-\\\\d+$"]\n', "pods.patterns[0]"),
    ('[services]\napp = ["a"]\n[nodes]\npattern = "["\n', "nodes.pattern"),
    ('[services]\napp = ["a"]\n[calls]\nchains = ["a -> b"]\n', "calls.chains"),
    ('[services]\napp = ["a", "b"]\n[calls]\nedges = ["a -> b", "b -> c"]\n', "calls.edges"),
    ('[services]\napp = ["a", "b"]\n[calls]\nedges = ["a"]\n', "calls.edges"),
    ('[services]\napp = ["a"]\n[system]\ntimezone = "Mars/Olympus"\n', "system.timezone"),
    ('[services]\napp = ["a"]\n[faults]\n"cpu stress" = { levels = ["rack"] }\n', "faults.'cpu stress'"),
    ('[services]\napp = ["a"]\n[servics]\n', "unknown table"),
])
def test_bad_descriptions_name_the_file_and_field(tmp_path: Path, text: str, field: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SystemSpecError) as err:
        load_system(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_declared_calls_are_pairs_each_once(trainticket) -> None:
    # A chain written in `edges` is its consecutive pairs; a pair written twice counts once.
    assert trainticket.calls == (("ts-ui-dashboard", "ts-travel-service"), ("ts-travel-service", "ts-order-service"),
                                 ("ts-ui-dashboard", "ts-auth-service"))
    assert trainticket.storage_calls == (("ts-order-service", "ts-mysql"),)
    # The bundled HipsterShop states its whole call graph; cartservice's calls to its cache among them.
    assert ("cartservice", "redis-cart") in bundled_system().calls
    assert len(bundled_system().calls) == 15


def test_settings_choose_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, TRAINTICKET)
    assert system_from_settings(load_settings(environ={})).name == "HipsterShop"
    settings = load_settings(environ={"RCA_SYSTEM__FILE": str(path)})
    assert system_from_settings(settings).name == "TrainTicket"
    with pytest.raises(SystemSpecError, match="not found"):
        load_system(tmp_path / "nope.toml")


def test_the_system_prompt_names_only_the_users_system(tmp_path: Path) -> None:
    from diagnose.prompt import static_system_prompt
    from knowledge.documents import SHIPPED_DOCS_DIR, load_documents
    from knowledge.retrieval import fault_catalogue

    spec = load_system(write(tmp_path, TRAINTICKET.replace('stateful = ["ts-mysql"]', "stateful = []")
                             .replace('storage = [["ts-order-service", "ts-mysql"]]', "")
                             .replace(" -> ts-mysql", "")))
    catalogue = fault_catalogue(load_documents(SHIPPED_DOCS_DIR), source="shipped")
    text = static_system_prompt(catalogue, system=spec)
    head, _, listed = text.partition("Fault catalogue")
    assert "TrainTicket" in head and "ts-ui-dashboard -> ts-travel-service -> ts-order-service" in head
    # The SOP documents' own wording (knowledge/docs) still quotes HipsterShop examples in a few
    # catalogue lines; everything the system description and the template say is the user's.
    for hipster in ("hipstershop", "tidb", "redis-cart", "frontend", "checkoutservice", "adservice", "aiops-k8s"):
        assert hipster not in head.lower()
    for hipster in ("hipstershop", "tidb", "tikv", "redis-cart", "checkoutservice"):
        assert hipster not in listed.lower()
    assert "- io fault |" not in listed and "- jvm gc |" in listed  # no storage here; Java services are
    assert "- io fault |" in static_system_prompt(catalogue, system=bundled_system())  # the bundled HipsterShop keeps all 18
    assert all("io fault" not in spec.applicable_fault_types(c) for c in spec.components)
