"""Pod name -> service: one rule (rca.pods), and every place that applies it gives the same answer.

The places: ``SystemSpec.service_of`` (the bundled description names no patterns of its own) and
the Nezha importer (its pods are Deployment-named). The readers and the telemetry format
converters name no service of a pod: their log frames carry the pod only, whose service is the
system description's.
"""
from __future__ import annotations

import csv
import json

import pytest

from preprocess import nezha
from rca import pods
from rca.pods import POD_PATTERNS
from rca.system import bundled_system
from tests.nezha_fixtures import SLICE

NAMES = [
    # Deployment pods of the Nezha data: OnlineBoutique and TrainTicket (ReplicaSet hash, pod suffix).
    ("frontend-579b9bff58-t2dbm", "frontend"),
    ("paymentservice-9cdb6588f-554sm", "paymentservice"),
    ("ts-order-service-5b67c48447-mv5hb", "ts-order-service"),
    ("ts-order-other-service-6cdbf9b4cc-h7mqk", "ts-order-other-service"),
    ("ts-station-food-service-dc4d75dd-fw6ft", "ts-station-food-service"),  # an 8-character hash
    ("ts-basic-service-5dc8d4f9fd-46997", "ts-basic-service"),  # a suffix of digits is no ordinal here
    ("ts-verification-code-service-7b6dc75c45-2z9p2", "ts-verification-code-service"),
    # StatefulSet / numbered pods (the release).
    ("cartservice-1", "cartservice"),
    ("frontend-2", "frontend"),
    ("redis-cart-0", "redis-cart"),
    ("tidb-tidb-0", "tidb-tidb"),
    # Nodes are their own (``aiops-k8s-01`` would otherwise read as pod 01 of "aiops-k8s").
    ("aiops-k8s-01", "aiops-k8s-01"),
    ("k8s-master1", "k8s-master1"),
    # Services, dashes and all.
    ("ts-order-service", "ts-order-service"),
    ("ts-inside-payment-service", "ts-inside-payment-service"),
    ("redis-cart", "redis-cart"),
    ("checkoutservice", "checkoutservice"),
    # No generated name: Kubernetes writes hashes and suffixes without vowels.
    ("cartservice-579f59597d-abcde", "cartservice-579f59597d-abcde"),
]


@pytest.mark.parametrize(("name", "service"), NAMES, ids=[n for n, _ in NAMES])
def test_every_place_gives_the_same_service(name: str, service: str) -> None:
    answers = {
        "SystemSpec.service_of": bundled_system().service_of(name),
        "rca.pods.service_of_pod": pods.service_of_pod(name),
        "nezha.service_of_pod": nezha.service_of_pod(name),
    }
    assert answers == dict.fromkeys(answers, service)


def test_the_bundled_description_names_pods_by_the_default_rule() -> None:
    assert bundled_system().pod_patterns == POD_PATTERNS  # the bundled description names none of its own


def _slice_pods() -> set[str]:
    found: set[str] = set()
    for day in (SLICE / "rca_data").iterdir():
        found |= {p.name.removesuffix("_metric.csv") for p in (day / "metric").glob("*_metric.csv")}
        for path in [*(day / "log").glob("*.csv"), *(day / "trace").glob("*.csv")]:
            with path.open(newline="", encoding="utf-8") as handle:
                found |= {row["PodName"] for row in csv.DictReader(handle)}
        for fault in json.loads((day / f"{day.name}-fault_list.json").read_text(encoding="utf-8")).values():
            found |= {f["inject_pod"] for f in fault}
    return found


def test_every_pod_of_the_nezha_slice_is_a_deployment_pod() -> None:
    names = sorted(_slice_pods())
    assert len(names) > 30
    for pod in names:
        deployment = pod.rsplit("-", 2)[0]
        assert bundled_system().service_of(pod) == nezha.service_of_pod(pod) == deployment, pod

