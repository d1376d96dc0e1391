"""``rca import prometheus|loki|jaeger|zipkin|tempo|ecs --url``: fetch a time range from a live server's query API.

One function per API. Each cuts the range into the requests the server will answer in full,
saves every answer under ``DIR/.pulled/<format>/`` (``pull_store``: atomic, named after the
request, reused by a rerun) and returns the saved files, which ``rca import`` then reads with
the format's own reader, exactly as it reads exports saved by hand:

- Prometheus ``/api/v1/query_range`` refuses a range of more than 11,000 steps per series: the
  range is cut into chunks of at most that many steps, on the grid ``start + k * step`` of the
  whole range, so the chunks' points are exactly the one query's, none twice. A chunk refused
  for loading too many samples (the server's ``--query.max-samples``: HTTP 422, errorType
  ``execution``) is halved on that grid, down to a single step, and each piece saved as a page;
- Loki ``/loki/api/v1/query_range`` answers at most ``limit`` lines: pages are read forward,
  each from the last timestamp of the one before, and the lines of that timestamp already
  read are dropped (several lines may share it, and the limit may have cut between them);
- Jaeger ``/api/traces`` answers at most ``limit`` traces and says nothing when it cut: a time
  chunk that comes back full is halved, down to ``min_chunk``, so no trace is silently left out;
- Tempo ``/api/search`` (TraceQL) finds at most ``limit`` trace ids, and only ids: a chunk whose
  search comes back full is halved as Jaeger's, then each trace found is fetched by id
  (``/api/traces/<id>``), and the chunk's traces are saved as one page;
- Zipkin ``/api/v2/traces`` answers at most ``limit`` whole traces, the newest first: a chunk that
  comes back full is halved, as Jaeger's. A trace is in the range where its root span began, so
  each trace belongs to one chunk;
- Elasticsearch / OpenSearch ``<index>/_search`` gives at most ``limit`` documents but counts them
  all (``track_total_hits``): a time chunk that holds more is halved, down to ``min_chunk``. The
  request body travels as the ``source`` parameter, which both servers take for a GET.

A Prometheus query may carry a name (``PromQuery.name``, a preset's entry): the series of its
answer, which ``rate()``, ``sum()`` and the like leave without ``__name__``, are saved under that
name, and the page's key holds the name beside the query text, so a renamed entry is fetched again.
A query that matches no series over the range is listed in ``PullResult.empty`` with what its
``PromQuery.if_empty`` adds (a preset's rate range too short for the scrape interval: the
``--rate-window`` to give).

What could not be had in full (``limit`` or more Loki lines in one nanosecond, a Jaeger, Zipkin,
Tempo or Elasticsearch chunk still full at the smallest size, a trace Tempo's search found but could not give by id) is
returned in ``PullResult.losses``; the command exits 3.
"""
from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from preprocess.formats.pull_http import PullClient, PullError, PullRefused, redacted
from preprocess.formats.pull_store import PageKey, PulledPages, meta_of
from rca.timeutil import as_utc, epoch_us, format_utc, from_epoch_us

log = logging.getLogger(__name__)

PROMETHEUS_QUERY_RANGE = "/api/v1/query_range"
LOKI_QUERY_RANGE = "/loki/api/v1/query_range"
JAEGER_SERVICES = "/api/services"
JAEGER_TRACES = "/api/traces"

PROMETHEUS_MAX_STEPS = 11_000  # Prometheus refuses (end - start) / step above this ("exceeded maximum resolution")
# Prometheus' refusal of a query over its --query.max-samples (promql.ErrTooManySamples, HTTP 422, errorType
# "execution"): "query processing would load too many samples into memory in query execution".
PROMETHEUS_TOO_MANY_SAMPLES = "query processing would load too many samples into memory"
LOKI_LIMIT = 5000  # Loki's default max_entries_limit_per_query: a larger limit is refused
# Loki's refusals of a query over too long or too large a range (HTTP 400; its limits max_query_length,
# default 30d1h, max_query_bytes_read, max_querier_bytes_read): the same query over a shorter range passes.
LOKI_RANGE_REFUSALS = ("the query time range exceeds the limit", "the query would read too many bytes",
                       "query too large to execute on a single querier")
LOKI_MIN_RANGE = timedelta(minutes=1)  # a range refused even this short is not the range's fault
JAEGER_LIMIT = 1000
JAEGER_CHUNK = timedelta(hours=1)
JAEGER_MIN_CHUNK = timedelta(seconds=1)
ZIPKIN_TRACES = "/api/v2/traces"
ZIPKIN_LIMIT = 1000
ZIPKIN_CHUNK = timedelta(hours=1)
ZIPKIN_MIN_CHUNK = timedelta(seconds=1)
TEMPO_SEARCH = "/api/search"
TEMPO_TRACE = "/api/traces/"  # + the trace id
TEMPO_QUERY = "{}"  # TraceQL: every trace
TRACE_ID = re.compile(r"[0-9a-fA-F]{1,32}")  # a search may give a 64-bit id, or drop leading zeros
TEMPO_LIMIT = 500
TEMPO_CHUNK = timedelta(hours=1)
TEMPO_MIN_CHUNK = timedelta(seconds=1)  # the search's range is in whole seconds
# A trace is looked up in the blocks of its chunk and this much around it (Tempo searches only the blocks
# of the range it is given, so a trace is fetched faster; one that lasts longer may come back in part).
TEMPO_TRACE_MARGIN = timedelta(minutes=15)
# Elasticsearch refuses from + size above index.max_result_window (10,000 by default).
ELASTIC_LIMIT = 5000
ELASTIC_CHUNK = timedelta(hours=1)
ELASTIC_MIN_CHUNK = timedelta(seconds=1)
ELASTIC_TIME_FIELD = "@timestamp"  # ECS's

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class PageDone:
    """One chunk or page of a pull, fetched or found on disk (what the progress line shows)."""

    fmt: str
    what: str  # "query 1/2 chunk 3/10", "query 1/1 page 4", "service frontend"
    start: datetime
    end: datetime
    items: int
    unit: str  # points, lines, traces
    reused: bool  # read from DIR/.pulled (a rerun) rather than fetched
    note: str = ""  # "split", "limit reached"

    def __str__(self) -> str:
        how = "on disk" if self.reused else "fetched"
        note = f", {self.note}" if self.note else ""
        return f"{self.fmt}: {self.what} {_shown(self.start)}..{_shown(self.end)}: {self.items} {self.unit} ({how}{note})"


class HalvedChunks:
    """The chunks ``[first, stop)`` of ``[start, end)``, ``step`` long (any integer time unit), in time order;
    a chunk the server answered only in part (``split``) is replaced by its two halves, read next, while it
    is at least twice ``smallest``. Jaeger's, Tempo's and Elasticsearch's pulls read their ranges so."""

    def __init__(self, *, start: int, end: int, step: int, smallest: int) -> None:
        self._pending = [(at, min(at + step, end)) for at in range(start, end, step)]
        self.smallest = smallest

    def __iter__(self) -> Iterator[tuple[int, int]]:
        while self._pending:
            yield self._pending.pop(0)

    def can_split(self, first: int, stop: int) -> bool:
        return stop - first >= 2 * self.smallest

    def split(self, first: int, stop: int) -> None:
        middle = first + (stop - first) // 2
        self._pending[:0] = [(first, middle), (middle, stop)]


def _shown(instant: datetime) -> str:
    """Whole seconds as ``...:SSZ``; a Loki page's cursor keeps its fraction (pages may start within a second)."""
    return format_utc(instant) if not instant.microsecond else as_utc(instant).isoformat(timespec="microseconds")


@dataclass
class PullResult:
    """The saved files to import, in time order per query, and what the pull could not get in full."""

    files: list[Path] = field(default_factory=list)
    fetched: int = 0
    reused: int = 0
    losses: list[str] = field(default_factory=list)
    # Queries that matched no series over the whole range (an exporter not scraped, a --match that
    # selects nothing): not a loss, but worth saying.
    empty: list[str] = field(default_factory=list)


OnPage = Callable[[PageDone], None]


def _now() -> datetime:
    return datetime.now(UTC)


def _ignore(_: PageDone) -> None:
    return None


def _done(result: PullResult, page: PageDone, on_page: OnPage) -> None:
    if page.reused:
        result.reused += 1
    else:
        result.fetched += 1
    log.info("%s", page)
    on_page(page)


def checked_answer(document: Any, *, client: PullClient, path: str, result_types: tuple[str, ...]) -> dict[str, Any]:
    """A Prometheus / Loki answer with ``status: success`` and ``data.result`` of an expected type."""
    where = f"GET {redacted(client.url(path))}"
    if not isinstance(document, dict) or document.get("status") != "success":
        status = document.get("status") if isinstance(document, dict) else type(document).__name__
        raise PullError(f"{where}: the answer's status is {status!r}, not 'success'")
    data = document.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise PullError(f"{where}: the answer has no data.result list")
    if data.get("resultType") not in result_types:
        raise PullError(f"{where}: resultType {data.get('resultType')!r}, expected {' or '.join(result_types)}"
                        + (" (a log query, not a metric query such as rate(), is what imports as logs)"
                           if "streams" in result_types else ""))
    for warning in document.get("warnings") or []:
        log.warning("%s: the server warns: %s", where, warning)
    return document


# --------------------------------------------------------------------------- Prometheus


def prometheus_chunks(*, start_ms: int, end_ms: int, step_ms: int,
                      max_steps: int = PROMETHEUS_MAX_STEPS) -> list[tuple[int, int]]:
    """``[(start, end)]`` in ms covering ``[start_ms, end_ms]``, each at most ``max_steps`` steps long.

    Every chunk starts on the whole range's grid (``start_ms + k * step_ms``) and the next one a
    step after the last point of the one before, so the points are those of one query, once each.
    """
    if step_ms <= 0:
        raise ValueError(f"step {step_ms} ms must be positive")
    if end_ms < start_ms:
        raise ValueError("the range ends before it starts")
    span = max_steps * step_ms
    chunks, at = [], start_ms
    while at <= end_ms:
        last = min(at + span, end_ms)
        chunks.append((at, last))
        at += span + step_ms
    return chunks


def prometheus_halves(*, start_ms: int, end_ms: int, step_ms: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """A chunk of at least two points cut in two on its grid (``start_ms + k * step_ms``).

    The first half takes the first ``ceil(points / 2)`` points, the second the rest, up to ``end_ms``
    as before (off the grid or not): together they hold the chunk's points, once each.
    """
    points = (end_ms - start_ms) // step_ms + 1
    if points < 2:
        raise ValueError(f"{start_ms}..{end_ms} ms at {step_ms} ms is a single step: it cannot be halved")
    first = (points + 1) // 2
    return (start_ms, start_ms + (first - 1) * step_ms), (start_ms + first * step_ms, end_ms)


def _seconds(ms: int) -> str:
    """Milliseconds as the decimal seconds Prometheus reads exactly (it keeps milliseconds)."""
    return f"{ms // 1000}.{ms % 1000:03d}"


@dataclass(frozen=True)
class PromQuery:
    """A PromQL expression to pull, and the metric name its series take (None: the answer's own ``__name__``)."""

    expr: str
    name: str | None = None
    # Said after the "no series" note when the query matches nothing (a preset's rate: why it may be empty and
    # what to do). Not part of the page's key: it changes nothing the server is asked.
    if_empty: str = field(default="", kw_only=True)


def named(document: dict[str, Any], name: str) -> dict[str, Any]:
    """A ``query_range`` answer whose every series is called ``name`` (a preset entry's canonical name).

    The entry's name wins over one the series may carry: it says what the series is, whatever the
    expression selected (``max by (instance) (node_memory_MemTotal_bytes)`` keeps no name anyway).
    """
    data = document["data"]
    series = [{**s, "metric": {**(s.get("metric") or {}), "__name__": name}} if isinstance(s, dict) else s
              for s in data["result"]]
    return {**document, "data": {**data, "result": series}}


def pull_prometheus(*, client: PullClient, pages: PulledPages, queries: Sequence[PromQuery], start: datetime,
                    end: datetime, step: timedelta, on_page: OnPage = _ignore, clock: Clock = _now) -> PullResult:
    """Every query's ``query_range`` over ``[start, end]`` at ``step``, in chunks Prometheus accepts."""
    step_ms = step // timedelta(milliseconds=1)
    if step_ms <= 0:
        raise PullError(f"--step {step}: must be at least a millisecond")
    start_ms, end_ms = epoch_us(start) // 1000, epoch_us(end) // 1000
    chunks = prometheus_chunks(start_ms=start_ms, end_ms=end_ms, step_ms=step_ms)
    result = PullResult()
    for qi, query in enumerate(queries, start=1):
        label = f"query {qi}/{len(queries)}" + (f" {query.name}" if query.name else "")
        series_seen = 0
        for ci, (first, last) in enumerate(chunks, start=1):
            series_seen += _pull_chunk(client=client, pages=pages, query=query, first_ms=first, last_ms=last,
                                       step_ms=step_ms, what=f"{label} chunk {ci}/{len(chunks)}", result=result,
                                       on_page=on_page, clock=clock)
        if not series_seen:
            # One line a query: the hint after '; ', which PromQL does not use outside its strings.
            shown = f"{label}: {_one_line(query.expr)}" + (f"; {query.if_empty}" if query.if_empty else "")
            log.warning("prometheus: no series over the range: %s", shown)
            result.empty.append(shown)
    return result


def _one_line(expr: str) -> str:
    return " ".join(expr.split())  # a preset's query spans lines


def _too_many_samples(exc: PullRefused) -> bool:
    """Prometheus' own refusal of a query over its ``--query.max-samples`` (and no other 4xx)."""
    return (exc.status == 422 and exc.error_type == "execution" and exc.error is not None
            and exc.error.startswith(PROMETHEUS_TOO_MANY_SAMPLES))


def _pull_chunk(*, client: PullClient, pages: PulledPages, query: PromQuery, first_ms: int, last_ms: int,
                step_ms: int, what: str, result: PullResult, on_page: OnPage, clock: Clock) -> int:
    """One chunk of ``query``, halved on its grid while Prometheus refuses it for too many samples.

    Every piece is saved as its own page and appended to ``result.files`` in time order. A refused
    range is saved too, as a marker (``split``, the server's error as the document), so a rerun
    goes straight to its halves. Returns the number of series the pieces held.
    """
    pending, pieces, series_seen = [(first_ms, last_ms)], 0, 0
    while pending:
        first, last = pending.pop(0)
        params = {"query": query.expr, "start": _seconds(first), "end": _seconds(last), "step": _seconds(step_ms)}
        identity = params if query.name is None else {**params, "name": query.name}
        key = PageKey.of(url=redacted(client.base_url), path=PROMETHEUS_QUERY_RANGE, params=identity,
                         start=from_epoch_us(first * 1000), end=from_epoch_us(last * 1000))
        document = pages.load(key)
        reused = document is not None
        split = document is not None and bool(meta_of(document).get("split"))
        if document is None:
            try:
                document = checked_answer(client.get_json(PROMETHEUS_QUERY_RANGE, params=params), client=client,
                                          path=PROMETHEUS_QUERY_RANGE, result_types=("matrix",))
            except PullRefused as exc:
                if not _too_many_samples(exc):
                    raise
                if last - first < step_ms:
                    raise PullError(
                        f"prometheus: {what}: the server refuses even a single step of the query, at "
                        f"{format_utc(key.start)} ({_seconds(first)}): {exc.error_type}: {exc.error}. Query: "
                        f"{_one_line(query.expr)}. Pull fewer series in one query (a narrower selector, or "
                        "--match with a preset), or have the server's --query.max-samples raised; a coarser "
                        "--step does not lighten a single instant") from None
                # Only the refusal is kept: the halves bring the points.
                document = {"status": "error", "errorType": exc.error_type, "error": exc.error}
                pages.save(key, document, fetched_at=clock(), split=True)
                split = True
            else:
                if query.name is not None:
                    document = named(document, query.name)
                pages.save(key, document, fetched_at=clock())
        if split:
            pending[:0] = prometheus_halves(start_ms=first, end_ms=last, step_ms=step_ms)
            _done(result, PageDone("prometheus", what, key.start, key.end, 0, "points", reused,
                                   "refused: too many samples, halved"), on_page)
            continue
        pieces += 1
        result.files.append(pages.path(key))
        series = document["data"]["result"]
        series_seen += len(series)
        points = sum(len(s.get("values") or []) for s in series if isinstance(s, dict))
        shown = what if (first, last) == (first_ms, last_ms) else f"{what} piece {pieces}"
        _done(result, PageDone("prometheus", shown, key.start, key.end, points, "points", reused), on_page)
    if pieces > 1:
        log.info("prometheus: %s: refused for too many samples (the server's --query.max-samples); pulled in %d "
                 "pieces", what, pieces)
    return series_seen


# --------------------------------------------------------------------------- Loki

LineKey = tuple[tuple[tuple[str, str], ...], int, str]  # (stream labels, nanoseconds, line)


def _nanos(instant: datetime) -> int:
    return epoch_us(instant) * 1000


def _lines(document: dict[str, Any]) -> list[tuple[LineKey, dict[str, Any], list[Any]]]:
    """Every entry of a streams answer: (identity, its stream, the entry as sent)."""
    out = []
    for stream in document["data"]["result"]:
        if not isinstance(stream, dict):
            continue
        labels = stream.get("stream")
        identity = tuple(sorted((str(k), str(v)) for k, v in labels.items())) if isinstance(labels, dict) else ()
        for entry in stream.get("values") or []:
            try:
                out.append(((identity, int(entry[0]), str(entry[1])), stream, entry))
            except (TypeError, ValueError, IndexError, KeyError):
                # Kept as sent: the reader names the malformed entry when the page is imported.
                out.append(((identity, -1, repr(entry)), stream, entry))
    return out


def _without(document: dict[str, Any], seen: set[LineKey]) -> dict[str, Any]:
    """The streams answer without the entries in ``seen`` (streams left empty dropped; stats dropped)."""
    streams: list[dict[str, Any]] = []
    by_stream: dict[int, dict[str, Any]] = {}
    for identity, stream, entry in _lines(document):
        if identity in seen:
            continue
        kept = by_stream.get(id(stream))
        if kept is None:
            kept = by_stream[id(stream)] = {"stream": stream.get("stream"), "values": []}
            streams.append(kept)
        kept["values"].append(entry)
    return {"status": "success", "data": {"resultType": "streams", "result": streams}}


def _range_refused(exc: PullRefused) -> bool:
    """Loki's refusal of a query for its range (too long, or reading too much), not for the query itself."""
    text = exc.error or str(exc)
    return exc.status == 400 and any(refusal in text for refusal in LOKI_RANGE_REFUSALS)


def pull_loki(*, client: PullClient, pages: PulledPages, queries: Sequence[str], start: datetime, end: datetime,
              limit: int = LOKI_LIMIT, on_page: OnPage = _ignore, clock: Clock = _now) -> PullResult:
    """Every log query's lines in ``[start, end)``, page after page of at most ``limit`` lines.

    A range Loki refuses as too long or too large (``LOKI_RANGE_REFUSALS``) is halved, down to
    ``LOKI_MIN_RANGE``, and its halves are read in order; the refusal is saved as a marker
    (``split``), so a rerun goes straight to the halves.
    """
    if limit < 1:
        raise PullError(f"--limit {limit}: must be at least 1")
    result = PullResult()
    for qi, query in enumerate(queries, start=1):
        # (from, to, the lines at `from` already read): a range halved mid-way keeps what its first
        # half's cursor had seen, so a line at the border is read once.
        ranges: list[tuple[int, int, set[LineKey]]] = [(_nanos(start), _nanos(end), set())]
        page_no = 0
        while ranges:
            cursor, stop, seen = ranges.pop(0)
            while cursor < stop:
                page_no += 1
                params = {"query": query, "start": str(cursor), "end": str(stop), "limit": str(limit),
                          "direction": "forward"}
                key = PageKey.of(url=redacted(client.base_url), path=LOKI_QUERY_RANGE, params=params,
                                 start=from_epoch_us(cursor // 1000), end=from_epoch_us(stop // 1000))
                what = f"query {qi}/{len(queries)} page {page_no}"
                document = pages.load(key)
                reused = document is not None
                if document is not None and meta_of(document).get("split"):
                    split = True
                elif document is not None:
                    split = False
                    meta = meta_of(document)
                    returned, last_ns = int(meta["returned"]), int(meta["last_ns"])
                else:
                    try:
                        raw = checked_answer(client.get_json(LOKI_QUERY_RANGE, params=params), client=client,
                                             path=LOKI_QUERY_RANGE, result_types=("streams",))
                    except PullRefused as exc:
                        if not _range_refused(exc):
                            raise
                        if stop - cursor <= LOKI_MIN_RANGE // timedelta(microseconds=1) * 1000:
                            raise PullError(f"loki: query {query!r}: the server refuses even "
                                            f"{format_utc(key.start)}..{format_utc(key.end)}: {exc}. Narrow the "
                                            "query's stream selector, or have the server's limits raised") from None
                        # Only the refusal is kept: the halves bring the lines.
                        document = {"status": "error", "error": exc.error or str(exc)}
                        pages.save(key, document, fetched_at=clock(), split=True)
                        split = True
                    else:
                        split = False
                        entries = _lines(raw)
                        # Never before the cursor (a malformed timestamp reads as -1): the cursor only moves forward.
                        returned, last_ns = len(entries), max([cursor, *(ns for (_, ns, _), _, _ in entries)])
                        # Saved without the lines already read, so the saved pages hold every line once.
                        document = _without(raw, seen)
                        pages.save(key, document, fetched_at=clock(), returned=returned, last_ns=last_ns)
                if split:
                    middle = cursor + (stop - cursor) // 2
                    ranges[:0] = [(cursor, middle, seen), (middle, stop, set())]
                    _done(result, PageDone("loki", what, key.start, key.end, 0, "lines", reused,
                                           "refused: range too long, halved"), on_page)
                    break
                kept = [identity for identity, _, _ in _lines(document)]
                result.files.append(pages.path(key))
                full = returned >= limit
                _done(result, PageDone("loki", what, key.start, key.end, len(kept), "lines", reused,
                                       "limit reached, next page" if full else ""), on_page)
                if not full:
                    break
                if last_ns == cursor:
                    # A full page of lines all at the nanosecond it started from: asking again from it would
                    # return the same ones. Step past it; lines of it beyond the first `limit` are not had.
                    result.losses.append(f"loki: query {query!r}: {limit} or more lines at "
                                         f"{from_epoch_us(cursor // 1000).isoformat()} ({cursor} ns): any beyond the "
                                         f"first {limit} are not imported; raise --limit (up to the server's "
                                         "max_entries_limit_per_query)")
                    cursor, seen = cursor + 1, set()
                    continue
                # Lines at the last timestamp may continue on the next page: ask again from it, and drop
                # there the ones this page gave (only this page can hold lines of that later instant).
                seen = {identity for identity in kept if identity[1] == last_ns}
                cursor = last_ns
    return result


# --------------------------------------------------------------------------- Jaeger


def jaeger_services(client: PullClient) -> list[str]:
    """Every service the Jaeger query service knows (``/api/services``), sorted."""
    document = client.get_json(JAEGER_SERVICES)
    names = document.get("data") if isinstance(document, dict) else None
    if not isinstance(names, list):
        raise PullError(f"GET {redacted(client.url(JAEGER_SERVICES))}: no 'data' list of services in the answer")
    return sorted({str(name) for name in names if name})


def pull_jaeger(*, client: PullClient, pages: PulledPages, services: Sequence[str], start: datetime,
                end: datetime, limit: int = JAEGER_LIMIT, chunk: timedelta = JAEGER_CHUNK,
                min_chunk: timedelta = JAEGER_MIN_CHUNK, on_page: OnPage = _ignore,
                clock: Clock = _now) -> PullResult:
    """The traces of every service that have spans in ``[start, end)``, in chunks that never come back full.

    A trace that touches several services, or crosses a chunk border, comes in more than once;
    the dataset writer keeps each span once (its key is trace and span id).
    """
    def params(first: int, stop: int, service: str | None) -> dict[str, str]:
        # Jaeger's range is closed (span start in [start, end]): end a µs early so chunks do not overlap.
        return {"service": str(service), "start": str(first), "end": str(stop - 1), "limit": str(limit)}

    return _pull_capped_traces(
        CappedTraceApi(fmt="jaeger", path=JAEGER_TRACES, field="data", unit=timedelta(microseconds=1),
                       params=params, traces=_jaeger_traces),
        client=client, pages=pages, services=services, start=start, end=end, limit=limit, chunk=chunk,
        min_chunk=min_chunk, on_page=on_page, clock=clock)


@dataclass(frozen=True)
class CappedTraceApi:
    """A trace API that answers at most ``limit`` whole traces of a range and says nothing when it cut
    (Jaeger's ``/api/traces``, Zipkin's ``/api/v2/traces``): how to ask it for a chunk, and read its answer."""

    fmt: str
    path: str
    field: str  # the saved page's key of the traces list: the answer's own ("data"), or the one wrapping it
    unit: timedelta  # of the range's numbers in the request
    params: Callable[[int, int, str | None], dict[str, str]]  # (first, stop, service) -> query parameters
    traces: Callable[..., list[Any]]  # (answer, client=) -> its traces; PullError for another document


def _pull_capped_traces(api: CappedTraceApi, *, client: PullClient, pages: PulledPages, services: Sequence[str],
                        start: datetime, end: datetime, limit: int, chunk: timedelta, min_chunk: timedelta,
                        on_page: OnPage, clock: Clock) -> PullResult:
    """Each of ``services`` (none: one pass, unfiltered) chunk by chunk; a chunk whose answer comes back with
    ``limit`` traces is halved, down to ``min_chunk``, and one still full there is a loss."""
    if limit < 1:
        raise PullError(f"--limit {limit}: must be at least 1")
    unit_us = api.unit // timedelta(microseconds=1)
    step, smallest = chunk // api.unit, max(1, min_chunk // api.unit)
    first_of, end_of = epoch_us(start) // unit_us, -(-epoch_us(end) // unit_us)
    result = PullResult()
    asked: list[str | None] = [*services] or [None]
    for service in asked:
        what = f"service {service}" if service is not None else "traces"
        chunks = HalvedChunks(start=first_of, end=end_of, step=step, smallest=smallest)
        for first, stop in chunks:
            params = api.params(first, stop, service)
            key = PageKey.of(url=redacted(client.base_url), path=api.path, params=params,
                             start=from_epoch_us(first * unit_us), end=from_epoch_us(stop * unit_us))
            document = pages.load(key)
            reused = document is not None
            if document is not None:
                meta = meta_of(document)
                split = bool(meta.get("split"))
                traces = int(meta.get("returned", 0)) if split else len(document.get(api.field) or [])
            else:
                fetched = api.traces(client.get_json(api.path, params=params), client=client)
                traces = len(fetched)
                split = traces >= limit and chunks.can_split(first, stop)
                if split:
                    # Only the fact is kept: the halves bring these traces again, and more.
                    pages.save(key, {api.field: []}, fetched_at=clock(), split=True, returned=traces)
                else:
                    pages.save(key, {api.field: fetched}, fetched_at=clock())
            at_limit = traces >= limit
            note = "split" if split else ("limit reached" if at_limit else "")
            _done(result, PageDone(api.fmt, what, key.start, key.end, traces, "traces", reused, note), on_page)
            if split:
                chunks.split(first, stop)
                continue
            result.files.append(pages.path(key))
            if at_limit:
                result.losses.append(f"{api.fmt}: {what}: {traces} traces (the limit) in {format_utc(key.start)}.."
                                     f"{format_utc(key.end)}, the smallest chunk: some may be missing; raise --limit")
    return result


def _jaeger_traces(document: Any, *, client: PullClient) -> list[Any]:
    """The traces of a ``/api/traces`` answer (its ``data``); errors it carries beside them are logged."""
    if not isinstance(document, dict) or not isinstance(document.get("data") or [], list):
        raise PullError(f"GET {redacted(client.url(JAEGER_TRACES))}: no 'data' list of traces in the answer")
    for error in document.get("errors") or []:
        log.warning("GET %s: the server reports: %s", redacted(client.url(JAEGER_TRACES)),
                    error.get("msg", error) if isinstance(error, dict) else error)
    return list(document.get("data") or [])


# --------------------------------------------------------------------------- Zipkin


def pull_zipkin(*, client: PullClient, pages: PulledPages, services: Sequence[str], start: datetime,
                end: datetime, limit: int = ZIPKIN_LIMIT, chunk: timedelta = ZIPKIN_CHUNK,
                min_chunk: timedelta = ZIPKIN_MIN_CHUNK, on_page: OnPage = _ignore,
                clock: Clock = _now) -> PullResult:
    """The whole traces whose root span began in ``[start, end)`` (of ``services``, each asked on its own;
    none: every trace), in chunks that never come back full.

    Zipkin's servers take a trace into a range by its root span's start (or its first span's, without a
    root: ``QueryRequest.test``), so a trace that crosses a chunk border comes once, whole, with the chunk
    it began in. A chunk's answer (a JSON list of traces) is saved as ``{"traces": [...]}``, which the
    zipkin reader reads. A trace of several asked services comes once per service; the dataset writer
    keeps each span once (its key is trace and span id).
    """
    def params(first: int, stop: int, service: str | None) -> dict[str, str]:
        # endTs and endTs - lookback are both inclusive, in ms: end a ms early so chunks do not overlap.
        return {"endTs": str(stop - 1), "lookback": str(stop - 1 - first), "limit": str(limit),
                **({"serviceName": service} if service is not None else {})}

    return _pull_capped_traces(
        CappedTraceApi(fmt="zipkin", path=ZIPKIN_TRACES, field="traces", unit=timedelta(milliseconds=1),
                       params=params, traces=_zipkin_traces),
        client=client, pages=pages, services=services, start=start, end=end, limit=limit, chunk=chunk,
        min_chunk=min_chunk, on_page=on_page, clock=clock)


def _zipkin_traces(document: Any, *, client: PullClient) -> list[list[Any]]:
    """A ``/api/v2/traces`` answer: a list of traces, each a list of spans."""
    where = f"GET {redacted(client.url(ZIPKIN_TRACES))}"
    if not isinstance(document, list):
        raise PullError(f"{where}: the answer is not a JSON list of traces")
    for number, trace in enumerate(document):
        if not isinstance(trace, list):
            raise PullError(f"{where}: [{number}] is not a trace (a list of spans)")
    return document


# --------------------------------------------------------------------------- Tempo


def pull_tempo(*, client: PullClient, pages: PulledPages, start: datetime, end: datetime, query: str = TEMPO_QUERY,
               limit: int = TEMPO_LIMIT, chunk: timedelta = TEMPO_CHUNK, min_chunk: timedelta = TEMPO_MIN_CHUNK,
               on_page: OnPage = _ignore, clock: Clock = _now) -> PullResult:
    """Every trace the TraceQL ``query`` finds in ``[start, end)``: searched chunk by chunk (a chunk whose search
    comes back with ``limit`` ids is halved, down to ``min_chunk``), then fetched by id, one request a trace.

    A chunk's traces are saved as one page, a ``batches`` document (Tempo's trace JSON) that the tempo reader
    reads. A trace found by two chunks (it crosses their border) is fetched once a pull.
    """
    if limit < 1:
        raise PullError(f"--limit {limit}: must be at least 1")
    step_s, min_s = max(1, int(chunk.total_seconds())), max(1, int(min_chunk.total_seconds()))
    start_s, end_s = epoch_us(start) // 1_000_000, -(-epoch_us(end) // 1_000_000)  # whole seconds around the range
    margin_s = int(TEMPO_TRACE_MARGIN.total_seconds())
    result = PullResult()
    fetched: set[str] = set()
    chunks = HalvedChunks(start=start_s, end=end_s, step=step_s, smallest=min_s)
    for first, stop in chunks:
        params = {"q": query, "start": str(first), "end": str(stop), "limit": str(limit), "spss": "1"}
        key = PageKey.of(url=redacted(client.base_url), path=TEMPO_SEARCH, params=params,
                         start=from_epoch_us(first * 1_000_000), end=from_epoch_us(stop * 1_000_000))
        document = pages.load(key)
        reused = document is not None
        if document is not None:
            meta = meta_of(document)
            found, split, missing = int(meta.get("found", 0)), bool(meta.get("split")), list(meta.get("missing") or [])
        else:
            ids = _tempo_trace_ids(client.get_json(TEMPO_SEARCH, params=params), client=client)
            found, missing = len(ids), []
            split = found >= limit and chunks.can_split(first, stop)
            if split:
                # Only the fact is kept: the halves find these traces again, and more.
                pages.save(key, {"batches": []}, fetched_at=clock(), split=True, found=found)
            else:
                batches: list[Any] = []
                for trace_id in ids:
                    if trace_id in fetched:
                        continue
                    try:
                        batches += _tempo_trace(client, trace_id, start_s=first - margin_s, end_s=stop + margin_s)
                    except PullRefused as exc:
                        if exc.status != 404:
                            raise
                        missing.append(trace_id)  # found by the search, gone by id (moved between blocks)
                        continue
                    fetched.add(trace_id)
                pages.save(key, {"batches": batches}, fetched_at=clock(), found=found, missing=missing)
        at_limit = found >= limit
        note = "split" if split else ("limit reached" if at_limit else "")
        _done(result, PageDone("tempo", "search", key.start, key.end, found, "traces", reused, note), on_page)
        if split:
            chunks.split(first, stop)
            continue
        result.files.append(pages.path(key))
        span = f"{format_utc(key.start)}..{format_utc(key.end)}"
        if missing:
            result.losses.append(f"tempo: {len(missing)} trace(s) the search found in {span} are not found by id "
                                 f"(HTTP 404): {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
        if at_limit:
            result.losses.append(f"tempo: {found} traces (the limit) in {span}, the smallest chunk: some may be "
                                 "missing; raise --limit")
    return result


def _tempo_trace_ids(document: Any, *, client: PullClient) -> list[str]:
    """The trace ids of a ``/api/search`` answer, in its order, each once."""
    where = f"GET {redacted(client.url(TEMPO_SEARCH))}"
    if not isinstance(document, dict) or not isinstance(document.get("traces") or [], list):
        raise PullError(f"{where}: no 'traces' list in the answer")
    ids: list[str] = []
    for number, trace in enumerate(document.get("traces") or []):
        trace_id = trace.get("traceID") if isinstance(trace, dict) else None
        if not isinstance(trace_id, str) or not TRACE_ID.fullmatch(trace_id):
            raise PullError(f"{where}: traces[{number}].traceID {trace_id!r} is not a hexadecimal trace id")
        ids.append(trace_id.lower())
    return list(dict.fromkeys(ids))


def _tempo_trace(client: PullClient, trace_id: str, *, start_s: int, end_s: int) -> list[Any]:
    """The resource spans of one trace (``/api/traces/<id>``: ``batches``, or a newer Tempo's ``resourceSpans``)."""
    from preprocess.formats.otlp import tempo_trace_as_request

    path = TEMPO_TRACE + trace_id
    document = client.get_json(path, params={"start": str(start_s), "end": str(end_s)})
    request = tempo_trace_as_request(document) if isinstance(document, dict) else None
    spans = request.get("resourceSpans") if request is not None else None
    if not isinstance(spans, list):
        raise PullError(f"GET {redacted(client.url(path))}: no 'batches' list of resource spans in the answer")
    return spans


# --------------------------------------------------------------------------- Elasticsearch / OpenSearch


def elastic_body(*, first_ms: int, stop_ms: int, limit: int, query: str | None) -> dict[str, Any]:
    """The ``_search`` body of one chunk: ``@timestamp`` in ``[first_ms, stop_ms)`` and, given, the Lucene
    ``query`` (``kubernetes.namespace:shop``); every hit counted, ``limit`` of them returned in index order."""
    window = {"range": {ELASTIC_TIME_FIELD: {"gte": first_ms, "lt": stop_ms, "format": "epoch_millis"}}}
    matches = [{"query_string": {"query": query}}] if query else []
    return {"size": limit, "track_total_hits": True, "sort": ["_doc"],
            "query": {"bool": {"filter": [window, *matches]}}}


def pull_elasticsearch(*, client: PullClient, pages: PulledPages, index: str, start: datetime, end: datetime,
                       query: str | None = None, limit: int = ELASTIC_LIMIT, chunk: timedelta = ELASTIC_CHUNK,
                       min_chunk: timedelta = ELASTIC_MIN_CHUNK, on_page: OnPage = _ignore,
                       clock: Clock = _now) -> PullResult:
    """The documents of ``index`` (a name, pattern or list: ``filebeat-*``) in ``[start, end)``, one time chunk a
    request; a chunk that holds more than ``limit`` documents is halved, down to ``min_chunk``."""
    if not 1 <= limit <= 10_000:
        raise PullError(f"--limit {limit}: must be 1 to 10000 (Elasticsearch's index.max_result_window)")
    if not index or index.startswith("_") or any(c in index for c in "/ ?#"):
        raise PullError(f"--index {index!r}: expected an index name or pattern, e.g. filebeat-* or logs-*")
    path = f"/{index}/_search"
    step_ms, min_ms = chunk // timedelta(milliseconds=1), max(1, min_chunk // timedelta(milliseconds=1))
    start_ms, end_ms = epoch_us(start) // 1000, -(-epoch_us(end) // 1000)
    result = PullResult()
    chunks = HalvedChunks(start=start_ms, end=end_ms, step=step_ms, smallest=min_ms)
    for first, stop in chunks:
        body = elastic_body(first_ms=first, stop_ms=stop, limit=limit, query=query)
        params = {"source": json.dumps(body, sort_keys=True, separators=(",", ":")),
                  "source_content_type": "application/json"}
        key = PageKey.of(url=redacted(client.base_url), path=path, params=params,
                         start=from_epoch_us(first * 1000), end=from_epoch_us(stop * 1000))
        document = pages.load(key)
        reused = document is not None
        if document is not None:
            meta = meta_of(document)
            split = bool(meta.get("split"))
            total, returned = int(meta.get("total", 0)), int(meta.get("returned", 0))
        else:
            answer = client.get_json(path, params=params)
            total, returned = _elastic_counts(answer, client=client, path=path)
            split = total > returned and chunks.can_split(first, stop)
            # Only the fact is kept for a split chunk: its halves bring its documents again.
            pages.save(key, {"hits": {"hits": []}} if split else answer, fetched_at=clock(), split=split,
                       total=total, returned=returned)
        note = "split" if split else ("more than the limit" if total > returned else "")
        _done(result, PageDone("elasticsearch", f"index {index}", key.start, key.end, total, "documents", reused,
                               note), on_page)
        if split:
            chunks.split(first, stop)
            continue
        result.files.append(pages.path(key))
        if total > returned:
            result.losses.append(f"elasticsearch: index {index!r}: {total} documents in "
                                 f"{format_utc(key.start)}..{format_utc(key.end)}, the smallest chunk, of which "
                                 f"{returned} were read; raise --limit")
    return result


def _elastic_counts(answer: Any, *, client: PullClient, path: str) -> tuple[int, int]:
    """(documents the chunk holds, documents returned) of a ``_search`` answer."""
    where = f"GET {redacted(client.url(path))}"
    hits = answer.get("hits") if isinstance(answer, dict) else None
    if not isinstance(hits, dict) or not isinstance(hits.get("hits"), list):
        raise PullError(f"{where}: no hits.hits list in the answer")
    total = hits.get("total")
    count = total.get("value") if isinstance(total, dict) else total  # Elasticsearch 7+ / 6
    if not isinstance(count, int) or isinstance(count, bool):
        raise PullError(f"{where}: no hits.total count in the answer")
    if isinstance(total, dict) and total.get("relation") not in (None, "eq"):
        raise PullError(f"{where}: hits.total is a lower bound ({total.get('relation')}): the server did not count "
                        "every document (track_total_hits)")
    shards = answer.get("_shards")
    if answer.get("timed_out") is True or (isinstance(shards, dict) and shards.get("failed")):
        raise PullError(f"{where}: the search timed out or a shard failed: the answer may be partial; pull again")
    return count, len(hits["hits"])
