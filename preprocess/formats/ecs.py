"""Elasticsearch / Filebeat NDJSON with ECS fields -> canonical log rows.

One document per line: a Filebeat event, an Elasticsearch hit (``{"_source": {...}}``, as
``elasticdump`` writes), or a whole ``_search`` response (``hits.hits``) on one line. Fields are
found dotted (``"kubernetes.pod.name": ...``) or nested (``"kubernetes": {"pod": {"name": ...}}``):
``@timestamp`` (ISO 8601, or epoch milliseconds), ``message``, ``kubernetes.pod.name``,
``kubernetes.node.name``, ``kubernetes.namespace``; the release's own ``k8_pod``, ``k8_node_name``,
``k8_namespace`` are read too. Mapping: docs/formats/ecs.md.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from preprocess.formats.contract import FormatError, FormatResult
from preprocess.formats.levels import level_name, line_with_level
from preprocess.formats.rows import Rows
from preprocess.formats.sources import IssueLog, json_lines
from rca.timeutil import epoch_us

_POD = ("kubernetes.pod.name", "k8_pod")
_NODE = ("kubernetes.node.name", "k8_node_name", "host.hostname")
_NAMESPACE = ("kubernetes.namespace", "kubernetes.namespace.name", "k8_namespace")


def field_value(document: dict[str, Any], dotted: str) -> Any:
    """``a.b.c`` looked up flat, nested, or mixed (``{"kubernetes": {"pod.name": ...}}``)."""
    if dotted in document:
        return document[dotted]
    head, _, rest = dotted.partition(".")
    while rest:
        inner = document.get(head)
        if isinstance(inner, dict):
            found = field_value(inner, rest)
            if found is not None:
                return found
        more, _, rest = rest.partition(".")
        head = f"{head}.{more}"
    return None


def _text(document: dict[str, Any], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = field_value(document, name)
        if isinstance(value, str | int | float) and not isinstance(value, bool) and str(value) not in ("", "null"):
            return str(value)
    return None


def timestamp_us(value: Any) -> int:
    """ISO 8601 (``Z``, an offset, or none: UTC as in the release) or epoch milliseconds -> µs since the epoch."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return round(float(value) * 1000)
    if not isinstance(value, str) or not value:
        raise ValueError("missing timestamp")
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"timestamp {value!r} is not ISO 8601") from exc
    stamp = stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)
    return epoch_us(stamp)


def _documents(record: dict[str, Any]) -> Iterator[tuple[str | None, Any]]:
    hits = record.get("hits")
    if isinstance(hits, dict) and isinstance(hits.get("hits"), list):
        for i, hit in enumerate(hits["hits"]):
            yield f"hits.hits[{i}]", hit.get("_source") if isinstance(hit, dict) else hit
    elif isinstance(record.get("_source"), dict):
        yield None, record["_source"]
    else:
        yield None, record


class EcsReader:
    """Filebeat / Elasticsearch NDJSON (ECS) -> canonical logs."""

    name = "ecs"
    description = "Elasticsearch / Filebeat NDJSON with ECS fields (@timestamp, message, kubernetes.*)"

    def read(self, paths: Sequence[Path]) -> FormatResult:
        if not paths:
            raise FormatError("ecs: no input files")
        issues, rows, files = IssueLog(), Rows("logs"), []
        for path in map(Path, paths):
            files.append(path)
            for number, record in json_lines(path, issues=issues):
                for where, document in _documents(record):
                    if not isinstance(document, dict):
                        issues.add(path, "document is not an object", line=number, where=where)
                        continue
                    try:
                        time_us = timestamp_us(field_value(document, "@timestamp"))
                    except ValueError as exc:
                        issues.add(path, str(exc), line=number, where=where, field="@timestamp")
                        continue
                    message = field_value(document, "message")
                    line = line_with_level(message if isinstance(message, str) else None,
                                           level_name(text=field_value(document, "log.level")))
                    rows.append(time=time_us, namespace=_text(document, _NAMESPACE), pod=_text(document, _POD),
                                node=_text(document, _NODE), message=line)
        return FormatResult(logs=rows.frame() if len(rows) else None, files=files, issues=issues.issues)
