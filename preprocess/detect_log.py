"""Log detector: Drain3 templates with persisted miner state, per-minute counts, bursts.

This module owns:

* ``extract_and_mask``: the inner ``message`` / ``error`` of JSON lines, with ids, IPs
  and numbers masked, so that millions of lines collapse into a few thousand distinct
  strings before mining (the speed trick for a ~6M-line day);
* ``LogTemplateMiner``: a Drain3 miner whose state is saved atomically (Drain3's own
  persistence seam, ``AtomicFilePersistence``), so template ids stay stable across
  nightly runs and new templates are added;
* ``log_counts``: per (pod, template, minute) counts with the most frequent masked line
  as an example, the stored log feature. A multi-line entry stored one record per printed
  line (a stack trace's indented frames) counts once, by its unindented lines (``is_continuation``). It masks one line per class (lines equal but for
  their digits and UUIDs mask alike; ``_line_classes``), and the nightly build counts
  hours on threads while the next hour is read and the last one mined (``_map_ahead``);
* ``score_log_window``: templates that burst or are new in a window against the
  neighbouring baseline. Chronic noise (a template with a steady rate in the baseline)
  is separated statistically: a steady rate is not a burst, whatever its wording.
  A pod whose log stream stops is reported as ``silent``; a template that stops while its
  pod keeps logging its other lines ``down`` (``_fell_templates``);
* ``LogDetector``: the halves above behind the ``preprocess.detect.Detector`` contract.
"""
from __future__ import annotations

import binascii
import json
import logging
import re
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

import numpy as np
import polars as pl
import pyarrow as pa
from drain3 import TemplateMiner
from drain3.persistence_handler import PersistenceHandler
from drain3.template_miner_config import TemplateMinerConfig

from preprocess.arrow_numpy import numpy_view
from preprocess.baseline import (
    Span,
    bucket_spans,
    clean_minutes,
    drop_spans,
    history_span,
    spans_before,
    window_first_minute,
)
from preprocess.schema import TIME, FeatureTable, RawInput, strongest_first
from rca.atomic import write_bytes_atomic
from rca.errors import DataError
from rca.system import SystemSpec

log = logging.getLogger(__name__)
A = TypeVar("A")
R = TypeVar("R")

LOG_COUNT_SCHEMA: dict[str, pl.DataType] = {
    "time": TIME,
    "pod": pl.Utf8(),
    "node": pl.Utf8(),
    "template_id": pl.Int64(),
    "count": pl.Int64(),
    "example": pl.Utf8(),  # the template's most frequent masked line in this row (Drain keeps no words it merged)
}
TEMPLATE_SCHEMA: dict[str, pl.DataType] = {"template_id": pl.Int64(), "template": pl.Utf8()}
LOG_EVENT_SCHEMA: dict[str, pl.DataType] = {
    "component": pl.Utf8(),  # pod emitting the lines
    "template_id": pl.Int64(),  # -1 for the whole stream (silent pod)
    "template": pl.Utf8(),
    "example": pl.Utf8(),  # most frequent masked line of the template in the window; "" for a silent pod
    "direction": pl.Utf8(),  # up | new | silent | down
    "z": pl.Float64(),
    "ratio": pl.Float64(),
    "window_count": pl.Int64(),
    "baseline_count": pl.Int64(),
    "onset": TIME,
}

MASKED_MAX_CHARS = 240
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# Order matters: long ids before IPs before plain numbers. ``log_counts`` masks one line per
# class (see ``_line_classes``), which is exact only while every pattern treats the digits
# 1-9 alike and a UUID-shaped span as a whole: a pattern naming a digit breaks it
# (tests/test_detect_log_masking.py checks the classes against line-by-line masking).
# The first two drop what every line carries besides its statement: the time it opens with
# (the collector's time is the row's) and, wherever it stands, the request's trace context (a
# Java MDC's ``TraceID: ... SpanID: ...``, its value up to the next space).
# Identical in every line after masking, they made lines of different statements look alike
# to Drain (7 of a TrainTicket line's ~15 tokens); without them a line's first tokens are its
# level and logger, which Drain's prefix tree keeps apart.
_MASKS: tuple[tuple[str, str], ...] = (
    (r"^\s*(?:\d{4}-\d{2}-\d{2}[T ])?\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\s+", ""),
    (r"(?i)\b(?:trace|span)[_-]?id\s*[:=]\s*\S+\s*", ""),
    (_UUID, "<ID>"),
    (r"\b[0-9a-fA-F]{16,}\b", "<ID>"),
    (r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(:\d+)?", "<IP>"),
    (r"[-+]?\d+(\.\d+)?", "<NUM>"),
    (r"\s+", " "),
)


# A record that continues the entry above it. Container runtimes, and log shippers without a
# multiline rule, keep every printed line as a record: a stack trace arrives as its head line,
# then indented frames (Java's "\tat ...", "\t... 87 common frames omitted"; a Python
# traceback's "  File ..." and code lines: the 2025 release's error templates hold
# "raise InactiveRpcError(state)" as often as its head). Indented is the rule shippers use for
# Java (Filebeat's multiline ``^[[:space:]]``). The frames repeat on every throw of a statement
# and say nothing its head, exception and "Caused by:" lines do not: they are not counted.
_CONTINUATION = r"^[ \t]+\S"


def is_continuation(messages: pl.Expr) -> pl.Expr:
    """Expression: the record continues a multi-line entry above it (an indented line)."""
    return messages.str.contains(_CONTINUATION)


def extract_and_mask(messages: pl.Expr) -> pl.Expr:
    """Expression: inner JSON ``message`` (+ ``error``) or the raw line, masked and trimmed."""
    is_json = messages.str.starts_with("{")
    return mask_text(_text_of(messages, inner=messages.str.json_path_match("$.message"),
                              error=messages.str.json_path_match("$.error"), is_json=is_json))


def _text_of(messages: pl.Expr, *, inner: pl.Expr, error: pl.Expr, is_json: pl.Expr) -> pl.Expr:
    return (
        pl.when(is_json & inner.is_not_null())
        .then(pl.when(error.is_not_null()).then(pl.concat_str(inner, pl.lit(": "), error)).otherwise(inner))
        .otherwise(messages)
    )


def mask_text(text: pl.Expr) -> pl.Expr:
    """Expression: ids, IPs and numbers of an extracted text masked, whitespace collapsed, trimmed."""
    for pattern, replacement in _MASKS:
        text = text.str.replace_all(pattern, replacement)
    return text.str.strip_chars().str.slice(0, MASKED_MAX_CHARS)


def masked_messages(messages: pl.Series) -> pl.DataFrame:
    """``extract_and_mask`` of the distinct values of ``messages``: columns ``message``, ``masked``."""
    distinct = messages.unique()
    return pl.DataFrame({"message": distinct, "masked": masked_of_distinct(distinct)})


def masked_of_distinct(messages: pl.Series) -> pl.Series:
    """``extract_and_mask`` of each of ``messages`` (distinct values), computed where it is cheap.

    JSON is parsed once per distinct line, ``$.error`` only in lines that can hold that key
    (its name written out, or a backslash escape), and the masking regexes run once per
    distinct extracted text (a full-scale hour: 200 k lines, 140 k distinct, 9 k distinct
    texts, 30 templates).
    """
    col = pl.col("message")
    frame = messages.rename("message").to_frame().with_columns(
        col.str.starts_with("{").fill_null(False).alias("is_json"))
    frame = frame.with_columns(pl.when(pl.col("is_json")).then(col.str.json_path_match("$.message")).alias("inner"))
    may_have_error = (frame.get_column("inner").is_not_null()
                      & (frame.get_column("message").str.contains('"error"', literal=True)
                         | frame.get_column("message").str.contains("\\", literal=True)))
    rows = may_have_error.arg_true()
    error = pl.Series("error", [None] * frame.height, dtype=pl.Utf8)
    if len(rows):
        error = error.scatter(rows, frame.get_column("message").gather(rows).str.json_path_match("$.error"))
    texts = frame.with_columns(error).select(
        _text_of(col, inner=pl.col("inner"), error=pl.col("error"), is_json=pl.col("is_json")).alias("text"))
    distinct_texts = texts.get_column("text").unique().to_frame("text")
    masks = distinct_texts.with_columns(mask_text(pl.col("text")).alias("masked"))
    return (texts.join(masks, on="text", how="left", nulls_equal=True, maintain_order="left")
            .get_column("masked").alias("masked"))


MINER_STATE_NAME = "log_miner_state.bin"


@dataclass(frozen=True)
class LogParams:
    """Knobs of the log detector: Drain3 clustering (build) and the burst test (score)."""

    min_z: float = 4.0  # Poisson z a template's window count must reach to burst
    min_ratio: float = 3.0  # ... and this multiple of its expected count
    min_new_count: int = 3  # lines a template unseen in the baseline needs to count as new
    # A code fault breaks the code between two log statements: the later statement stops while
    # the earlier ones go on (Nezha's labels name a fault's region by such a pair). A template
    # has fallen when the pod's other steady templates keep at least ``min_fell_pod_level`` of
    # their rate, its own expected count at that level is at least ``min_fell_expected`` lines
    # and it kept at most ``max_fell_ratio`` of them (and z >= min_z).
    min_fell_expected: float = 10.0
    max_fell_ratio: float = 0.2
    min_fell_pod_level: float = 0.3
    sim_th: float = 0.5  # Drain similarity threshold
    depth: int = 4  # Drain parse-tree depth
    # Some sources keep logs only around incidents (Nezha: the minutes after each injection):
    # with fewer recorded baseline minutes than this, every template would look new and
    # ordinary INFO lines would outrank the error. The baseline is then every recorded minute
    # of the history_minutes before and after_minutes after the window (other incidents
    # included): a template is new only if no other recorded minute has it. Against fewer
    # recorded minutes than this, history included (recording just started), nothing is new.
    min_baseline_minutes: int = 5
    history_minutes: int = 360
    after_minutes: int = 60


class MinerStateError(DataError):
    """The saved Drain3 miner state cannot be read."""


class AtomicFilePersistence(PersistenceHandler):
    """Drain3 persistence into one file, replaced atomically (``rca.atomic``)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def save_state(self, state: bytes) -> None:
        write_bytes_atomic(self.path, state)

    def load_state(self) -> bytes | None:
        return self.path.read_bytes() if self.path.exists() else None


class LogTemplateMiner:
    """Drain3 miner whose state lives in ``state_path`` (None: in memory only).

    Drain3 snapshots the whole tree on every new cluster when a persistence handler is
    attached, which is quadratic over a day; so the handler is attached only to load
    (``TemplateMiner.load_state``) and to ``save`` once per partition, never while mining.
    """

    def __init__(self, *, state_path: Path | None, params: LogParams = LogParams()) -> None:
        config = TemplateMinerConfig()
        config.drain_sim_th = params.sim_th
        config.drain_depth = params.depth
        config.masking_instructions = []  # masking is done before, vectorised, in polars
        config.parametrize_numeric_tokens = False
        self._persistence = AtomicFilePersistence(state_path) if state_path is not None else None
        self._miner = TemplateMiner(persistence_handler=None, config=config)
        if self._persistence is not None:
            self._with_persistence(self._persistence, self._miner.load_state)
            if self._miner.drain.clusters:
                log.info("loaded %d log templates from %s", len(self._miner.drain.clusters), self._persistence.path)

    def _with_persistence(self, persistence: AtomicFilePersistence, action: Callable[[], object]) -> None:
        self._miner.persistence_handler = persistence
        try:
            action()
        except (ValueError, TypeError, KeyError, AttributeError, zlib.error, binascii.Error,
                json.JSONDecodeError) as exc:
            # jsonpickle raises any of these on a truncated or foreign state.
            raise MinerStateError(f"{persistence.path}: unreadable Drain3 miner state: {exc}") from exc
        finally:
            self._miner.persistence_handler = None

    def save(self) -> None:
        """Write the miner state atomically (a no-op without a state path)."""
        if self._persistence is not None:
            self._with_persistence(self._persistence, lambda: self._miner.save_state("partition done"))

    def template_ids(self, masked_messages: list[str]) -> list[int]:
        """Cluster id of each message; messages are mined in sorted order for determinism."""
        ids: dict[str, int] = {}
        for message in sorted(set(masked_messages)):
            ids[message] = self._miner.add_log_message(message)["cluster_id"]
        return [ids[m] for m in masked_messages]

    def templates(self) -> pl.DataFrame:
        rows = [(c.cluster_id, c.get_template()) for c in self._miner.drain.clusters]
        return pl.DataFrame(rows, schema=TEMPLATE_SCHEMA, orient="row").sort("template_id")


# Line classes (the speed trick of ``log_counts``). Two lines in one class mask alike, so
# only one line per class is parsed and masked: a full-scale hour has 200 k lines, 137 k
# distinct (timestamps, request ids), 31 k with digits 2-9 written as 1, and 3 k with
# UUID-shaped spans also written as one fixed UUID.
#
# Why it is exact. The masks see a digit 2-9 as a 1 would be seen (a hex char, a word char, a
# digit), and every digit ends inside a mask; a UUID-shaped span (hex and dashes) is masked as
# a whole, and no JSON escape or delimiter can be part of one. So a plain-text line, or a JSON
# line's ``message`` / ``error`` string, masks the same before and after the rewrite, and
# the rewrite keeps a line valid or invalid JSON, with the same structure. Classes whose
# representative has one of ``_CLASS_UNSAFE`` are masked line by line instead (the exact path).
_CANONICAL_UUID = "00000000-0000-0000-0000-000000000000"
# ``_UUID`` matched on bytes rather than Unicode characters (``(?-u)``), for the rewrite of
# every class line: the same matches (its classes and its dash are ASCII, and an ASCII byte
# is never part of a multi-byte character), at ~0.55x the cost (a full-scale hour's 31 k
# class lines: ~22 instead of ~39 ms).
_UUID_BYTES = f"(?-u){_UUID}"
_CLASS_UNSAFE = "|".join((
    r"\\[0-9a-fA-Fu]",  # \b \f \uXXXX: an escape made of hex letters may hold a rewritten char
    r'"(?:message|error)"\s*:\s*[^"\s]',  # a number or object as message: re-serialised, digits and all
    r"[:\[,]\s*-?\d+(?:\.\d+)?[eE]",  # 9e999 is out of range (invalid JSON), its class 1e111 is not
    r"[:\[,]\s*-?\d{20}",  # likewise a very long integer
))


def _distinct_rows(values: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """A row of each distinct value of a string column without nulls, and each row's distinct number.

    Arrow's dictionary encoding numbers the values on a hash table of the strings themselves:
    exact, and cheaper than polars' 64-bit hash, its dense rank (a sort) and the check of every
    row against its group's row (~0.6x the cost on a full-scale hour's 200 k lines).
    """
    import pyarrow.compute as pc  # imported here: it costs the CLI's other commands start-up time

    array = values.to_arrow(compat_level=pl.CompatLevel.newest())
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    try:
        encoded = pc.dictionary_encode(array)
    except pa.ArrowNotImplementedError:  # a pyarrow that cannot hash string views (polars' strings)
        encoded = pc.dictionary_encode(array.cast(pa.large_string()))
    number = numpy_view(encoded.indices).astype(np.int64)
    some_row = np.empty(len(encoded.dictionary), dtype=np.int64)
    some_row[number] = np.arange(len(values))  # any row of the group stands for it: they are equal
    return some_row, number


def _digits_as_one(values: pl.Series) -> pl.Series:
    """``values`` with the digits 2-9 written as 1: the string bytes rewritten with numpy.

    Polars' ``str.replace_all("[2-9]", "1")`` costs ~8x more on a full-scale hour.
    """
    array = values.to_arrow(compat_level=pl.CompatLevel.newest())
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_string_view(array.type):
        # Arrow's string views: 16 bytes per value (length, then the value itself up to 12
        # bytes, or its first 4 bytes and where the rest lies), then the data buffers.
        validity, views, *data = array.buffers()
        view = np.frombuffer(views, dtype=np.uint8).reshape(-1, 16)
        inline = np.frombuffer(views, dtype="<i4").reshape(-1, 4)[:, 0] <= 12
        rewritten_views = view.copy()
        # Copied out first: numpy's arithmetic on the strided 4-byte slice costs ~3x more.
        rewritten_views[:, 4:8] = _ones_for_digits(np.ascontiguousarray(view[:, 4:8]))
        rewritten_views[inline, 8:] = _ones_for_digits(view[inline, 8:])
        buffers = [validity, pa.py_buffer(rewritten_views), *(pa.py_buffer(_ones_for_digits(_bytes(b))) for b in data)]
    elif pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        validity, offsets, data_buffer = array.buffers()
        buffers = [validity, offsets, pa.py_buffer(_ones_for_digits(_bytes(data_buffer)))]
    else:
        raise TypeError(f"unexpected Arrow type {array.type} for a string column")
    rewritten = pa.Array.from_buffers(array.type, len(array), buffers, array.null_count, array.offset)
    return pl.Series(_ArrowArray(rewritten)).alias(values.name)


class _ArrowArray:
    """An Arrow array offered to polars through the Arrow PyCapsule interface only: given a
    pyarrow array, polars imports pyarrow.compute first (~0.3 s a process), for nothing here."""

    def __init__(self, array: pa.Array) -> None:
        self._array = array

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]:
        return self._array.__arrow_c_array__(requested_schema)


def _bytes(buffer: pa.Buffer | None) -> np.ndarray:
    return np.frombuffer(buffer, dtype=np.uint8) if buffer is not None else np.empty(0, dtype=np.uint8)


def _ones_for_digits(data: np.ndarray) -> np.ndarray:
    """Bytes with ASCII 2-9 replaced by 1 (never part of a multi-byte UTF-8 character)."""
    is_2_to_9 = ((data - np.uint8(ord("2"))) < 8).view(np.uint8)  # uint8 wraps below "2"
    return data - is_2_to_9 * (data - np.uint8(ord("1")))


def _line_classes(messages: pl.Series) -> tuple[pl.Series, np.ndarray]:
    """Representative line of each class (see above) and each line's class number."""
    digits = _digits_as_one(messages)
    first, line_class = _distinct_rows(digits)
    uuids = digits.gather(first).str.replace_all(_UUID_BYTES, _CANONICAL_UUID)
    first_uuid, uuid_class = _distinct_rows(uuids)
    return uuids.gather(first_uuid), uuid_class[line_class]


def masked_codes(messages: pl.Series) -> tuple[pl.Series, np.ndarray]:
    """Distinct ``extract_and_mask`` values of ``messages`` (a null line as ""), each line's index into them."""
    messages = messages.fill_null("")  # masks to "" like a null line, which "" stands for in the counts
    representatives, line_class = _line_classes(messages)
    masked = masked_of_distinct(representatives)
    unsafe_class = representatives.str.contains(_CLASS_UNSAFE).to_numpy()
    unsafe_rows = np.flatnonzero(unsafe_class[line_class])
    if len(unsafe_rows):
        # The exact path: those lines are masked one distinct line at a time.
        unsafe_lines = messages.gather(unsafe_rows)
        first, line_index = _distinct_rows(unsafe_lines)
        line_class = line_class.copy()
        line_class[unsafe_rows] = len(masked) + line_index
        masked = pl.concat([masked, masked_of_distinct(unsafe_lines.gather(first))])
    distinct_first, class_code = _distinct_rows(masked)
    return masked.gather(distinct_first), class_code[line_class]


def log_counts(logs: pl.DataFrame, *, miner: LogTemplateMiner) -> pl.DataFrame:
    """Per (minute, pod, node, template) line counts of canonical log rows."""
    return _with_templates(masked_counts(logs), miner=miner)


def masked_counts(logs: pl.DataFrame) -> pl.DataFrame:
    """Per (minute, pod, node, masked line) line counts: the half of ``log_counts`` that needs no miner.

    A multi-line entry counts once, by its unindented lines (``is_continuation``).
    """
    logs = logs.filter(~is_continuation(pl.col("message")).fill_null(False))
    if logs.height == 0:
        return pl.DataFrame(schema={"time": TIME, "pod": pl.Utf8, "node": pl.Utf8, "count": pl.UInt32,
                                    "masked": pl.Utf8})
    distinct_masked, line_code = masked_codes(logs.get_column("message"))
    lookup = pl.DataFrame({"code": pl.int_range(len(distinct_masked), eager=True, dtype=pl.Int64),
                           "masked": distinct_masked})
    return (
        logs.lazy()
        .select(pl.col("time").dt.truncate("1m"), "pod", "node", pl.Series("code", line_code))
        .group_by("time", "pod", "node", "code")
        .agg(pl.len().alias("count"))
        .join(lookup.lazy(), on="code", how="left")
        .drop("code")
        .collect()
    )


def _with_templates(counts: pl.DataFrame, *, miner: LogTemplateMiner) -> pl.DataFrame:
    """``masked_counts`` per template: the masked lines mined (in sorted order), then summed."""
    if counts.height == 0:
        return pl.DataFrame(schema=LOG_COUNT_SCHEMA)
    unique_masked = counts.get_column("masked").unique().to_list()
    mapping = pl.DataFrame({"masked": unique_masked,
                            "template_id": miner.template_ids(unique_masked)},
                           schema={"masked": pl.Utf8, "template_id": pl.Int64})
    return (
        counts
        .join(mapping, on="masked", how="left")
        .group_by("time", "pod", "node", "template_id")
        .agg(pl.col("count").sum(), _most_frequent("masked").alias("example"))
        .sort("time", "pod", "template_id", "node", nulls_last=True)
        .cast(pl.Schema(LOG_COUNT_SCHEMA))
    )


# Hours whose lines are counted on threads while the caller reads the next hour and mines
# the previous one: polars and numpy leave the GIL, so a two-core machine works on both.
# Three rather than two: one thread is often waiting for the GIL (full-scale day, 2 cores:
# 4.7 s with one, 3.0 s with two, 2.7 s with three; ~60 MB more memory an hour ahead).
HOURS_AHEAD = 3


def _map_ahead(function: Callable[[A], R], items: Iterable[A], *, ahead: int = HOURS_AHEAD) -> Iterator[R]:
    """``function`` of each of ``items``, in order, run on threads up to ``ahead`` items ahead of the caller."""
    with ThreadPoolExecutor(max_workers=ahead, thread_name_prefix="log-counts") as pool:
        pending: deque[Future[R]] = deque()
        for item in items:
            pending.append(pool.submit(function, item))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _most_frequent(column: str) -> pl.Expr:
    """Aggregation: the ``column`` value of the group's row with the highest ``count`` (ties: smallest value)."""
    return pl.col(column).sort_by("count", column, descending=[True, False]).first()


def score_log_window(
    counts: pl.DataFrame,
    templates: pl.DataFrame,
    *,
    start: datetime,
    end: datetime,
    baseline_start: datetime,
    params: LogParams = LogParams(),
    exclude: Sequence[Span] = (),
) -> pl.DataFrame:
    """Bursting, new and silenced log streams of the window [start, end] per pod.

    Counts are compared as Poisson rates: expected = baseline rate × window minutes,
    z = (observed - expected) / sqrt(expected + 1). A chronic template keeps its rate
    and so never passes both the z and the ratio test. Rows in ``exclude`` spans before the
    window (other incidents) are not baseline.
    """
    window_start = window_first_minute(start)
    spans = bucket_spans(spans_before(exclude, window_start=window_start))
    sub = drop_spans(counts.filter((pl.col("time") >= baseline_start) & (pl.col("time") <= end)), spans)
    if sub.height == 0:
        return pl.DataFrame(schema=LOG_EVENT_SCHEMA)
    in_window = pl.col("time") >= window_start
    # A minute with no line from any pod is unrecorded (logs kept only around incidents, a
    # lost file): it counts neither as baseline nor as window.
    recorded = sub.group_by("time").agg(pl.col("count").sum()).filter(pl.col("count") > 0).get_column("time")
    window_recorded = int((recorded >= window_start).sum())
    if window_recorded == 0:
        return pl.DataFrame(schema=LOG_EVENT_SCHEMA)
    baseline_recorded = int((recorded < window_start).sum())
    baseline_minutes = max(1.0, min(clean_minutes(baseline_start, window_start, spans), float(baseline_recorded)))
    if baseline_recorded < params.min_baseline_minutes:
        lo, hi = history_span(window_start, end, history_minutes=params.history_minutes,
                              after_minutes=params.after_minutes)
        around = counts.filter(pl.col("time").is_between(lo, hi) & ~pl.col("time").is_between(window_start, end))
        history_minutes = around.filter(pl.col("count") > 0).get_column("time").n_unique()
        if history_minutes > baseline_recorded:
            # The window's own rows, and the history moved just before it as the baseline.
            sub = pl.concat([sub.filter(in_window), around.with_columns(
                pl.lit(window_start - timedelta(minutes=1)).cast(sub.schema["time"]).alias("time"))])
            baseline_minutes = float(history_minutes)
    window_minutes = max(1.0, min((end - window_start).total_seconds() / 60 + 1, float(window_recorded)))
    per_template = sub.group_by("pod", "template_id").agg(
        pl.col("count").filter(in_window).sum().alias("window_count"),
        pl.col("count").filter(~in_window).sum().alias("baseline_count"),
        pl.col("time").filter(in_window).min().alias("onset"),
    )
    scale = window_minutes / baseline_minutes
    scored = per_template.with_columns(
        expected=pl.col("baseline_count") * scale,
    ).with_columns(
        z=(pl.col("window_count") - pl.col("expected")) / (pl.col("expected") + 1).sqrt(),
        ratio=pl.when(pl.col("expected") > 0).then(pl.col("window_count") / pl.col("expected")).otherwise(None),
    )
    new = ((pl.col("baseline_count") == 0) & (pl.col("window_count") >= params.min_new_count)
           & pl.lit(baseline_minutes >= params.min_baseline_minutes))
    burst = (pl.col("baseline_count") > 0) & (pl.col("z") >= params.min_z) & (pl.col("ratio") >= params.min_ratio)
    examples = (
        sub.filter(in_window).group_by("pod", "template_id", "example").agg(pl.col("count").sum())
        .group_by("pod", "template_id").agg(_most_frequent("example"))
    )
    events = (
        scored.filter(new | burst)
        .with_columns(direction=pl.when(new).then(pl.lit("new")).otherwise(pl.lit("up")))
        .join(templates, on="template_id", how="left")
        .join(examples, on=["pod", "template_id"], how="left")
    )
    silent = _silent_pods(sub, in_window=in_window, scale=scale)
    fell = _fell_templates(scored, sub, in_window=in_window, window_start=window_start, params=params)
    frame = pl.concat([
        events.select(pl.col("pod").alias("component"), "template_id", "template",
                      pl.col("example").fill_null(""), "direction",
                      pl.col("z").clip(upper_bound=50.0), "ratio", "window_count", "baseline_count", "onset"
                      ).cast(pl.Schema(LOG_EVENT_SCHEMA)),
        silent.cast(pl.Schema(LOG_EVENT_SCHEMA)),
        fell.join(templates, on="template_id", how="left").select(list(LOG_EVENT_SCHEMA))
        .cast(pl.Schema(LOG_EVENT_SCHEMA)),
    ])
    return strongest_first(frame, "component", "template_id", "direction")


def _fell_templates(scored: pl.DataFrame, sub: pl.DataFrame, *, in_window: pl.Expr, window_start: datetime,
                    params: LogParams) -> pl.DataFrame:
    """Templates that (almost) stopped while their pod kept logging its other steady templates.

    ``scored`` holds each (pod, template)'s window count and its ``expected`` count at the
    baseline rate. The pod's level is the median window/expected ratio of its steady
    templates, so a pod whose traffic halved expects each template at half its rate, and one
    bursting template does not move the level. A pod with fewer than two steady templates, or
    one that (nearly) stopped logging as a whole, has nothing to compare with: silence is
    ``_silent_pods``' business.
    """
    steady = scored.filter(pl.col("expected") >= params.min_fell_expected)
    level = steady.group_by("pod").agg(pl.col("ratio").median().alias("level"), pl.len().alias("steady"))
    fell = (
        steady.join(level, on="pod")
        .filter((pl.col("steady") >= 2) & (pl.col("level") >= params.min_fell_pod_level))
        .with_columns(expected_now=pl.col("expected") * pl.col("level"))
        .filter(pl.col("expected_now") >= params.min_fell_expected)
        .with_columns(
            z=(pl.col("expected_now") - pl.col("window_count")) / (pl.col("expected_now") + 1).sqrt(),
            ratio=pl.col("window_count") / pl.col("expected_now"),
        )
        .filter((pl.col("ratio") <= params.max_fell_ratio) & (pl.col("z") >= params.min_z))
    )
    if fell.height == 0:
        return pl.DataFrame(schema={k: v for k, v in LOG_EVENT_SCHEMA.items() if k != "template"})
    # The line the pod no longer writes: its most frequent form before the window.
    examples = (
        sub.filter(~in_window).join(fell.select("pod", "template_id"), on=["pod", "template_id"])
        .group_by("pod", "template_id", "example").agg(pl.col("count").sum())
        .group_by("pod", "template_id").agg(_most_frequent("example"))
    )
    return fell.join(examples, on=["pod", "template_id"], how="left").select(
        pl.col("pod").alias("component"), "template_id", pl.col("example").fill_null(""),
        pl.lit("down").alias("direction"), pl.col("z").clip(upper_bound=50.0), "ratio",
        "window_count", "baseline_count",
        pl.lit(window_start).cast(sub.schema["time"]).alias("onset"),
    )


def _silent_pods(sub: pl.DataFrame, *, in_window: pl.Expr, scale: float) -> pl.DataFrame:
    """Pods that logged steadily in the baseline and (almost) stopped in the window."""
    per_pod = sub.group_by("pod").agg(
        pl.col("count").filter(in_window).sum().alias("window_count"),
        pl.col("count").filter(~in_window).sum().alias("baseline_count"),
        pl.col("time").filter(~in_window).max().alias("onset"),
    ).with_columns(expected=pl.col("baseline_count") * scale)
    silent = per_pod.filter((pl.col("expected") >= 20) & (pl.col("window_count") < 0.1 * pl.col("expected")))
    return silent.select(
        pl.col("pod").alias("component"),
        pl.lit(-1, pl.Int64).alias("template_id"),
        pl.lit("log stream").alias("template"),
        pl.lit("").alias("example"),
        pl.lit("silent").alias("direction"),
        ((pl.col("expected") - pl.col("window_count")) / (pl.col("expected") + 1).sqrt()).clip(upper_bound=50.0).alias("z"),
        (pl.col("window_count") / pl.col("expected")).alias("ratio"),
        "window_count", "baseline_count", "onset",
    )


# A token made only of masks (and punctuation around them), e.g. ``<*>``, ``<IP>:`` or ``<NUM>:<NUM>``.
_MASK_TOKEN = re.compile(r"(?:[^\w<>]*<(?:\*|NUM|IP|ID)>)+[^\w<>]*")


def template_keyword(template: str, *, max_chars: int = 48) -> str:
    """Readable keyword of a template or masked line: mask-only tokens dropped, long text elided in the middle."""
    words = [w for w in template.split() if not _MASK_TOKEN.fullmatch(w)]
    text = " ".join(words).strip(" :,{}\"'")
    return elide(text, max_chars=max_chars) if text else "log template"


# Words that carry no evidence of their own in a log line: articles, prepositions and the
# severity levels below error. Negations and error words stay ("could not load", "error").
_FILLER_WORDS = frozenset("a an the of to for in on at by with and or is are be as from info warn debug".split())
_MASK = re.compile(r"<(?:\*|NUM|IP|ID)>")
_WORD = re.compile(r"[A-Za-z][\w.\-]*[A-Za-z0-9]|[A-Za-z]")
# java.lang.reflect.InvocationTargetException -> InvocationTargetException; http.resp.status stays.
_QUALIFIED_CLASS = re.compile(r"(?:[a-z][a-z0-9_]*\.)+([A-Z]\w*)")


def log_words(line: str) -> list[str]:
    """The words of a template or masked line that say what happened, in order, once each:
    masks, numbers, punctuation and filler words dropped, package prefixes cut from class names."""
    words: list[str] = []
    seen: set[str] = set()
    # A mask may sit inside a word ("grpc-default-executor<NUM>"): it becomes a word break.
    for token in _WORD.findall(_MASK.sub(" ", line)):
        word = _QUALIFIED_CLASS.sub(r"\1", token)
        lowered = word.lower()
        if lowered in _FILLER_WORDS or lowered in seen:
            continue
        seen.add(lowered)
        words.append(word)
    return words


def elide(text: str, *, max_chars: int, head_chars: int = 25) -> str:
    """``text`` within ``max_chars``: its head and its tail joined by "…" (an error line ends with its cause)."""
    if len(text) <= max_chars:
        return text
    head = text[:min(head_chars, max_chars // 2)].rstrip()
    tail = text[len(text) - (max_chars - len(head) - 1):].lstrip()
    return f"{head}…{tail}"


class LogDetector:
    """Per-minute template counts at build time (one shared miner); bursts, new templates, silence at score time."""

    Params = LogParams
    name = "log"
    sequential = True  # one miner, its state carried from day to day
    raw = RawInput(sources=("log",), per_hour=True, rows_read="lines_read")
    raw_columns = {"log": ("time", "pod", "node", "message")}  # what build reads (the nightly job projects on it)
    feature_tables = (
        FeatureTable("log_counts", LOG_COUNT_SCHEMA),
        FeatureTable("log_templates", TEMPLATE_SCHEMA, scope="index"),
    )
    event_schemas = {"log": LOG_EVENT_SCHEMA}

    def __init__(self, params: LogParams = LogParams()) -> None:
        self.params = params
        self._miner: LogTemplateMiner | None = None
        self._state_dir: Path | None = None

    def miner(self, state_dir: Path | None) -> LogTemplateMiner:
        """The miner of ``state_dir`` (its state file is loaded once, then shared by every build)."""
        if self._miner is None or self._state_dir != state_dir:
            path = Path(state_dir) / MINER_STATE_NAME if state_dir is not None else None
            self._miner = LogTemplateMiner(state_path=path, params=self.params)
            self._state_dir = state_dir
        return self._miner

    def build(self, chunks: Iterable[Mapping[str, pl.DataFrame | None]], *, state_dir: Path | None = None,
              ) -> dict[str, pl.DataFrame]:
        """Counts of one day's hour chunks ``{"log": frame}``; the miner state is saved once, at the end.

        The miner state is saved before any table is written: a kill before the index
        records the partition only re-mines this day, and the restored miner assigns the
        same template ids again.
        """
        miner = self.miner(state_dir)
        hours = (logs for chunk in chunks if (logs := chunk.get("log")) is not None)
        parts = [_with_templates(counts, miner=miner) for counts in _map_ahead(masked_counts, hours)]
        miner.save()
        counts = pl.concat(parts) if parts else pl.DataFrame(schema=LOG_COUNT_SCHEMA)
        return {"log_counts": counts, "log_templates": miner.templates()}

    def context_spans(self, *, start: datetime, end: datetime, baseline_start: datetime) -> list[Span]:
        """The history that stands in for a thin baseline (logs recorded only around incidents)."""
        return [history_span(start, end, history_minutes=self.params.history_minutes,
                             after_minutes=self.params.after_minutes)]

    def score(self, features: Mapping[str, pl.DataFrame], *, start: datetime, end: datetime,
              baseline_start: datetime, system: SystemSpec, exclude: Sequence[Span] = ()) -> dict[str, pl.DataFrame]:
        events = score_log_window(features["log_counts"], features["log_templates"], start=start, end=end,
                                  baseline_start=baseline_start, params=self.params, exclude=exclude)
        return {"log": events}
