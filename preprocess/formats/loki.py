"""Grafana Loki ``/loki/api/v1/query_range`` JSON (``resultType: streams``) -> canonical log rows.

Each stream's labels say where its lines come from: ``namespace``, ``pod``, ``node`` (Promtail /
Alloy's Kubernetes relabelling; ``k8s_*`` and ``kubernetes_*`` spellings read too); ``container``
is not a canonical column. ``values`` are ``[nanoseconds as a string, line]``; the line is the
canonical ``message``. Mapping: docs/formats/loki.md.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from preprocess.formats.contract import FormatError, FormatResult
from preprocess.formats.levels import LEVEL_LABELS, level_name, line_with_level
from preprocess.formats.metric_map import NAMESPACE_LABELS, NODE_LABELS, POD_LABELS, first_label
from preprocess.formats.rows import Rows
from preprocess.formats.sources import IssueLog, json_document


class LokiReader:
    """Loki query_range stream responses -> canonical logs."""

    name = "loki"
    description = "Grafana Loki /loki/api/v1/query_range JSON (resultType streams)"

    def read(self, paths: Sequence[Path]) -> FormatResult:
        if not paths:
            raise FormatError("loki: no input files")
        issues, rows, files = IssueLog(), Rows("logs"), []
        for path in map(Path, paths):
            document = json_document(path, issues=issues)
            if document is None:
                continue
            data = document.get("data") if isinstance(document, dict) else None
            if not isinstance(data, dict) or data.get("resultType") != "streams" or not isinstance(data.get("result"),
                                                                                                   list):
                issues.add(path, "not a Loki streams response (data.resultType must be 'streams')",
                           field="data.resultType")
                continue
            files.append(path)
            for si, stream in enumerate(data["result"]):
                where = f"data.result[{si}]"
                labels = stream.get("stream") if isinstance(stream, dict) else None
                if not isinstance(labels, dict):
                    issues.add(path, "stream without labels", where=where, field="stream")
                    continue
                labels = {str(k): str(v) for k, v in labels.items()}
                pod = first_label(labels, POD_LABELS)
                namespace, node = first_label(labels, NAMESPACE_LABELS), first_label(labels, NODE_LABELS)
                level = level_name(text=first_label(labels, LEVEL_LABELS))
                for vi, value in enumerate(stream.get("values") or []):
                    # A third element (structured metadata, Loki 3) is not a canonical column.
                    if not isinstance(value, list) or len(value) < 2 or not isinstance(value[1], str):
                        issues.add(path, f"entry {value!r} is not [nanoseconds, line]", where=f"{where}.values[{vi}]",
                                   field="values")
                        continue
                    try:
                        nanos = int(value[0])
                    except (TypeError, ValueError):
                        issues.add(path, f"timestamp {value[0]!r} is not an integer of nanoseconds",
                                   where=f"{where}.values[{vi}]", field="values[0]")
                        continue
                    rows.append(time=nanos // 1000, namespace=namespace, pod=pod, node=node,
                                message=line_with_level(value[1], level))
        return FormatResult(logs=rows.frame() if len(rows) else None, files=files, issues=issues.issues)
