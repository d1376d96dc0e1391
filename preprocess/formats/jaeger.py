"""Jaeger query-API JSON (``GET /api/traces``, the UI's "download JSON") -> canonical spans.

Shape: ``{"data": [{"traceID", "spans": [...], "processes": {"p1": {"serviceName", "tags"}}}]}``; a bare
list of traces or one trace object is read too. Span fields are the release parquet's
(``traceID``, ``spanID``, ``operationName``, ``references``, ``startTime`` and ``duration`` in µs,
``tags``), with the process referenced by ``processID`` (or inline as ``process``); the tags are
read by the parquet reader's rules (preprocess/formats/spans.py). Services and peers are kept as the
export names them; ``rpc.service``, ``db.system`` and a client span's host (``server.address``,
``net.peer.name``, a URL's host) are carried into the dataset, whose reader names the peer with the
system's ``[traces]``; so is the language the process's instrumentation states (process tag
``telemetry.sdk.language``, else the Jaeger client's ``jaeger.version``), which ``rca system infer``
reads runtimes from. Mapping: docs/formats/jaeger.md.
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


def tags_of(items: Any) -> dict[str, str]:
    """``[{key, type, value}]`` -> ``{key: value as string}``; JSON ``true`` reads as the parquet's ``'true'``."""
    out: dict[str, str] = {}
    for item in items or []:
        if not isinstance(item, dict) or not isinstance(item.get("key"), str) or item.get("value") is None:
            continue
        value = item["value"]
        out[item["key"]] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def _traces(document: Any) -> list[Any]:
    if isinstance(document, dict) and isinstance(document.get("data"), list):
        return list(document["data"])
    if isinstance(document, list):
        return document
    if isinstance(document, dict) and "spans" in document:
        return [document]
    raise BadField("data", "not a Jaeger traces document (no 'data' list of traces)")


def _integer(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise BadField(field, f"missing or non-integer {field}: {value!r}")
    try:
        return int(value)
    except ValueError as exc:
        raise BadField(field, f"{field} {value!r} is not an integer") from exc


def span_row(span: dict[str, Any], process: dict[str, Any], rows: Rows) -> None:
    """Append one Jaeger span (with its process) to ``rows``; ``BadField`` names what is wrong."""
    try:
        trace_id = check_id(span.get("traceID"), digits=(16, 32))
    except ValueError as exc:
        raise BadField("traceID", str(exc)) from exc
    try:
        span_id = check_id(span.get("spanID"), digits=(16,))
    except ValueError as exc:
        raise BadField("spanID", str(exc)) from exc
    parent = None
    for ref in span.get("references") or []:
        if isinstance(ref, dict) and ref.get("refType") == "CHILD_OF":
            try:
                parent = check_id(ref.get("spanID"), digits=(16,))
            except ValueError as exc:
                raise BadField("references.spanID", str(exc)) from exc
            break
    if "startTime" not in span:
        raise BadField("startTime", "missing timestamp")
    start = _integer(span.get("startTime"), "startTime")
    duration = _integer(span.get("duration"), "duration")
    operation = span.get("operationName")
    if not isinstance(operation, str):
        raise BadField("operationName", "missing operation name")
    tags = tags_of(span.get("tags"))
    ptags = tags_of(process.get("tags"))
    kind_tag = tags.get("span.kind")
    kind = kind_tag.lower() if kind_tag is not None else None
    status = as_int(tags.get("status.code"))
    rows.append(
        trace_id=trace_id, span_id=span_id, parent_span_id=parent, operation=operation,
        service=process.get("serviceName"),
        pod=ptags.get("name") or ptags.get("podName"), node=ptags.get("node_name") or ptags.get("nodeName"),
        span_kind=kind,
        peer_service=explicit_peer(kind=kind, peer=tags.get("peer.service")),
        rpc_service=tags.get("rpc.service"), db_system=tags.get("db.system"),
        peer_host=peer_host(tags, kind=kind),
        sdk_language=stated_language(ptags),
        start=start, duration_us=duration, status_code=status,
        is_error=is_error(error_tag=tags.get("error"),
                          status_error=(tags.get("otel.status_code") or "").upper() == "ERROR",
                          status_code=status, http_status=as_int(tags.get("http.status_code"))),
    )


class JaegerReader:
    """Jaeger query-API JSON -> canonical spans."""

    name = "jaeger"
    description = "Jaeger query-API JSON ({\"data\": [{traceID, spans, processes}]})"

    def read(self, paths: Sequence[Path]) -> FormatResult:
        return read_span_documents(paths, format_name=self.name, records=_records)


def _records(document: Any) -> Iterator[tuple[str, Callable[[Rows], None]]]:
    """Each span of a Jaeger document, where it lies, and what appends it (with its trace's process)."""
    for ti, trace in enumerate(_traces(document)):
        if not isinstance(trace, dict):
            yield f"data[{ti}]", functools.partial(_refuse, reason="trace is not an object")
            continue
        found = trace.get("processes")
        processes: dict[str, Any] = found if isinstance(found, dict) else {}
        for si, span in enumerate(trace.get("spans") or []):
            yield f"data[{ti}].spans[{si}]", functools.partial(_append, span, processes)


def _refuse(rows: Rows, *, reason: str) -> None:
    raise BadField(None, reason)


def _append(span: Any, processes: dict[str, Any], rows: Rows) -> None:
    if not isinstance(span, dict):
        raise BadField(None, "span is not an object")
    process = span.get("process") or processes.get(str(span.get("processID")))
    if not isinstance(process, dict):
        raise BadField("processID", f"process {span.get('processID')!r} not in the trace's processes")
    span_row(span, process, rows)
