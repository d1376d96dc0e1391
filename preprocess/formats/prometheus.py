"""Prometheus -> canonical APM and infra rows (mapping: preprocess/formats/metric_map.py).

Two inputs, told apart by their first byte:

* the HTTP API's JSON (``/api/v1/query_range``: ``resultType`` ``matrix``, values
  ``[unix seconds, "value"]``; ``/api/v1/query``: ``vector``, one ``value``);
* the text exposition format or OpenMetrics (a scrape of ``/metrics``), parsed with
  ``prometheus_client``'s parsers. A sample without a timestamp takes the reader's ``at`` time
  (the command line's ``--at``); without one it is skipped and reported.

docs/formats/prometheus.md documents the mapping table and what the format cannot carry.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from preprocess.formats.contract import FormatError, FormatResult
from preprocess.formats.metric_map import MetricRows
from preprocess.formats.sources import IssueLog, read_bytes
from rca.timeutil import as_utc

log = logging.getLogger(__name__)

_SKIPPED_TYPES = ("histogram", "gaugehistogram", "summary")


def _micros_of_seconds(value: Any, *, field: str) -> int:
    """Prometheus' float seconds -> µs, rounded at the millisecond Prometheus stores."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{field} {value!r} is not a number of seconds")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{field} {value!r} is not a time")
    return round(seconds * 1000) * 1000


class PrometheusReader:
    """Prometheus query_range / query JSON and text / OpenMetrics expositions -> canonical metric frames."""

    name = "prometheus"
    description = "Prometheus /api/v1/query_range JSON, or a text / OpenMetrics exposition (with --at)"

    def __init__(self, *, at: datetime | None = None) -> None:
        self.at_us = None if at is None else int(as_utc(at).timestamp() * 1_000_000)

    def read(self, paths: Sequence[Path]) -> FormatResult:
        if not paths:
            raise FormatError("prometheus: no input files")
        issues, rows, files = IssueLog(), MetricRows(), []
        for path in map(Path, paths):
            data = read_bytes(path, issues=issues)
            if data is None:
                continue
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                issues.add(path, f"not UTF-8 ({exc.reason} at byte {exc.start})")
                continue
            files.append(path)
            if text.lstrip().startswith("{"):
                self._api(path, text, rows=rows, issues=issues)
            else:
                self._exposition(path, text, rows=rows, issues=issues)
        return FormatResult(apm=rows.apm_frame(), infra=rows.infra_frame(), files=files, issues=issues.issues)

    # ------------------------------------------------------------------ HTTP API JSON

    def _api(self, path: Path, text: str, *, rows: MetricRows, issues: IssueLog) -> None:
        import json

        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            issues.add(path, f"malformed JSON: {exc.msg}", line=exc.lineno)
            return
        data = document.get("data") if isinstance(document, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get("result"), list):
            status = document.get("status") if isinstance(document, dict) else None
            issues.add(path, f"not a Prometheus query response (status {status!r}, no data.result list)",
                       field="data.result")
            return
        result_type = data.get("resultType")
        if result_type not in ("matrix", "vector"):
            issues.add(path, f"resultType {result_type!r} holds no series (expected matrix or vector)",
                       field="data.resultType")
            return
        for si, series in enumerate(data["result"]):
            where = f"data.result[{si}]"
            labels = series.get("metric") if isinstance(series, dict) else None
            if not isinstance(labels, dict) or not labels.get("__name__"):
                # rate() and friends drop the name: label_replace(..., "__name__", ...) keeps one (see the docs).
                issues.add(path, "series without a metric name", where=where, field="metric.__name__")
                continue
            labels = {str(k): str(v) for k, v in labels.items()}
            name = labels.pop("__name__")
            points = series.get("values") if result_type == "matrix" else [series.get("value")]
            for pi, point in enumerate(points or []):
                point_where = f"{where}.values[{pi}]" if result_type == "matrix" else f"{where}.value"
                try:
                    if not isinstance(point, list) or len(point) != 2:
                        raise ValueError(f"point {point!r} is not [time, value]")
                    time_us = _micros_of_seconds(point[0], field="time")
                    value = float(point[1])  # "NaN", "+Inf" are Prometheus' spellings; float() reads them
                except (TypeError, ValueError) as exc:
                    issues.add(path, str(exc), where=point_where, field="values")
                    continue
                rows.add(name=name, labels=labels, time_us=time_us, value=value, issues=issues, path=path,
                         where=point_where)

    # ------------------------------------------------------------------ exposition

    def _exposition(self, path: Path, text: str, *, rows: MetricRows, issues: IssueLog) -> None:
        from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
        from prometheus_client.parser import text_string_to_metric_families as text_families

        openmetrics = text.rstrip().endswith("# EOF")
        parse = openmetrics_families if openmetrics else text_families
        try:
            # The parsers are generators: parse all now, so a bad line fails here and is reported.
            families = list(parse(text))
        except ValueError as exc:
            # prometheus_client stops at the first bad line; that file's series are lost (the parser's message
            # quotes the line). Falling back line by line would misread multi-line families.
            issues.add(path, f"unparsable exposition: {exc}")
            return
        missing_time = 0
        for family in families:
            if family.type in _SKIPPED_TYPES:
                issues.add(path, f"{family.type} {family.name!r} not imported (only single-value samples are)",
                           field=family.name, lost=False)
                continue
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue  # a counter's creation time, not a measurement
                stamp = sample.timestamp
                if stamp is None:
                    if self.at_us is None:
                        missing_time += 1
                        continue
                    time_us = self.at_us
                elif hasattr(stamp, "sec"):  # OpenMetrics Timestamp(sec, nsec)
                    time_us = stamp.sec * 1_000_000 + stamp.nsec // 1000
                else:
                    time_us = round(float(stamp) * 1000) * 1000
                rows.add(name=sample.name, labels=dict(sample.labels), time_us=time_us, value=float(sample.value),
                         issues=issues, path=path, where=sample.name)
        if missing_time:
            issues.add(path, f"{missing_time} sample(s) without a timestamp and no --at time given: skipped",
                       field="timestamp")
