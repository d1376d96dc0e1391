"""Pod name -> service: one rule (rca.pods), and every place that applies it gives the same answer.

The places: ``SystemSpec.service_of``, the parquet log
reader's ``service`` column (polars), the telemetry format converters (``preprocess.formats.rows``)
and the Nezha importer.
"""
from __future__ import annotations

import csv
import json
import re
from datetime import UTC, datetime

import polars as pl
import pytest

from preprocess import nezha, readers
from preprocess.dataset_writer import write_frames
from preprocess.formats import rows
from preprocess.schema import LOG_SCHEMA
from rca.pods import POD_NAME, POD_PATTERNS, pod_service
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


def _reader(name: str) -> str:
    return pl.select(readers._service_of_pod(pl.lit(name))).item()


@pytest.mark.parametrize(("name", "service"), NAMES, ids=[n for n, _ in NAMES])
def test_every_place_gives_the_same_service(name: str, service: str) -> None:
    answers = {
        "SystemSpec.service_of": bundled_system().service_of(name),
        "readers (polars)": _reader(name),
        "formats.rows.service_of_pod": rows.service_of_pod(name),
        "nezha.service_of_pod": nezha.service_of_pod(name),
    }
    assert answers == dict.fromkeys(answers, service)


def test_the_one_regex_is_the_ordered_patterns() -> None:
    """``POD_NAME`` (polars) picks what ``POD_PATTERNS`` tried in order pick, on pods and non-pods alike."""
    one = re.compile(POD_NAME)
    for name, _ in NAMES:
        match = one.match(name)
        assert (match.group("service") if match else None) == pod_service(name), name
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
    pods = sorted(_slice_pods())
    assert len(pods) > 30
    for pod in pods:
        deployment = pod.rsplit("-", 2)[0]
        assert bundled_system().service_of(pod) == _reader(pod) == rows.service_of_pod(pod) == deployment, pod


def test_the_log_reader_writes_the_rule_into_its_service_column(tmp_path) -> None:
    names = [n for n, _ in NAMES]
    t = datetime(2025, 6, 5, 16, 0, tzinfo=UTC)
    frame = pl.DataFrame([(t, "hipstershop", n, bundled_system().service_of(n), "node-1", "x") for n in names],
                         schema=LOG_SCHEMA, orient="row")
    write_frames(tmp_path, logs=frame)
    got = readers.read_logs(tmp_path, start=t, end=t).frame
    assert dict(zip(got["pod"], got["service"])) == dict(NAMES)
