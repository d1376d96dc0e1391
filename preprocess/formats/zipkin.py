"""Zipkin v2 JSON (``GET /api/v2/traces``, ``/api/v2/trace/{id}``, a span list) -> canonical spans.

A file holds a list of spans, or a list of traces (lists of spans), or a page ``rca import zipkin
--url`` saved (``{"traces": [...]}``: a ``/api/v2/traces`` answer and where it came from). Span fields: ``traceId``
(16 or 32 hex digits), ``id``, ``parentId``, ``name``, ``kind`` (``CLIENT``/``SERVER``/...),
``timestamp`` and ``duration`` in µs, ``localEndpoint.serviceName``, ``remoteEndpoint.serviceName``
and string ``tags``. Zipkin has no process: pod and node come from tags (``k8s.pod.name``,
``name``/``podName``; ``k8s.node.name``, ``node_name``/``nodeName``). Services and peers are kept as
the spans name them; ``rpc.service``, ``db.system`` and a client span's host (``server.address``,
``net.peer.name``, a URL's host) are carried into the dataset, whose reader names the peer with the
system's ``[traces]``. Mapping: docs/formats/zipkin.md.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from preprocess.formats.contract import FormatResult
from preprocess.formats.rows import Rows
from preprocess.formats.sources import BadField, read_span_documents
from preprocess.formats.spans import as_int, check_id, explicit_peer, is_error, peer_host, stated_language


def _spans(document: Any) -> Iterator[tuple[str, Any]]:
    prefix = ""
    if isinstance(document, dict) and isinstance(document.get("traces"), list):  # a saved pull page
        prefix, document = "traces", document["traces"]
    if not isinstance(document, list):
        raise BadField("[]", "not a Zipkin v2 document (a JSON list of spans or of traces)")
    for i, item in enumerate(document):
        if isinstance(item, list):
            for j, span in enumerate(item):
                yield f"{prefix}[{i}][{j}]", span
        else:
            yield f"{prefix}[{i}]", item


def _id(span: dict[str, Any], key: str, digits: tuple[int, ...], *, required: bool = True) -> str | None:
    if not required and span.get(key) in (None, ""):
        return None
    try:
        return check_id(span.get(key), digits=digits)
    except ValueError as exc:
        raise BadField(key, str(exc)) from exc


def _micros(span: dict[str, Any], key: str, *, required: bool) -> int:
    value = span.get(key)
    if value is None:
        if required:
            raise BadField(key, "missing timestamp" if key == "timestamp" else f"missing {key}")
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadField(key, f"{key} {value!r} is not an integer of microseconds")
    return value


def span_row(span: dict[str, Any], rows: Rows) -> None:
    trace_id = _id(span, "traceId", (16, 32))
    span_id = _id(span, "id", (16,))
    parent = _id(span, "parentId", (16,), required=False)
    start = _micros(span, "timestamp", required=True)
    duration = _micros(span, "duration", required=False)  # Zipkin omits it for incomplete spans
    tags = {str(k): str(v) for k, v in (span.get("tags") or {}).items()}
    local = span.get("localEndpoint") or {}
    remote = span.get("remoteEndpoint") or {}
    kind = span["kind"].lower() if isinstance(span.get("kind"), str) else None
    operation = span.get("name") if isinstance(span.get("name"), str) else ""
    status = as_int(tags.get("rpc.grpc.status_code") or tags.get("status.code"))
    rows.append(
        trace_id=trace_id, span_id=span_id, parent_span_id=parent, operation=operation,
        service=local.get("serviceName"),
        pod=tags.get("k8s.pod.name") or tags.get("name") or tags.get("podName"),
        node=tags.get("k8s.node.name") or tags.get("node_name") or tags.get("nodeName"),
        span_kind=kind,
        peer_service=explicit_peer(kind=kind, peer=tags.get("peer.service") or remote.get("serviceName")),
        rpc_service=tags.get("rpc.service"), db_system=tags.get("db.system"),
        peer_host=peer_host(tags, kind=kind),
        # No process in Zipkin, but OpenTelemetry's Zipkin exporter copies the resource's attributes
        # into every span's tags, telemetry.sdk.language among them.
        sdk_language=stated_language(tags),
        start=start, duration_us=duration, status_code=status,
        # Zipkin marks a failed span with an "error" tag whose value is the message, not "true".
        is_error=is_error(error_tag="true" if "error" in tags else None,
                          status_error=(tags.get("otel.status_code") or "").upper() == "ERROR",
                          status_code=status, http_status=as_int(tags.get("http.status_code"))),
    )


class ZipkinReader:
    """Zipkin v2 JSON spans -> canonical spans."""

    name = "zipkin"
    description = "Zipkin v2 JSON (a list of spans with localEndpoint / remoteEndpoint)"

    def read(self, paths: Sequence[Path]) -> FormatResult:
        return read_span_documents(paths, format_name=self.name, records=_records)


def _records(document: Any) -> Iterator[tuple[str, Callable[[Rows], None]]]:
    """Each span of a Zipkin document, where it lies, and what appends it."""
    for where, span in _spans(document):
        yield where, functools.partial(_append, span)


def _append(span: Any, rows: Rows) -> None:
    if not isinstance(span, dict):
        raise BadField("[]", "span is not an object")
    span_row(span, rows)
