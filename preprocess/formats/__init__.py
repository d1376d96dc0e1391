"""Readers of foreign telemetry formats -> canonical frames (``preprocess/schema.py``).

One contract (``contract.FormatReader``), one module per format, and this registry, which
``rca import FORMAT`` (preprocess/importers.py via preprocess/formats/cli.py) offers. Each
format's mapping and limits are documented in docs/formats/<name>.md.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from preprocess.formats.contract import FormatError, FormatReader, FormatResult, RecordIssue
from preprocess.formats.ecs import EcsReader
from preprocess.formats.jaeger import JaegerReader
from preprocess.formats.loki import LokiReader
from preprocess.formats.otlp import OtlpReader
from preprocess.formats.prometheus import PrometheusReader
from preprocess.formats.tempo import TempoReader
from preprocess.formats.zipkin import ZipkinReader

__all__ = ["FORMATS", "FormatError", "FormatReader", "FormatResult", "RecordIssue", "make_reader"]


# Format name -> factory taking the read options (only Prometheus' exposition uses ``at``).
FORMATS: dict[str, Callable[..., FormatReader]] = {
    "otlp": lambda *, at=None: OtlpReader(),
    "jaeger": lambda *, at=None: JaegerReader(),
    "zipkin": lambda *, at=None: ZipkinReader(),
    "tempo": lambda *, at=None: TempoReader(),
    "prometheus": lambda *, at=None: PrometheusReader(at=at),
    "loki": lambda *, at=None: LokiReader(),
    "ecs": lambda *, at=None: EcsReader(),
}


def make_reader(name: str, *, at: datetime | None = None) -> FormatReader:
    """The reader of format ``name``; ``at`` is the time of exposition samples that carry none."""
    try:
        factory = FORMATS[name]
    except KeyError:
        raise FormatError(f"unknown format {name!r}; expected one of {', '.join(FORMATS)}") from None
    return factory(at=at)
