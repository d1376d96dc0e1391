"""``rca import prometheus --url URL --preset ...`` against a REAL Prometheus (Debian's ``prometheus``).

An hour of synthetic series, as the exporters name and label them, sampled every 15 s, is written
as OpenMetrics with timestamps and backfilled with ``promtool tsdb create-blocks-from openmetrics``;
a Prometheus server is started on that TSDB (no scrape job) on a free loopback port. The CLI then
pulls the shipped presets from it, and the dataset it wrote is read back with ``preprocess.readers``:
every value the presets compute is known from the rates the series were written with.

- cAdvisor (kubelet): containers of two pods in ``prod`` (plus the pod's own cgroup ``container=""``
  and the pause container ``POD``, which must not count twice) and one pod in ``staging``;
- node_exporter on two nodes, labelled as kube-prometheus-stack scrapes it (its own ``pod`` and
  ``namespace``), named by ``node_uname_info``;
- Istio: HTTP into frontend (200, 404 and 500), gRPC into two cart pods, one of which answers
  ``UNAVAILABLE`` (grpc_response_status 14, HTTP 200) for six minutes; the caller's own
  (reporter="source") series, a timeout among them, and its latency histogram;
- the OpenTelemetry Collector's spanmetrics: server and client spans of checkout;
- a pod (ledger-0, namespace ``minutely``) and a spanmetrics service (ledger) scraped every 60 s, as
  Prometheus' default ``scrape_interval`` does, half a minute off the pulled steps: a ``[1m]`` rate
  holds one sample of them and matches nothing, ``--rate-window 4m`` gives their rates. Over the
  default ``[1m]`` their rates are empty, so the other tests' figures are as without them (ledger-0's
  memory, a gauge, aside: no test counts those rows).

``rca system infer --mesh-calls`` drafts the call graph of the pulled dataset (no spans) from the same
server's Istio series, queried at the dataset's newest time (the backfill lies in the past).

A second server, on a copy of the same TSDB, runs with a low ``--query.max-samples``: it refuses a
whole-range preset query for too many samples (HTTP 422), and the pull, halving the refused chunks,
must import the same frames as from the first.

Without ``prometheus`` and ``promtool`` the tests fail, saying what to install (scripts/setup.sh
installs them): a silent skip would let the preset queries go unchecked.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from app.cli import app
from index.query import query_window
from preprocess.formats.prom_presets import load_preset
from preprocess.formats.pull import PROMETHEUS_TOO_MANY_SAMPLES
from preprocess.mesh_calls import mesh_query
from preprocess.readers import read_apm, read_infra
from rca.system import load_system
from tests.judge_server_support import free_port
from tests.server_process import ready, running, wait_until

T0 = datetime(2025, 6, 5, 16, 0, tzinfo=UTC)
SCRAPE_S = 15
SPAN_S = 3600  # one hour of samples
START, END = T0 + timedelta(minutes=5), T0 + timedelta(minutes=55)  # the range pulled: every [1m] window full
BURST = (30 * 60, 36 * 60)  # seconds after T0: cart-1 answers gRPC UNAVAILABLE, 2 calls a second
BURST_STEPS = [T0 + timedelta(minutes=m) for m in range(31, 37)]  # the steps whose [1m] window lies in it
CALM = T0 + timedelta(minutes=20)  # a step far from the burst

runner = CliRunner()
Rate = Callable[[int], float]  # seconds after T0 -> per-second rate of a counter over the next scrape interval


def _constant(value: float) -> Rate:
    return lambda _: value


def _burst(value: float) -> Rate:
    return lambda at: value if BURST[0] <= at < BURST[1] else 0.0


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


class OpenMetrics:
    """Families of synthetic series, written as one OpenMetrics text with a timestamp on every sample."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, list[str]]] = {}

    def _family(self, name: str, kind: str) -> list[str]:
        return self._families.setdefault(name, (kind, []))[1]

    # Every series is sampled every `every` seconds from `offset` seconds after T0 (a scrape interval and offset).
    def counter(self, family: str, labels: dict[str, str], rate: Rate, *, every: int = SCRAPE_S,
                offset: int = 0) -> None:
        lines, total = self._family(family, "counter"), 0.0
        for at in range(offset, SPAN_S + 1, every):
            lines.append(f"{family}_total{_labels(labels)} {total!r} {T0.timestamp() + at:.0f}")
            total += rate(at) * every

    def gauge(self, family: str, labels: dict[str, str], value: float, *, every: int = SCRAPE_S,
              offset: int = 0) -> None:
        lines = self._family(family, "gauge")
        lines += [f"{family}{_labels(labels)} {value!r} {T0.timestamp() + at:.0f}"
                  for at in range(offset, SPAN_S + 1, every)]

    def histogram(self, family: str, labels: dict[str, str], rate: Rate, *, mean: Callable[[int], float],
                  bucket: float, bounds: tuple[float, ...], every: int = SCRAPE_S, offset: int = 0) -> None:
        """Calls at ``rate``, each lasting ``mean(at)`` on average, all within the bucket whose upper bound is ``bucket``."""
        lines, count, total = self._family(family, "histogram"), 0.0, 0.0
        for at in range(offset, SPAN_S + 1, every):
            stamp = f"{T0.timestamp() + at:.0f}"
            for bound in (*bounds, float("inf")):
                le = "+Inf" if bound == float("inf") else repr(bound)
                lines.append(f"{family}_bucket{_labels({**labels, 'le': le})} {count if bound >= bucket else 0.0!r} "
                             f"{stamp}")
            lines.append(f"{family}_count{_labels(labels)} {count!r} {stamp}")
            lines.append(f"{family}_sum{_labels(labels)} {total!r} {stamp}")
            count += rate(at) * every
            total += rate(at) * every * mean(at)

    def text(self) -> str:
        out = []
        for name, (kind, lines) in self._families.items():
            out += [f"# TYPE {name} {kind}", *lines]
        return "\n".join([*out, "# EOF"]) + "\n"


# --------------------------------------------------------------------------- the exporters' series

PODS = {  # pod -> (namespace, node, {container: CPU cores})
    "frontend-0": ("prod", "node-1", {"server": 0.2, "istio-proxy": 0.05}),
    "cart-0": ("prod", "node-2", {"server": 0.5}),
    "batch-0": ("staging", "node-1", {"job": 0.1}),
}
NODES = {"node-1": ("10.0.0.1", 0.7), "node-2": ("10.0.0.2", 0.4)}  # node -> (IP, idle share of each CPU)
DURATION_BOUNDS = (1.0, 5.0, 10.0, 25.0, 50.0, 100.0)


def _cadvisor(series: OpenMetrics) -> None:
    for pod, (namespace, node, containers) in PODS.items():
        scrape = {"job": "kubelet", "instance": f"{NODES[node][0]}:10250", "node": node, "namespace": namespace,
                  "pod": pod}
        for container, cores in containers.items():
            labels = {**scrape, "container": container}
            series.counter("container_cpu_usage_seconds", labels, _constant(cores))
            series.gauge("container_memory_working_set_bytes", labels, cores * 1e9)
            series.gauge("container_processes", labels, 2.0)
            series.counter("container_fs_reads_bytes", {**labels, "device": "/dev/sda"}, _constant(cores * 1000))
            series.counter("container_fs_writes_bytes", {**labels, "device": "/dev/sda"}, _constant(cores * 4000))
        # The pause container, and the pod's own cgroup (the sum of its containers, as cAdvisor reports it):
        # a preset that took them would count the pod twice.
        series.counter("container_cpu_usage_seconds", {**scrape, "container": "POD"}, _constant(0.01))
        pod_total = sum(containers.values()) + 0.01
        series.counter("container_cpu_usage_seconds", {**scrape, "container": ""}, _constant(pod_total))
        series.gauge("container_memory_working_set_bytes", {**scrape, "container": ""}, pod_total * 1e9)
        series.counter("container_fs_reads_bytes", {**scrape, "container": "", "device": "/dev/sda"},
                       _constant(pod_total * 1000))
        # Network: once per pod, on the pod's network namespace.
        network = {**scrape, "container": "", "interface": "eth0"}
        series.counter("container_network_receive_bytes", network, _constant(sum(containers.values()) * 8000))
        series.counter("container_network_transmit_bytes", network, _constant(sum(containers.values()) * 6000))
        series.counter("container_network_receive_packets", network, _constant(10.0))
        series.counter("container_network_transmit_packets", network, _constant(12.0))


def _node_exporter(series: OpenMetrics) -> None:
    for node, (ip, idle) in NODES.items():
        # Scraped as kube-prometheus-stack does: the exporter's own pod and namespace ride along.
        scrape = {"job": "node-exporter", "instance": f"{ip}:9100", "namespace": "monitoring",
                  "pod": f"node-exporter-{node[-1]}x7k"}
        series.gauge("node_uname_info", {**scrape, "nodename": node, "release": "6.1.0"}, 1.0)
        for cpu in ("0", "1"):
            for mode, share in (("idle", idle), ("user", (1 - idle) * 0.75), ("system", (1 - idle) * 0.25)):
                series.counter("node_cpu_seconds", {**scrape, "cpu": cpu, "mode": mode}, _constant(share))
        series.gauge("node_memory_MemAvailable_bytes", scrape, 8e9)
        series.gauge("node_memory_MemTotal_bytes", scrape, 32e9)
        for device, fstype, mountpoint, avail in (("/dev/sda1", "ext4", "/", 60e9), ("tmpfs", "tmpfs", "/run", 1e9)):
            fs = {**scrape, "device": device, "fstype": fstype, "mountpoint": mountpoint}
            series.gauge("node_filesystem_avail_bytes", fs, avail)
            series.gauge("node_filesystem_size_bytes", fs, 100e9 if fstype == "ext4" else 2e9)
        for device, bytes_s in (("eth0", 1e6), ("lo", 5e5), ("veth1a2b3c", 2e5)):
            series.counter("node_network_receive_bytes", {**scrape, "device": device}, _constant(bytes_s))
            series.counter("node_network_transmit_bytes", {**scrape, "device": device}, _constant(bytes_s / 2))
            series.counter("node_network_receive_packets", {**scrape, "device": device}, _constant(bytes_s / 1000))
            series.counter("node_network_transmit_packets", {**scrape, "device": device}, _constant(bytes_s / 2000))
        for device, read_s in (("sda", 4e4), ("loop0", 9e9)):
            series.counter("node_disk_read_bytes", {**scrape, "device": device}, _constant(read_s))
            series.counter("node_disk_written_bytes", {**scrape, "device": device}, _constant(6e5))
            series.counter("node_disk_read_time_seconds", {**scrape, "device": device}, _constant(0.004))
            series.counter("node_disk_write_time_seconds", {**scrape, "device": device}, _constant(0.03))
        series.gauge("node_sockstat_TCP_inuse", scrape, 450.0)


def _istio(series: OpenMetrics) -> None:
    def into(pod: str, workload: str, protocol: str) -> dict[str, str]:
        # Scraped from the destination pod's sidecar: its namespace and pod ride along.
        return {"job": "kubernetes-pods", "namespace": "prod", "pod": pod, "reporter": "destination",
                "source_workload": "frontend" if workload == "cart" else "loadgenerator",
                "destination_workload": workload, "destination_workload_namespace": "prod",
                "destination_service_name": workload, "request_protocol": protocol, "response_flags": "-"}

    http = into("frontend-0", "frontend", "http")
    for code, per_s in (("200", 10.0), ("404", 0.5), ("500", 0.5)):
        series.counter("istio_requests", {**http, "response_code": code, "grpc_response_status": ""}, _constant(per_s))
    series.histogram("istio_request_duration_milliseconds", {**http, "response_code": "200"}, _constant(11.0),
                     mean=lambda _: 20.0, bucket=25.0, bounds=DURATION_BOUNDS)
    for pod in ("cart-0", "cart-1"):
        grpc = {**into(pod, "cart", "grpc"), "response_code": "200"}
        series.counter("istio_requests", {**grpc, "grpc_response_status": "0"}, _constant(5.0))
        slow = 40.0 if pod == "cart-1" else 4.0
        series.histogram("istio_request_duration_milliseconds", grpc, _constant(5.0),
                         mean=lambda at, slow=slow: slow if BURST[0] <= at < BURST[1] else 4.0,
                         bucket=50.0, bounds=DURATION_BOUNDS)
    # The burst's counter is written from the start (at 0): increase() cannot count a series' first sample.
    series.counter("istio_requests", {**into("cart-1", "cart", "grpc"), "response_code": "200",
                                      "grpc_response_status": "14"}, _burst(2.0))
    # frontend's sidecar reporting its own calls to cart (reporter="source"): not cart's APM, but the
    # frontend pod's client-side latency (all calls between 5 and 10 ms) and cart's timeouts (UT).
    out = {"job": "kubernetes-pods", "namespace": "prod", "pod": "frontend-0", "reporter": "source",
           "source_workload": "frontend", "destination_workload": "cart", "destination_service_name": "cart",
           "request_protocol": "grpc"}
    series.counter("istio_requests", {**out, "response_code": "200", "grpc_response_status": "0",
                                      "response_flags": "-"}, _constant(10.0))
    series.counter("istio_requests", {**out, "response_code": "504", "grpc_response_status": "4",
                                      "response_flags": "UT"}, _constant(0.2))
    series.histogram("istio_request_duration_milliseconds", {**out, "response_code": "200"}, _constant(10.0),
                     mean=lambda _: 8.0, bucket=10.0, bounds=DURATION_BOUNDS)


def _spanmetrics(series: OpenMetrics) -> None:
    base = {"job": "otel-collector", "service_name": "checkout", "span_name": "PlaceOrder"}
    for kind, status, per_s in (("SPAN_KIND_SERVER", "STATUS_CODE_UNSET", 3.0), ("SPAN_KIND_SERVER", "STATUS_CODE_ERROR", 0.1),
                                ("SPAN_KIND_CLIENT", "STATUS_CODE_UNSET", 7.0)):
        labels = {**base, "span_kind": kind, "status_code": status}
        series.counter("traces_span_metrics_calls", labels, _constant(per_s))
        series.histogram("traces_span_metrics_duration_milliseconds", labels, _constant(per_s),
                         mean=lambda _: 12.0, bucket=25.0, bounds=DURATION_BOUNDS)


MINUTELY_S = 60  # Prometheus' default scrape_interval
# Half a minute off the pulled steps (whole minutes), as a real target's scrape offset falls anywhere: a [1m]
# window then holds exactly one of its samples (on a step, a closed [1m] window could hold two).
MINUTELY_OFFSET_S = 30
LEDGER_CORES, LEDGER_RECEIVE, LEDGER_CALLS, LEDGER_ERRORS, LEDGER_MS = 0.3, 2400.0, 2.0, 0.5, 30.0


def _minutely(series: OpenMetrics) -> None:
    """ledger-0's cAdvisor series and the ledger service's spanmetrics, scraped every 60 s, in namespace minutely."""
    every = {"every": MINUTELY_S, "offset": MINUTELY_OFFSET_S}
    scrape = {"job": "kubelet", "instance": f"{NODES['node-2'][0]}:10250", "node": "node-2", "namespace": "minutely",
              "pod": "ledger-0"}
    series.counter("container_cpu_usage_seconds", {**scrape, "container": "server"}, _constant(LEDGER_CORES), **every)
    series.gauge("container_memory_working_set_bytes", {**scrape, "container": "server"}, 1e9, **every)
    series.counter("container_network_receive_bytes", {**scrape, "container": "", "interface": "eth0"},
                   _constant(LEDGER_RECEIVE), **every)
    # The Collector set to add the namespace (a resource attribute) as a label, so --match scopes it too.
    base = {"job": "otel-collector", "service_name": "ledger", "span_name": "Post", "namespace": "minutely",
            "span_kind": "SPAN_KIND_SERVER"}
    for status, per_s in (("STATUS_CODE_UNSET", LEDGER_CALLS - LEDGER_ERRORS), ("STATUS_CODE_ERROR", LEDGER_ERRORS)):
        labels = {**base, "status_code": status}
        series.counter("traces_span_metrics_calls", labels, _constant(per_s), **every)
        series.histogram("traces_span_metrics_duration_milliseconds", labels, _constant(per_s),
                         mean=lambda _: LEDGER_MS, bucket=50.0, bounds=DURATION_BOUNDS, **every)


def exposition() -> str:
    series = OpenMetrics()
    for write in (_cadvisor, _node_exporter, _istio, _spanmetrics, _minutely):
        write(series)
    return series.text()


# --------------------------------------------------------------------------- the server


def _binaries() -> tuple[str, str]:
    binary, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if binary is None or promtool is None:
        pytest.fail("Prometheus not installed (prometheus and promtool are needed): apt-get install prometheus, "
                    "or run scripts/setup.sh as root", pytrace=False)
    return binary, promtool


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The series backfilled into a TSDB once; every server of the module starts on its own copy."""
    _, promtool = _binaries()
    root = tmp_path_factory.mktemp("backfill")
    samples, tsdb = root / "series.om", root / "tsdb"
    samples.write_text(exposition(), encoding="utf-8")
    backfill = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(samples), str(tsdb)],
                              capture_output=True, text=True, timeout=300)
    assert backfill.returncode == 0, backfill.stderr[-3000:]
    return tsdb


@contextmanager
def _serving(backfilled: Path, root: Path, *flags: str) -> Iterator[str]:
    """A Prometheus on a copy of the backfilled TSDB (no scrape job), its URL while it runs."""
    binary, _ = _binaries()
    tsdb = root / "tsdb"
    shutil.copytree(backfilled, tsdb)
    config = root / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\n", encoding="utf-8")  # no scrape job: the backfill only
    port = free_port()
    log_path = root / "prometheus.log"
    url = f"http://127.0.0.1:{port}"
    command = [binary, f"--config.file={config}", f"--storage.tsdb.path={tsdb}", f"--web.listen-address=127.0.0.1:{port}",
               # Retention counts back from the newest block, not from now; still, never let the backfill age out.
               "--storage.tsdb.retention.time=100y", *flags]
    with running(command, log_path=log_path) as server:
        wait_until("readiness", ready(url), server=server, log_path=log_path, timeout_s=60, name="prometheus")
        yield url


@pytest.fixture(scope="module")
def prometheus_url(backfilled: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with _serving(backfilled, tmp_path_factory.mktemp("prometheus")) as url:
        yield url


# A query may load at most this many samples at once: nearly every preset query over the whole range
# (51 steps) loads more, since a range query holds every step's points; a piece of 13 steps or fewer, less.
MAX_SAMPLES = 200


@pytest.fixture(scope="module")
def refusing_prometheus_url(backfilled: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The same data behind a ``--query.max-samples`` as a big cluster's server meets with a day of cAdvisor."""
    with _serving(backfilled, tmp_path_factory.mktemp("prometheus-refusing"), f"--query.max-samples={MAX_SAMPLES}") \
            as url:
        yield url


def _iso(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pull(url: str, out: Path, *more: str) -> str:
    result = runner.invoke(app, ["import", "prometheus", "--url", url, *more, "--start", _iso(START), "--end",
                                 _iso(END), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return result.output


def _at(frame: pl.DataFrame, when: datetime, column: str = "value", **match: str) -> float:
    rows = frame.filter(pl.col("time") == when, *(pl.col(k) == v for k, v in match.items()))
    assert rows.height == 1, f"{match} at {when}: {rows.height} rows\n{rows}"
    return float(rows[column][0])


# --------------------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def pulled(prometheus_url: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("pulled") / "data"
    output = _pull(prometheus_url, out, "--preset", "kubernetes", "--preset", "istio", "--preset", "spanmetrics")
    return out, output


def test_the_backfilled_server_answers_a_rate_as_written(prometheus_url: str) -> None:
    # The fixture's own check: 10 calls a second, sampled every 15 s, are 600 a minute to Prometheus.
    answer = httpx.get(f"{prometheus_url}/api/v1/query", params={
        "query": 'sum(increase(istio_requests_total{reporter="destination", pod="frontend-0", response_code="200"}[1m]))',
        "time": str(CALM.timestamp())}).json()
    assert float(answer["data"]["result"][0]["value"][1]) == pytest.approx(600.0)


def test_every_shipped_query_is_valid_promql_that_finds_its_exporters_series(pulled: tuple[Path, str]) -> None:
    _, output = pulled
    counts = {name: len(load_preset(name).entries) for name in ("kubernetes", "istio", "spanmetrics")}
    assert all(f"preset {name}: {count} queries" in output for name, count in counts.items())
    assert f"{sum(counts.values())} page(s) fetched" in output  # one chunk a query, none refused
    assert "no series" not in output


def test_kubernetes_preset_gives_pod_and_node_kpis_in_the_release_units(pulled: tuple[Path, str]) -> None:
    out, _ = pulled
    infra = read_infra(out, start=START, end=END).frame
    pods = infra.filter(pl.col("family") == "infra_pod")
    cpu = pods.filter(pl.col("kpi_key") == "pod_cpu_usage")
    # The containers' CPU summed per pod, in percent of one core; the pod cgroup and the pause container left out.
    assert _at(cpu, CALM, component="frontend-0") == pytest.approx(25.0)
    assert _at(cpu, CALM, component="cart-0") == pytest.approx(50.0)
    assert cpu.filter(pl.col("component") == "frontend-0")["node"].unique().to_list() == ["node-1"]
    assert cpu.filter(pl.col("component") == "frontend-0")["namespace"].unique().to_list() == ["prod"]
    assert cpu.height == 3 * 51  # three pods, every minute of 16:05..16:55
    memory = pods.filter(pl.col("kpi_key") == "pod_memory_working_set_bytes")
    assert _at(memory, CALM, component="frontend-0") == pytest.approx(0.25e9)
    network = pods.filter(pl.col("kpi_key") == "pod_network_receive_bytes")
    assert _at(network, CALM, component="cart-0") == pytest.approx(4000.0)  # bytes a second
    assert _at(pods.filter(pl.col("kpi_key") == "pod_fs_reads_bytes"), CALM, component="cart-0") == pytest.approx(500.0)

    nodes = infra.filter(pl.col("family") == "infra_node")
    node_cpu = nodes.filter(pl.col("kpi_key") == "node_cpu_usage_rate")
    # 100 - idle, the nodes named by node_uname_info (not the exporter pod's labels, not the IP).
    assert _at(node_cpu, CALM, component="node-1") == pytest.approx(30.0)
    assert _at(node_cpu, CALM, component="node-2") == pytest.approx(60.0)
    assert sorted(nodes["component"].unique().to_list()) == ["node-1", "node-2"]
    assert _at(nodes.filter(pl.col("kpi_key") == "node_memory_usage_rate"), CALM, component="node-1") == \
        pytest.approx(75.0)
    filesystem = nodes.filter(pl.col("kpi_key") == "node_filesystem_usage_rate")
    assert filesystem["mountpoint"].unique().to_list() == ["/"]  # tmpfs left out
    assert _at(filesystem, CALM, component="node-2") == pytest.approx(40.0)
    # eth0 only: loopback and a pod's veth carry the same bytes again.
    assert _at(nodes.filter(pl.col("kpi_key") == "node_network_receive_bytes_total"), CALM, component="node-1") == \
        pytest.approx(1e6)
    disk = nodes.filter(pl.col("kpi_key") == "node_disk_read_bytes_total")
    assert disk["device"].unique().to_list() == ["sda"]
    assert _at(disk, CALM, component="node-1") == pytest.approx(4e4)


def test_istio_preset_gives_red_per_service_and_pod_with_the_burst_where_it_was(pulled: tuple[Path, str]) -> None:
    out, _ = pulled
    apm = read_apm(out, start=START, end=END).frame
    service = apm.filter(pl.col("object_type") == "service")
    pod = apm.filter(pl.col("object_type") == "pod")

    # Per minute, from the destination's side only (frontend's own calls to cart are not cart's requests twice).
    assert _at(service, CALM, "request", object_id="frontend") == pytest.approx(660.0)
    assert _at(service, CALM, "error", object_id="frontend") == pytest.approx(30.0)  # the 500s, not the 404s
    assert _at(service, CALM, "error_ratio", object_id="frontend") == pytest.approx(100 * 30 / 660)
    assert _at(service, CALM, "rrt", object_id="frontend") == pytest.approx(20_000.0)  # µs
    assert _at(service, CALM, "request", object_id="cart") == pytest.approx(600.0)
    assert _at(service, CALM, "error", object_id="cart") == 0.0  # calls and no error: 0, not missing
    assert _at(service, CALM, "timeout", object_id="cart") == pytest.approx(12.0)  # the callers' UT, 0.2 a second

    for step in BURST_STEPS:
        # gRPC UNAVAILABLE (HTTP 200) counts as an error, in cart and in the pod that answered it.
        assert _at(service, step, "request", object_id="cart") == pytest.approx(720.0)
        assert _at(service, step, "error", object_id="cart") == pytest.approx(120.0)
        assert _at(service, step, "error_ratio", object_id="cart") == pytest.approx(100 * 120 / 720)
        assert _at(pod, step, "error", object_id="cart-1") == pytest.approx(120.0)
        assert _at(pod, step, "error_ratio", object_id="cart-1") == pytest.approx(100 * 120 / 420)
        assert _at(pod, step, "error", object_id="cart-0") == 0.0
        assert _at(pod, step, "rrt", object_id="cart-1") == pytest.approx(40_000.0)  # its answers slowed too
        assert _at(service, step, "rrt", object_id="cart") == pytest.approx(22_000.0)  # with cart-0's 4 ms
    before, after = BURST_STEPS[0] - timedelta(minutes=1), BURST_STEPS[-1] + timedelta(minutes=1)
    assert _at(pod, before, "error", object_id="cart-1") == 0.0 and _at(pod, after, "error", object_id="cart-1") == 0.0
    errors = pod.filter(pl.col("object_id") == "cart-1", pl.col("error") > 0)["time"].to_list()
    assert errors == BURST_STEPS

    # frontend-0's own calls, timed by its sidecar: all between 5 and 10 ms -> p99 9.95 ms.
    infra = read_infra(out, start=START, end=END).frame
    client = infra.filter(pl.col("kpi_key") == "pod_client_latency_p99")
    assert client["component"].unique().to_list() == ["frontend-0"]
    assert _at(client, CALM, component="frontend-0") == pytest.approx(9_950.0)


def test_spanmetrics_preset_gives_red_of_server_spans(pulled: tuple[Path, str]) -> None:
    out, _ = pulled
    checkout = read_apm(out, start=START, end=END).frame.filter(pl.col("object_id") == "checkout")
    assert _at(checkout, CALM, "request", object_type="service") == pytest.approx(186.0)  # client spans left out
    assert _at(checkout, CALM, "error", object_type="service") == pytest.approx(6.0)
    assert _at(checkout, CALM, "error_ratio", object_type="service") == pytest.approx(100 * 6 / 186)
    assert _at(checkout, CALM, "rrt", object_type="service") == pytest.approx(12_000.0)


def test_a_rerun_reads_every_page_from_disk(prometheus_url: str, pulled: tuple[Path, str]) -> None:
    out, _ = pulled
    again = _pull(prometheus_url, out, "--preset", "kubernetes", "--preset", "istio", "--preset", "spanmetrics")
    assert "0 page(s) fetched" in again and "0 request(s)" in again


def test_a_server_that_refuses_too_many_samples_is_pulled_in_pieces_with_the_same_frames(
        refusing_prometheus_url: str, pulled: tuple[Path, str], tmp_path: Path) -> None:
    """Prometheus answers 422 "query processing would load too many samples into memory" to a query over its
    --query.max-samples: the chunk is halved on its grid until each piece is answered, and what is imported
    is what the server without the limit gave in one request a query."""
    refused = httpx.get(f"{refusing_prometheus_url}/api/v1/query_range", params={
        "query": "container_memory_working_set_bytes", "start": str(START.timestamp()), "end": str(END.timestamp()),
        "step": "60"})
    assert refused.status_code == 422 and refused.json()["errorType"] == "execution"
    assert refused.json()["error"].startswith(PROMETHEUS_TOO_MANY_SAMPLES)

    whole, _ = pulled
    out = tmp_path / "data"
    presets = ("--preset", "kubernetes", "--preset", "istio", "--preset", "spanmetrics")
    output = _pull(refusing_prometheus_url, out, *presets)
    assert "refused: too many samples, halved" in output and "piece 2" in output and "no series" not in output
    for read in (read_infra, read_apm):
        split, one = read(out, start=START, end=END).frame, read(whole, start=START, end=END).frame
        assert split.height == one.height > 0
        assert_frame_equal(split.sort(split.columns), one.sort(one.columns))

    # Each piece a page of its own: pod_client_latency_p99 (the heaviest) in several.
    pieces: dict[str, int] = {}
    for page in (out / ".pulled" / "prometheus").glob("*.json"):
        meta = json.loads(page.read_text())["rca_pull"]
        if not meta.get("split"):  # a refusal kept so that a rerun asks for its halves straight away
            pieces[meta["params"]["name"]] = pieces.get(meta["params"]["name"], 0) + 1
    assert pieces["pod_client_latency_p99"] > 1

    again = _pull(refusing_prometheus_url, out, *presets)
    assert "0 page(s) fetched" in again and "0 request(s)" in again  # the pieces, and the refusals, are on disk


def test_a_minutely_scrape_gives_no_rate_over_one_minute_and_its_rates_over_four(prometheus_url: str,
                                                                                  tmp_path: Path) -> None:
    """The trap of Prometheus' default scrape interval: ledger's series are sampled every 60 s, so a [1m] rate holds
    one sample and matches nothing. The note on each empty rate says why and what to give; ``--rate-window 4m``
    gives every rate at every step, per second as before and the counts still per minute (not per 4 minutes)."""
    scoped = ("--preset", "kubernetes", "--preset", "spanmetrics", "--match", 'namespace="minutely"')
    narrow_out = tmp_path / "narrow"
    narrow = _pull(prometheus_url, narrow_out, *scoped)
    notes = dict(re.findall(r"note: no series: query \d+/\d+ (\w+): (.*)", narrow))
    hint = ("; a rate over [1m] needs two samples inside 1m: if the scrape interval is 30s or more, give "
            "--rate-window 4m (four scrape intervals of 1m)")
    for name in ("pod_cpu_usage", "pod_network_receive_bytes", "apm_request", "apm_error", "apm_rrt"):
        assert name in notes and notes[name].endswith(hint), (name, notes.get(name))
    assert "}[1m]))" + hint in notes["pod_cpu_usage"]
    # A gauge ledger has is no empty query; one it has not (processes) is noted without a rate's hint.
    assert "pod_memory_working_set_bytes" not in notes and notes["pod_processes"].endswith("container!=\"POD\", "
                                                                                        'namespace="minutely"})')
    narrow_infra = read_infra(narrow_out, start=START, end=END).frame.filter(pl.col("component") == "ledger-0")
    assert narrow_infra["kpi_key"].unique().to_list() == ["pod_memory_working_set_bytes"]

    wide_out = tmp_path / "wide"
    wide = _pull(prometheus_url, wide_out, *scoped, "--rate-window", "4m")
    wide_notes = dict(re.findall(r"note: no series: query \d+/\d+ (\w+): (.*)", wide))
    assert not {"pod_cpu_usage", "pod_network_receive_bytes", "apm_request", "apm_error", "apm_error_ratio",
                "apm_rrt"} & set(wide_notes), wide_notes
    infra = read_infra(wide_out, start=START, end=END).frame.filter(pl.col("component") == "ledger-0")
    cpu = infra.filter(pl.col("kpi_key") == "pod_cpu_usage")
    assert cpu.height == 51  # every minute of 16:05..16:55: the first window, 16:01..16:05, holds four samples
    for when in (START, CALM, END):
        assert _at(cpu, when) == pytest.approx(100 * LEDGER_CORES)  # percent of one core
        assert _at(infra.filter(pl.col("kpi_key") == "pod_network_receive_bytes"), when) == \
            pytest.approx(LEDGER_RECEIVE)  # bytes a second
    ledger = read_apm(wide_out, start=START, end=END).frame.filter(pl.col("object_id") == "ledger")
    assert ledger.height == 51
    assert _at(ledger, CALM, "request") == pytest.approx(60 * LEDGER_CALLS)  # per minute, not per 4 minutes
    assert _at(ledger, CALM, "error") == pytest.approx(60 * LEDGER_ERRORS)
    assert _at(ledger, CALM, "error_ratio") == pytest.approx(100 * LEDGER_ERRORS / LEDGER_CALLS)
    assert _at(ledger, CALM, "rrt") == pytest.approx(1000 * LEDGER_MS)  # µs
    sent = {json.loads(p.read_text())["rca_pull"]["params"]["query"] for p in (wide_out / ".pulled").rglob("*.json")}
    assert all("[1m]" not in query for query in sent) and sum("[4m]" in query for query in sent) > 10

    again = _pull(prometheus_url, wide_out, *scoped, "--rate-window", "4m")
    assert "0 page(s) fetched" in again and "0 request(s)" in again


def test_match_scopes_the_pod_queries_and_leaves_the_nodes(prometheus_url: str, tmp_path: Path) -> None:
    out = tmp_path / "staging"
    output = _pull(prometheus_url, out, "--preset", "kubernetes", "--match", 'namespace="staging"')
    assert "not scoped by --match: node_cpu_usage_rate" in output
    infra = read_infra(out, start=START, end=END).frame
    assert infra.filter(pl.col("family") == "infra_pod")["component"].unique().to_list() == ["batch-0"]
    assert _at(infra.filter(pl.col("kpi_key") == "pod_cpu_usage"), CALM, component="batch-0") == pytest.approx(10.0)
    assert sorted(infra.filter(pl.col("family") == "infra_node")["component"].unique().to_list()) == ["node-1", "node-2"]
    # The pages are kept under the query as sent, matchers and all.
    sent = {json.loads(p.read_text())["rca_pull"]["params"]["query"] for p in (out / ".pulled").rglob("*.json")}
    assert any('container!="POD", namespace="staging"}' in query for query in sent)


def test_a_pulled_dataset_is_described_indexed_and_ranks_the_burst_first(pulled: tuple[Path, str],
                                                                          tmp_path: Path) -> None:
    """The README's flow on what the presets pulled: ``rca system infer``, ``rca preprocess`` with that
    description, then the window of cart-1's UNAVAILABLE burst: the evidence index names cart-1 (or its
    service) first, from the series the presets named, with no trace or log at all."""
    data_dir, _ = pulled
    system_file, index_dir = tmp_path / "system.toml", tmp_path / "index"
    inferred = runner.invoke(app, ["system", "infer", "--data-dir", str(data_dir), "--out", str(system_file)])
    assert inferred.exit_code == 0, inferred.output
    built = runner.invoke(app, ["preprocess", "--data-dir", str(data_dir), "--index-dir", str(index_dir), "--all"],
                          env={"RCA_SYSTEM__FILE": str(system_file)})
    assert built.exit_code == 0, built.output
    ranked = query_window(index_dir, start=BURST_STEPS[0], end=BURST_STEPS[-1])
    assert ranked.candidates, ranked
    assert ranked.candidates[0].component in ("cart-1", "cart"), [c.component for c in ranked.candidates[:3]]
    assert "cart-0" not in [c.component for c in ranked.candidates[:2]]


def test_infer_drafts_the_call_graph_from_the_mesh_at_the_datasets_time(prometheus_url: str, pulled: tuple[Path, str],
                                                                        tmp_path: Path) -> None:
    """``rca system infer --mesh-calls``: the pulled dataset holds no span, so no call; frontend's sidecar counted
    its calls to cart (reporter="source"), and the draft's call graph has them, from the mesh. The backfill lies
    in the past: the query is evaluated at the dataset's newest time (16:55), where "now" finds nothing."""
    data_dir, _ = pulled
    system_file = tmp_path / "system.toml"
    inferred = runner.invoke(app, ["system", "infer", "--data-dir", str(data_dir), "--out", str(system_file),
                                   "--mesh-calls", prometheus_url, "--mesh-since", "1h"])
    assert inferred.exit_code == 0, inferred.output
    assert "1 call edge(s) from the mesh" in inferred.output
    spec = load_system(system_file)
    assert ("frontend", "cart") in spec.calls
    text = system_file.read_text(encoding="utf-8")
    assert "# From the service mesh, not the spans (calls here and in storage): frontend -> cart." in text
    query = mesh_query(since=timedelta(hours=1))
    assert f"# Counted by (at {prometheus_url}, {_iso(END)}): {query}" in text
    # The same query now: the backfilled hour is long gone from its window.
    now = httpx.get(f"{prometheus_url}/api/v1/query", params={"query": query}).json()
    assert now["status"] == "success" and now["data"]["result"] == []
