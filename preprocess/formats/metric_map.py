"""Metric name + labels -> canonical APM or infra rows: the one mapping Prometheus and OTLP share.

The table and the rules are documented in docs/formats/prometheus.md (and referenced from
docs/formats/otlp.md); a change here is a change there.

* APM: a metric named ``apm_<kpi>`` or ``apm.<kpi>`` (``kpi`` one of ``preprocess.schema.APM_KPIS``)
  becomes that column of the wide APM row of its object: labels ``object_type`` + ``object_id``,
  else a pod label (a pod row), else a service label (a service row).
* Infra: the KPI is ``KPI_NAMES[name]`` when the name is in the table, else the name itself. The family
  is the ``family`` label when it names one, else the table's, else ``infra_pod`` when a pod label is
  present, else ``infra_node`` when a node or ``instance`` label is. A series with none is skipped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from preprocess.formats.rows import Rows
from preprocess.formats.sources import IssueLog
from preprocess.layout import INFRA_FAMILIES
from preprocess.schema import APM_KPIS
from rca.taxonomy import TIDB_COMPONENTS


@dataclass(frozen=True)
class KpiName:
    kpi_key: str
    family: str | None = None  # None: decided by the labels


# Exporter metric names (cAdvisor via the kubelet, node_exporter, the OpenTelemetry Collector's
# kubeletstats receiver) -> the release's KPI keys. Unlisted names are kept as their own KPI key.
# Values are taken as they come: a Prometheus counter is not turned into a rate (query a rate() instead); an
# OTLP monotonic sum is, by the OTLP reader, before it gets here (otlp.CounterRates).
KPI_NAMES: dict[str, KpiName] = {
    "container_cpu_usage_seconds_total": KpiName("pod_cpu_usage", "infra_pod"),
    "container_memory_working_set_bytes": KpiName("pod_memory_working_set_bytes", "infra_pod"),
    "container_processes": KpiName("pod_processes", "infra_pod"),
    "container_fs_reads_bytes_total": KpiName("pod_fs_reads_bytes", "infra_pod"),
    "container_fs_writes_bytes_total": KpiName("pod_fs_writes_bytes", "infra_pod"),
    "container_network_receive_bytes_total": KpiName("pod_network_receive_bytes", "infra_pod"),
    "container_network_transmit_bytes_total": KpiName("pod_network_transmit_bytes", "infra_pod"),
    "container_network_receive_packets_total": KpiName("pod_network_receive_packets", "infra_pod"),
    "container_network_transmit_packets_total": KpiName("pod_network_transmit_packets", "infra_pod"),
    "k8s.pod.cpu.usage": KpiName("pod_cpu_usage", "infra_pod"),
    "k8s.pod.memory.working_set": KpiName("pod_memory_working_set_bytes", "infra_pod"),
    "node_sockstat_TCP_inuse": KpiName("node_sockstat_TCP_inuse", "infra_node"),
    "node_memory_MemAvailable_bytes": KpiName("node_memory_MemAvailable_bytes", "infra_node"),
    "node_memory_MemTotal_bytes": KpiName("node_memory_MemTotal_bytes", "infra_node"),
}

# Label spellings, first found wins: Prometheus / kube-state-metrics, the release's own, OTel resource.
POD_LABELS = ("pod", "k8s_pod_name", "kubernetes_pod_name", "pod_name", "k8s.pod.name")
NODE_LABELS = ("node", "kubernetes_node", "k8s_node_name", "node_name", "k8s.node.name")
NAMESPACE_LABELS = ("namespace", "k8s_namespace_name", "kubernetes_namespace", "k8s.namespace.name")
SERVICE_LABELS = ("service", "service_name", "service.name")
_COPIED = ("instance", "device", "mountpoint", "type", "sql_type")


def first_label(labels: dict[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = labels.get(name)
        if value not in (None, "", "null"):
            return value
    return None


def apm_kpi(name: str) -> str | None:
    """``apm_request`` / ``apm.request`` -> ``request``; None for any other name."""
    for prefix in ("apm_", "apm."):
        if name.startswith(prefix) and name[len(prefix):] in APM_KPIS:
            return name[len(prefix):]
    return None


def _host(instance: str) -> str:
    """``10.0.0.1:9100`` -> ``10.0.0.1``: a node exporter's instance names its host."""
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() else instance


class MetricRows:
    """Samples of any metric format, routed to canonical APM (wide) and infra (long) rows."""

    def __init__(self) -> None:
        self._apm: dict[tuple[str, str, int], dict[str, float | None]] = {}
        self._infra = Rows("infra")

    def add(self, *, name: str, labels: dict[str, str], time_us: int, value: float, issues: IssueLog, path: Path,
            line: int | None = None, where: str | None = None) -> None:
        """One sample. NaN is a missing value (null), as the string "null" is in the release's files."""
        number: float | None = None if math.isnan(value) else value
        kpi = apm_kpi(name)
        if kpi is not None:
            obj = self._apm_object(labels)
            if obj is None:
                issues.add(path, f"APM metric {name!r} names no object (object_type/object_id, pod or service label)",
                           line=line, where=where, field="labels")
                return
            self._apm.setdefault((obj[0], obj[1], time_us), {})[kpi] = number
            return
        mapped = KPI_NAMES.get(name, KpiName(name))
        family = self._family(labels, mapped)
        if family is None:
            issues.add(path, f"metric {name!r} has no family, pod, node or instance label: cannot place it",
                       line=line, where=where, field="labels")
            return
        pod, node, instance = (first_label(labels, POD_LABELS), first_label(labels, NODE_LABELS),
                               first_label(labels, ("instance",)))
        if family == "infra_pod":
            component, host = pod, node or instance
        elif family == "infra_node":
            component = node or (_host(instance) if instance else None)
            host = component
        else:
            component, host = TIDB_COMPONENTS[family], node
        copied = {c: first_label(labels, (c,)) for c in _COPIED}
        self._infra.append(time=time_us, family=family, kpi_key=first_label(labels, ("kpi_key",)) or mapped.kpi_key,
                           component=component, node=host, namespace=first_label(labels, NAMESPACE_LABELS),
                           value=number, **copied)

    @staticmethod
    def _apm_object(labels: dict[str, str]) -> tuple[str, str] | None:
        object_type, object_id = first_label(labels, ("object_type",)), first_label(labels, ("object_id",))
        if object_type in ("pod", "service") and object_id is not None:
            return object_type, object_id
        if (pod := first_label(labels, POD_LABELS)) is not None:
            return "pod", pod
        if (service := first_label(labels, SERVICE_LABELS)) is not None:
            return "service", service
        return None

    @staticmethod
    def _family(labels: dict[str, str], mapped: KpiName) -> str | None:
        named = labels.get("family")
        if named in INFRA_FAMILIES:
            return named
        if mapped.family is not None:
            return mapped.family
        if first_label(labels, POD_LABELS) is not None:
            return "infra_pod"
        if first_label(labels, NODE_LABELS) is not None or first_label(labels, ("instance",)) is not None:
            return "infra_node"
        return None

    def apm_frame(self) -> pl.DataFrame | None:
        if not self._apm:
            return None
        rows = Rows("apm")
        for (object_type, object_id, time_us), kpis in self._apm.items():
            rows.append(time=time_us, object_type=object_type, object_id=object_id, **kpis)
        return rows.frame()

    def infra_frame(self) -> pl.DataFrame | None:
        return self._infra.frame() if len(self._infra) else None
