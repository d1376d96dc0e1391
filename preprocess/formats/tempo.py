"""Grafana Tempo's trace-by-id JSON -> canonical spans.

Tempo answers ``GET /api/traces/<id>`` with ``{"batches": [<resource spans>]}`` and
``GET /api/v2/traces/<id>`` with ``{"trace": {"resourceSpans": [...]}}``: the resource spans of
OTLP in another envelope, ids in base64 (protobuf's JSON) or hex. So this reader is the OTLP reader
(``preprocess/formats/otlp.py``, which unwraps both envelopes), under Tempo's name: one document per
file, or one per line; a page ``rca import tempo --url`` saved is one ``batches`` document holding
every trace of its time chunk. Mapping and limits: docs/formats/tempo.md.
"""
from __future__ import annotations

from preprocess.formats.otlp import OtlpReader


class TempoReader(OtlpReader):
    """Tempo trace documents (``batches`` or ``trace.resourceSpans``; JSON, gzip optional) -> canonical spans."""

    name = "tempo"
    description = "Grafana Tempo trace JSON (GET /api/traces/<id>); or pull with --url (TraceQL search, then each trace)"
