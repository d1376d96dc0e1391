"""The OTLP reader on what a Collector sends: counters, and bare protobuf messages.

OTLP monotonic sums (counters) are imported as per-second rates, as Prometheus' rate() reads them. A
Collector that scrapes cAdvisor and exports over OTLP sends ``container_cpu_usage_seconds_total`` as a
cumulative monotonic sum: CPU seconds since the container started. The KPI it maps to, ``pod_cpu_usage``,
is cores. Signals with known truth: a counter that grows a known amount a minute, with a reset.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from preprocess.formats.otlp import CounterRates, OtlpReader

T0 = 1_749_139_200 * 10**9  # 2025-06-05T16:00:00Z, ns
MINUTE = 60 * 10**9
POD = "cartservice-0"


def _request(points: list[dict[str, Any]], *, monotonic: bool = True, temporality: Any = 2,
             name: str = "container_cpu_usage_seconds_total") -> dict[str, Any]:
    body: dict[str, Any] = {"dataPoints": points, "isMonotonic": monotonic}
    if temporality is not None:
        body["aggregationTemporality"] = temporality
    return {"resourceMetrics": [{"resource": {"attributes": [{"key": "k8s.pod.name", "value": {"stringValue": POD}}]},
                                 "scopeMetrics": [{"metrics": [{"name": name, "sum": body}]}]}]}


def _point(minute: int, value: float, *, start_minute: int | None = -10) -> dict[str, Any]:
    point: dict[str, Any] = {"timeUnixNano": str(T0 + minute * MINUTE), "asDouble": value}
    if start_minute is not None:
        point["startTimeUnixNano"] = str(T0 + start_minute * MINUTE)
    return point


def _read(tmp_path: Path, *requests: dict[str, Any], counters: CounterRates | None = None) -> Any:
    path = tmp_path / f"metrics-{len(list(tmp_path.iterdir()))}.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in requests), encoding="utf-8")
    return OtlpReader(counters=counters).read([path])


def _rates(result: Any) -> list[tuple[int, str, float]]:
    infra = result.infra
    if infra is None:
        return []
    rows = infra.with_columns(pl.col("time").dt.epoch("ns").alias("ns")).sort("ns")
    return [((ns - T0) // MINUTE, kpi, round(value, 6))
            for ns, kpi, value in rows.select("ns", "kpi_key", "value").iter_rows()]


@pytest.mark.parametrize("temporality", [2, "AGGREGATION_TEMPORALITY_CUMULATIVE"])
def test_a_cumulative_counter_becomes_its_rate_and_a_reset_counts_from_zero(tmp_path: Path, temporality: Any) -> None:
    # 30 CPU seconds a minute (half a core), then the container restarts between minutes 3 and 4.
    points = [_point(0, 100.0), _point(1, 130.0), _point(2, 160.0), _point(3, 190.0), _point(4, 15.0, start_minute=3),
              _point(5, 45.0, start_minute=3)]
    result = _read(tmp_path, _request(points[3:] + points[:3], temporality=temporality))  # order of the file: any
    assert _rates(result) == [(1, "pod_cpu_usage", 0.5), (2, "pod_cpu_usage", 0.5), (3, "pod_cpu_usage", 0.5),
                              (4, "pod_cpu_usage", 0.25), (5, "pod_cpu_usage", 0.5)]
    assert result.infra["component"].unique().to_list() == [POD]


def test_a_lower_value_is_a_reset_even_without_start_times(tmp_path: Path) -> None:
    points = [_point(m, v, start_minute=None) for m, v in ((0, 50.0), (1, 80.0), (2, 12.0), (3, 42.0))]
    assert _rates(_read(tmp_path, _request(points))) == [(1, "pod_cpu_usage", 0.5), (2, "pod_cpu_usage", 0.2),
                                                         (3, "pod_cpu_usage", 0.5)]


def test_a_delta_counter_is_each_points_increase_over_its_own_interval(tmp_path: Path) -> None:
    points = [_point(m, 30.0, start_minute=m - 1) for m in range(1, 4)]
    assert _rates(_read(tmp_path, _request(points, temporality=1))) == [(m, "pod_cpu_usage", 0.5) for m in range(1, 4)]
    bad = _read(tmp_path, _request([_point(1, 30.0, start_minute=None)], temporality=1))
    assert bad.infra is None and any(i.field == "startTimeUnixNano" for i in bad.issues)


def test_a_sum_that_is_not_monotonic_is_a_level_as_sent(tmp_path: Path) -> None:
    points = [_point(m, v) for m, v in ((0, 7.0), (1, 5.0), (2, 9.0))]
    result = _read(tmp_path, _request(points, monotonic=False, name="container_processes"))
    assert _rates(result) == [(0, "pod_processes", 7.0), (1, "pod_processes", 5.0), (2, "pod_processes", 9.0)]


def test_a_counter_without_temporality_is_named_and_not_guessed(tmp_path: Path) -> None:
    result = _read(tmp_path, _request([_point(0, 1.0), _point(1, 2.0)], temporality=None))
    assert result.infra is None
    (issue,) = result.issues
    assert issue.field == "aggregationTemporality" and "neither delta nor cumulative" in issue.reason


def test_the_memory_carries_a_counter_from_one_read_to_the_next(tmp_path: Path) -> None:
    """The receiver's rounds: each round's first point of a counter has the rate from the round before."""
    counters = CounterRates()
    first = _read(tmp_path, _request([_point(0, 100.0), _point(1, 130.0)]), counters=counters)
    second = _read(tmp_path, _request([_point(2, 160.0), _point(3, 190.0)]), counters=counters)
    again = _read(tmp_path, _request([_point(3, 190.0)]), counters=counters)  # a point sent twice
    assert _rates(first) == [(1, "pod_cpu_usage", 0.5)]
    assert _rates(second) == [(2, "pod_cpu_usage", 0.5), (3, "pod_cpu_usage", 0.5)]
    assert _rates(again) == []
    fresh = _read(tmp_path, _request([_point(2, 160.0), _point(3, 190.0)]))  # a file import: its own memory
    assert _rates(fresh) == [(3, "pod_cpu_usage", 0.5)]


@pytest.mark.parametrize("name", ["request.bin", "request.binpb"])
def test_a_bare_protobuf_message_that_starts_like_json_is_read_as_protobuf(tmp_path: Path, name: str) -> None:
    """A bare message starts with 0x0A (JSON white space); a first entry of 123 bytes makes its next byte "{".
    Such a message, as the OTLP receiver saves a small request, must not be taken for JSON."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    for length in range(1, 80):  # a metric name long enough to make the first entry 123 bytes
        message = ExportMetricsServiceRequest()
        metric = message.resource_metrics.add().scope_metrics.add().metrics.add()
        metric.name = "g" * length
        point = metric.gauge.data_points.add()
        point.time_unix_nano, point.as_double = T0, 1.5
        point.attributes.add(key="k8s.pod.name").value.string_value = POD
        if len(message.resource_metrics[0].SerializeToString()) == 123:
            break
    data = message.SerializeToString()
    assert data[:2] == b"\n{"
    path = tmp_path / name
    path.write_bytes(data)
    result = OtlpReader().read([path])
    assert not result.issues and _rates(result) == [(0, "g" * length, 1.5)]
