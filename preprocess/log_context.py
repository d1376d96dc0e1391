"""The request a log line was written for, and whether the line reports an error.

Instrumented services write the request's trace context into their lines: a Java MDC's
``TraceID: ... SpanID: ...`` (Nezha's OnlineBoutique and TrainTicket), OpenTelemetry's log
correlation ``trace_id=... span_id=...`` (Python's ``otelSpanID=``), or JSON fields ``"span_id"``
/ ``"spanId"``. The span id ties the line to the span of the request that wrote it.

Why it matters: some tracers record no call status at all (Nezha's spans carry none), so a call
that failed looks like one that succeeded, and only the lines its handler wrote say otherwise. A
span whose own lines report an error (``error_span_ids``) is counted an error call by the trace
detector, which then sees where in the call chain errors start, as it does from a status.

What counts as an error line: its level, never its words (a line at INFO may well say "error"):
a JSON ``severity`` / ``level`` field, a logfmt ``level=``, or a level word among a plain line's
first four tokens (``17:20:54.006 ERROR o.s.OrderServiceImpl ...``).
"""
from __future__ import annotations

import polars as pl

# The span id a line states; "otel" for OpenTelemetry Python's ``otelSpanID=``. Also what the
# log detector masks out of a line before mining (``detect_log._MASKS``), with the trace id.
SPAN_ID_PATTERN = r'(?i)(?:\b|otel)span[_-]?id"?\s*[:=]\s*"?([0-9a-f]{16})\b'

_LEVELS = "error|err|fatal|critical|crit|severe|panic|alert|emerg"
ERROR_LEVEL_PATTERN = "|".join((
    rf'(?i:"(?:severity|level|levelname|log\.level|severity_?text)"\s*:\s*"(?:{_LEVELS})")',
    rf"(?i:\blevel=(?:{_LEVELS})\b)",
    r"^\s*(?:\S+\s+){0,3}(?:ERROR|FATAL|SEVERE|CRITICAL|PANIC)\b",
))


def span_id_of(messages: pl.Expr) -> pl.Expr:
    """Expression: the (lower-case) span id a line states, else null."""
    return messages.str.extract(SPAN_ID_PATTERN, 1).str.to_lowercase()


def is_error_line(messages: pl.Expr) -> pl.Expr:
    """Expression: the line's level is an error (or worse)."""
    return messages.str.contains(ERROR_LEVEL_PATTERN)


def error_span_ids(logs: pl.DataFrame) -> pl.Series:
    """Distinct span ids (lower case) of the lines in ``logs`` (column ``message``) that report an error.

    Lines without a span id, and lines below error, are left out; so is every line of logs
    that state no trace context (the 2025 release's): then the series is empty.
    """
    if logs.height == 0:
        return pl.Series("span_id", [], dtype=pl.Utf8)
    message = pl.col("message")
    # The span id first: most lines of most systems state none, and then the level is not read.
    stated = logs.lazy().select(span_id_of(message).alias("span_id"), message).filter(pl.col("span_id").is_not_null())
    return (stated.filter(is_error_line(message)).select(pl.col("span_id").unique(maintain_order=True))
            .collect().get_column("span_id"))


def with_logged_errors(spans: pl.DataFrame, *, error_spans: pl.Series) -> pl.DataFrame:
    """``spans`` with ``is_error`` also set where the span's own lines reported an error."""
    if error_spans.len() == 0 or spans.height == 0:
        return spans
    return spans.with_columns(
        (pl.col("is_error").fill_null(False) | pl.col("span_id").str.to_lowercase().is_in(error_spans.implode()))
        .alias("is_error"))
