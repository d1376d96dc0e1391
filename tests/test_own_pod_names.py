"""A user's services whose pods are not named as Kubernetes names a Deployment's, end to end.

``rca import jaeger`` of spans whose processes name their pod (``cart_0``, ``order_1``) beside their
service, ``rca import prometheus`` of the same pods' container metrics, then ``rca system infer``:
the description learns a pod-name rule from the spans, so the pods' metrics belong to their
services and no pod is drafted as a service of its own. With only the default rules, ``cart_0``
would be a service called ``cart_0``. The pods' log lines are grouped into findings by the same
description (the log frames carry pods only).
"""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from app.cli import app
from diagnose.cases import Case
from diagnose.tools import RawTelemetry, case_toolbox
from preprocess.dataset_writer import write_frames
from preprocess.infer_system import learned_pod_patterns
from preprocess.readers import read_logs
from preprocess.schema import LOG_SCHEMA
from rca.system import SystemSpec, bundled_system, load_system
from tests.fakes import MINUTES, START, MemoryTelemetry, StaticEvidence, StaticKnowledge

runner = CliRunner()
T0 = datetime(2025, 6, 6, 10, 0, tzinfo=UTC)
PODS = {"cart_0": "cart", "cart_1": "cart", "order_0": "order", "order_1": "order"}


def _span(trace: str, span_id: int, parent: int | None, *, process: str, kind: str, start_us: int,
          duration: int) -> dict:
    refs = [{"refType": "CHILD_OF", "traceID": trace, "spanID": f"{parent:016x}"}] if parent else []
    return {"traceID": trace, "spanID": f"{span_id:016x}", "flags": 1, "operationName": f"{kind} call",
            "references": refs, "startTime": start_us, "duration": duration,
            "tags": [{"key": "span.kind", "type": "string", "value": kind}], "logs": [],
            "processID": process, "warnings": None}


def _jaeger() -> dict:
    """order's pods call cart's: one server span each side and order's client span, every minute."""
    traces = []
    for minute in range(10):
        order_pod, cart_pod = f"order_{minute % 2}", f"cart_{minute % 2}"
        start = int(T0.timestamp() * 1e6) + minute * 60_000_000
        processes = {"p1": {"serviceName": "order", "tags": [{"key": "name", "type": "string", "value": order_pod}]},
                     "p2": {"serviceName": "cart", "tags": [{"key": "name", "type": "string", "value": cart_pod}]}}
        trace = f"{minute + 1:032x}"
        traces.append({"traceID": trace, "processes": processes, "warnings": None, "spans": [
            _span(trace, 1, None, process="p1", kind="server", start_us=start, duration=9000),
            _span(trace, 2, 1, process="p1", kind="client", start_us=start + 100, duration=5000),
            _span(trace, 3, 2, process="p2", kind="server", start_us=start + 300, duration=4000)]})
    return {"data": traces, "total": 0, "limit": 0, "offset": 0, "errors": None}


def _prometheus() -> dict:
    start = int(T0.timestamp())
    result = [{"metric": {"__name__": "container_memory_working_set_bytes", "pod": pod, "node": "worker-1",
                          "namespace": "shop"},
               "values": [[start + 60 * m, repr(2e8 + m)] for m in range(10)]} for pod in PODS]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


@pytest.fixture(scope="module")
def description(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("own-pods")
    spans, metrics = base / "jaeger.json", base / "prometheus.json"
    spans.write_text(json.dumps(_jaeger()), encoding="utf-8")
    metrics.write_text(json.dumps(_prometheus()), encoding="utf-8")
    data, out = base / "data", base / "system.toml"
    for args in (["import", "jaeger", str(spans), "--out", str(data)],
                 ["import", "prometheus", str(metrics), "--out", str(data)],
                 ["system", "infer", "--data-dir", str(data), "--out", str(out), "--name", "shop"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
    return out


def test_the_description_learns_how_the_pods_are_named(description: Path) -> None:
    spec = load_system(description)
    assert {pod: spec.service_of(pod) for pod in PODS} == PODS
    assert set(spec.services) == {"order", "cart"}  # no pod drafted as a service of its own
    assert ("order", "cart") in spec.calls
    # The default rules still follow, for pods named as Kubernetes names them.
    assert spec.service_of("cart-5b67c48447-mv5hb") == "cart"
    assert {pod: bundled_system().service_of(pod) for pod in PODS} == {pod: pod for pod in PODS}


@pytest.mark.parametrize(("recorded", "kept"), [
    ({"cart_0": "cart", "cart_1": "cart"}, [r"^(?P<service>cart)_\d+$"]),
    ({"cart.a1": "cart", "order.b2": "order"}, [r"^(?P<service>order|cart)\..+$"]),
    # A rule for cart's pods would also take cart_db, a service the spans name: it is not kept.
    ({"cart_x": "cart", "cart_db": "cart_db"}, []),
    ({"frontend-0": "frontend", "ts-order-service-5b8c7d9f4-x7k2q": "ts-order-service"}, []),
])
def test_a_rule_is_learned_only_where_the_defaults_miss_and_it_names_nothing_else(recorded, kept) -> None:
    patterns, unnamed = learned_pod_patterns(recorded, spec=bundled_system())
    assert patterns == kept
    assert set(unnamed) == ({"cart_x"} if not kept and "cart_x" in recorded else set())


class _OwnPodLogs(MemoryTelemetry):
    """The in-memory metrics and spans, and the logs of the dataset at ``data`` (``RawTelemetry``'s read)."""

    def __init__(self, data: Path, spec: SystemSpec) -> None:
        super().__init__()
        self.raw = RawTelemetry(data, naming=spec.trace)

    def logs(self, *, start, end) -> pl.DataFrame:
        return self.raw.logs(start=start, end=end)


def test_log_evidence_of_own_named_pods_is_grouped_by_the_description(description: Path, tmp_path: Path) -> None:
    """Log frames carry pods only; a pod's service is the system description's (``SystemSpec.service_of``),
    not Kubernetes' default naming: cart_0 and cart_1 failing alike is one finding of service cart."""
    spec = load_system(description)
    rows = [(t, "shop", pod, "worker-1", "GET /items 200") for t in MINUTES for pod in PODS]
    rows += [(t, "shop", pod, "worker-1", "redis timeout after 3 retries")
             for t in MINUTES if t >= START for pod in ("cart_0", "cart_1")]
    data = tmp_path / "data"
    write_frames(data, logs=pl.DataFrame(rows, schema=LOG_SCHEMA, orient="row"))
    read = read_logs(data, start=MINUTES[0], end=MINUTES[-1]).frame
    assert "service" not in read.columns and read.height == len(rows)
    assert "service" not in RawTelemetry(data, naming=spec.trace).logs(start=MINUTES[0], end=MINUTES[-1]).columns

    def get_logs(system: SystemSpec, args: dict) -> list[str]:
        telemetry = _OwnPodLogs(data, system)
        case = Case(uuid="own-pods", description="incident", start=START, end=START + timedelta(minutes=10))
        toolbox = case_toolbox(case, telemetry=telemetry, evidence=StaticEvidence([], telemetry=telemetry),
                               knowledge=StaticKnowledge(), system=system)
        observation = toolbox.invoke("get_logs", args)
        assert observation.ok, observation.text
        return [line for line in observation.text.splitlines() if " in window on " in line]

    # One finding for service cart, on both its pods; order's pods are not cart's.
    found = get_logs(spec, {})
    assert len(found) == 1 and found[0].startswith("redis timeout") and found[0].endswith("on cart_0, cart_1"), found
    assert get_logs(spec, {"component": "cart"}) == found
    # Kubernetes' default naming would make each pod a service of its own: two findings.
    assert len(get_logs(bundled_system(), {})) == 2
