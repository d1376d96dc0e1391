"""The detector contract: what every modality's detector offers the index, and the registry.

A detector has two halves, like a ruptures estimator's ``fit`` / ``predict``:

* ``build``: the nightly half. It turns one CST day of raw telemetry (read for it as its
  ``raw`` declares) into compact feature tables (``feature_tables``), which the index stores;
* ``score``: the query half. It compares an incident window of those features with the
  fault-free minutes before it and returns event frames (``event_schemas``; one detector
  may emit several kinds, e.g. trace edge anomalies and caller fan-outs).

Every knob is a field of the detector's frozen ``Params`` dataclass, passed to its
constructor. The index builds and queries with one loop over ``DETECTORS``, so a new
modality is one module and one line here. Polars frames stay the currency: this is a
seam, not a framework.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from preprocess.baseline import Span
from preprocess.detect_log import LogDetector, LogParams
from preprocess.detect_metric import MetricDetector, MetricParams
from preprocess.detect_trace import TraceDetector, TraceParams
from preprocess.schema import FeatureTable, RawInput, Schema
from rca.system import SystemSpec

__all__ = ["DETECTORS", "Detector", "FeatureTable", "LogParams", "MetricParams", "RawInput", "TraceParams",
           "make_detectors"]


class Detector(Protocol):
    """One modality's build and score halves (see the module docstring).

    The declarations are read-only (class constants of each detector): as plain attributes a
    protocol would require exactly these types, and ``Params = MetricParams`` or a dict of
    schemas would not match ``type`` and ``Mapping``.
    """

    @property
    def Params(self) -> type:  # the frozen dataclass of its knobs; the constructor takes one
        ...

    @property
    def name(self) -> str:  # also the index partition family: "metric", "log", "trace"
        ...

    @property
    def raw(self) -> RawInput:
        ...

    @property
    def sequential(self) -> bool:  # builds share state across days: build its partitions in day order, in one process
        ...

    @property
    def feature_tables(self) -> tuple[FeatureTable, ...]:
        ...

    @property
    def event_schemas(self) -> Mapping[str, Schema]:
        ...

    def build(self, chunks: Iterable[Mapping[str, pl.DataFrame | None]], *,
              state_dir: Path | None = None) -> dict[str, pl.DataFrame]:
        """Feature tables of one day from its raw chunks (a source whose read failed is None).

        ``state_dir`` is where a stateful detector keeps its own state (the Drain3 miner).
        """
        ...

    def context_spans(self, *, start: datetime, end: datetime, baseline_start: datetime) -> list[Span]:
        """Minutes of its per-minute tables it reads besides [baseline_start, end] (none: ``[]``).

        The metric detector reads older history (to check a baseline that may hold a previous
        incident), the minutes after the window and the same hour on earlier days (references
        when there is no history before the window).
        """
        ...

    def score(self, features: Mapping[str, pl.DataFrame], *, start: datetime, end: datetime,
              baseline_start: datetime, system: SystemSpec, exclude: Sequence[Span] = ()) -> dict[str, pl.DataFrame]:
        """Events of the window [start, end] against [baseline_start, start), one frame per event kind.

        Rows inside ``exclude`` spans (other incidents' windows, before this one) are not baseline.
        ``system`` is the description of the system the telemetry comes from, for what its
        component names mean (the metric detector compares a pod without history with the other
        pods of its service); a detector that reads names only as recorded ignores it.
        """
        ...


class DetectorClass(Protocol):
    """What the registry holds: a detector class, whose declarations are read before any instance exists."""

    @property
    def Params(self) -> type:
        ...

    @property
    def name(self) -> str:
        ...

    @property
    def feature_tables(self) -> tuple[FeatureTable, ...]:
        ...

    def __call__(self, params: Any, /) -> Detector:
        ...


# Name -> detector class; the order is the order of partitions in a build and of modalities in a query.
DETECTORS: dict[str, DetectorClass] = {
    MetricDetector.name: MetricDetector,
    LogDetector.name: LogDetector,
    TraceDetector.name: TraceDetector,
}


def make_detectors(params: Mapping[str, object] | None = None) -> dict[str, Detector]:
    """One detector of each registered kind, configured with ``params[name]`` (its ``Params``; default when absent)."""
    params = params or {}
    unknown = set(params) - set(DETECTORS)
    if unknown:
        raise ValueError(f"no detector named {', '.join(sorted(unknown))}; registered: {', '.join(DETECTORS)}")
    return {name: cls(params.get(name, cls.Params())) for name, cls in DETECTORS.items()}
