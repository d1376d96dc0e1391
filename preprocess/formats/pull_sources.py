"""Pull a time range from telemetry servers into a dataset: one source (a server and how to ask it), or
every source of ``[sources]``.

One source is pulled as ``rca import prometheus|loki|ecs|jaeger|zipkin|tempo --url`` pulls it: its pages fetched (or found
under ``DIR/.pulled/<format>/``, ``pull_store``), then read by the format's own reader and merged into the
dataset (``dataset_writer.write_frames``). ``import_pulled`` does that for one source and returns what came
of it (``SourceImport``) instead of printing: the commands print it (``preprocess/formats/cli.py``), the
webhook receiver logs it (``diagnose/refresh.py``). (``sources.py`` beside it is another matter: how the
readers open files.)

``pull_sources`` does it for every configured source (``rca.settings.SourcesSettings``) over one range:
a source that fails is named in ``SourcesPull.failures`` and the others are still pulled, so one server
down does not keep the others' telemetry out of the dataset.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from preprocess.formats import FormatResult, make_reader
from preprocess.formats.pull import (
    ELASTIC_LIMIT,
    JAEGER_LIMIT,
    TEMPO_LIMIT,
    TEMPO_QUERY,
    ZIPKIN_LIMIT,
    OnPage,
    PageDone,
    PromQuery,
    PullResult,
    jaeger_services,
    pull_elasticsearch,
    pull_jaeger,
    pull_loki,
    pull_prometheus,
    pull_tempo,
    pull_zipkin,
)
from preprocess.formats.pull_http import PullClient, PullError, redacted
from preprocess.formats.pull_store import PulledPages
from rca.errors import InputError, RcaError
from rca.settings import (
    ElasticsearchSource,
    JaegerSource,
    LokiSource,
    PrometheusSource,
    SourcesSettings,
    TempoSource,
    ZipkinSource,
)

log = logging.getLogger(__name__)

# The resolution of a configured Prometheus source: the index's minute buckets (`--step`'s default too).
PROMETHEUS_STEP = timedelta(seconds=60)

# Fetch (or find on disk) every page of one source's range with the client and the saved pages given.
PullRun = Callable[[PullClient, PulledPages, OnPage], PullResult]


def _ignore(_: PageDone) -> None:
    return None


@dataclass(frozen=True)
class Source:
    """One server to pull from and how: the format, its URL (``option``: the flag or setting that gave it,
    named in an error), the request headers (secrets: only the client sees them), and the pull itself."""

    fmt: str
    url: str
    pull: PullRun
    timeout_s: float = 30.0
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    option: str = "--url"
    notes: tuple[str, ...] = ()  # said before the pull (a preset's query count, what a matcher cannot scope)


@dataclass
class SourceImport:
    """What one source's pull brought into the dataset."""

    fmt: str
    url: str  # password redacted
    pulled: PullResult  # the saved pages, fetched / reused counts, losses, queries that matched nothing
    requests: int  # HTTP attempts, retries included
    read: FormatResult  # the pages as the format's reader read them (rows, issues)
    written: list[Path] = field(default_factory=list)  # dataset files written

    @property
    def losses(self) -> list[str]:
        """What could not be had in full: ranges the pull could not get, records the reader skipped."""
        return [*self.pulled.losses, *(str(issue) for issue in self.read.lost)]

    @property
    def rows(self) -> dict[str, int]:
        return {name: frame.height for name, frame in self.read.frames().items()}


def import_pulled(source: Source, *, out: Path, on_page: OnPage = _ignore) -> SourceImport:
    """Pull ``source`` (pages saved under ``out/.pulled/<format>/``, reused by a rerun), then read the pages
    and merge their rows into the dataset ``out``.

    Raises ``PullError`` when the server cannot be asked or nothing was pulled, ``RcaError`` when the
    dataset cannot be written."""
    # Imported here: the writer pulls pyarrow and polars, which `rca --help` does not need.
    from preprocess.dataset_writer import write_frames

    pages = PulledPages(out, source.fmt)
    with PullClient(source.url, option=source.option, timeout_s=source.timeout_s,
                    headers=dict(source.headers)) as client:
        pulled = source.pull(client, pages, on_page)
    url = redacted(source.url)
    if not pulled.files:
        raise PullError(f"{source.fmt}: nothing was pulled from {url}")
    read = make_reader(source.fmt).read(pulled.files)
    written = write_frames(out, **read.frames())
    return SourceImport(fmt=source.fmt, url=url, pulled=pulled, requests=client.requests, read=read, written=written)


# --------------------------------------------------------------------------- the configured sources


def prometheus_queries(*, presets: list[str], matchers: list[str], rate_window: timedelta | None,
                       queries: list[str], match_option: str = "--match",
                       window_option: str = "--rate-window") -> tuple[list[PromQuery], list[str]]:
    """The PromQL to pull: ``queries`` as written, then every preset's, scoped by ``matchers``, their rates over
    ``rate_window`` (None: the presets' default); and a note per preset (its query count, what ``matchers``
    cannot scope, the ranges written out that the window does not set; the notes name the flag or setting
    that gave them). ``InputError`` for a bad preset or matcher."""
    from preprocess.formats.prom_presets import DEFAULT_RATE_WINDOW, preset_queries

    entries = preset_queries(presets, matchers=matchers, window=rate_window or DEFAULT_RATE_WINDOW)
    notes = []
    for preset in dict.fromkeys(entry.preset for entry in entries):
        mine = [entry for entry in entries if entry.preset == preset]
        unscoped = [entry.name for entry in mine if not entry.scoped]
        # A user's file may write its ranges out ([1m]): the window does not reach them, and a pull that
        # seemed to set them would still come back empty.
        fixed = [entry.name for entry in mine if entry.fixed_range is not None]
        notes.append(f"prometheus: preset {preset}: {len(mine)} queries"
                     + (f" (not scoped by {match_option}: {', '.join(unscoped)})" if matchers and unscoped else "")
                     + (f" (ranges written out, not set by {window_option}: {', '.join(fixed)})"
                        if rate_window is not None and fixed else ""))
    pulled = [PromQuery(expr) for expr in queries] + [PromQuery(entry.query, name=entry.name, if_empty=entry.if_empty)
                                                      for entry in entries]
    return pulled, notes


def _prometheus(config: PrometheusSource, *, start: datetime, end: datetime) -> Source:
    try:
        queries, notes = prometheus_queries(presets=config.presets, matchers=config.match,
                                            rate_window=config.rate_window, queries=config.queries,
                                            match_option="sources.prometheus.match",
                                            window_option="sources.prometheus.rate_window")
    except InputError as exc:  # a preset not found, a matcher that is none: said with the setting
        raise InputError(f"setting 'sources.prometheus' (presets, match, rate_window): {exc}") from exc
    def pull(client: PullClient, pages: PulledPages, on_page: OnPage) -> PullResult:
        return pull_prometheus(client=client, pages=pages, queries=queries, start=start, end=end,
                               step=PROMETHEUS_STEP, on_page=on_page)

    return Source("prometheus", config.url, pull, timeout_s=config.timeout_s, headers=config.header_values(),
                  option="sources.prometheus.url", notes=tuple(notes))


def _loki(config: LokiSource, *, start: datetime, end: datetime) -> Source:
    def pull(client: PullClient, pages: PulledPages, on_page: OnPage) -> PullResult:
        return pull_loki(client=client, pages=pages, queries=config.queries, start=start, end=end, on_page=on_page)

    return Source("loki", config.url, pull, timeout_s=config.timeout_s, headers=config.header_values(),
                  option="sources.loki.url")


def elasticsearch_pull(*, index: str, start: datetime, end: datetime, query: str | None = None,
                       limit: int = ELASTIC_LIMIT) -> PullRun:
    """Pull the ECS documents of ``index`` (matching the Lucene ``query``, when given) over the range."""
    def pull(client: PullClient, pages: PulledPages, on_page: OnPage) -> PullResult:
        return pull_elasticsearch(client=client, pages=pages, index=index, start=start, end=end, query=query,
                                  limit=limit, on_page=on_page)

    return pull


def _elasticsearch(config: ElasticsearchSource, *, start: datetime, end: datetime) -> Source:
    # The documents are read by the ECS reader: the format, and the folder of the saved pages, are "ecs".
    return Source("ecs", config.url, elasticsearch_pull(index=config.index, start=start, end=end, query=config.query,
                                                        limit=config.limit),
                  timeout_s=config.timeout_s, headers=config.header_values(), option="sources.elasticsearch.url")


def jaeger_pull(*, services: list[str], start: datetime, end: datetime, limit: int = JAEGER_LIMIT) -> PullRun:
    """Pull the traces of ``services`` (none: every service the server knows, asked each time) over the range."""
    def pull(client: PullClient, pages: PulledPages, on_page: OnPage) -> PullResult:
        names = list(services) or jaeger_services(client)
        if not names:
            raise PullError(f"{redacted(client.base_url)}: the Jaeger server knows no service (/api/services is "
                            "empty)")
        return pull_jaeger(client=client, pages=pages, services=names, start=start, end=end, limit=limit,
                           on_page=on_page)

    return pull


def _jaeger(config: JaegerSource, *, start: datetime, end: datetime) -> Source:
    return Source("jaeger", config.url, jaeger_pull(services=config.services, start=start, end=end),
                  timeout_s=config.timeout_s, headers=config.header_values(), option="sources.jaeger.url")


def zipkin_pull(*, services: list[str], start: datetime, end: datetime, limit: int = ZIPKIN_LIMIT) -> PullRun:
    """Pull the traces that began over the range (of ``services`` only, when given)."""
    def pull(client: PullClient, pages: PulledPages, on_page: OnPage) -> PullResult:
        return pull_zipkin(client=client, pages=pages, services=services, start=start, end=end, limit=limit,
                           on_page=on_page)

    return pull


def _zipkin(config: ZipkinSource, *, start: datetime, end: datetime) -> Source:
    return Source("zipkin", config.url, zipkin_pull(services=config.services, start=start, end=end,
                                                    limit=config.limit),
                  timeout_s=config.timeout_s, headers=config.header_values(), option="sources.zipkin.url")


def tempo_pull(*, start: datetime, end: datetime, query: str = TEMPO_QUERY, limit: int = TEMPO_LIMIT) -> PullRun:
    """Pull the traces the TraceQL ``query`` finds over the range."""
    def pull(client: PullClient, pages: PulledPages, on_page: OnPage) -> PullResult:
        return pull_tempo(client=client, pages=pages, start=start, end=end, query=query, limit=limit, on_page=on_page)

    return pull


def _tempo(config: TempoSource, *, start: datetime, end: datetime) -> Source:
    return Source("tempo", config.url, tempo_pull(start=start, end=end, query=config.query, limit=config.limit),
                  timeout_s=config.timeout_s, headers=config.header_values(), option="sources.tempo.url")


def configured_sources(sources: SourcesSettings, *, start: datetime, end: datetime,
                       metrics_start: datetime | None = None) -> list[Source]:
    """Every source ``[sources]`` gives, to pull over ``[start, end]``, the metrics' from ``metrics_start`` when
    given (the metric detector reads older minutes than the others); ``InputError`` for a bad preset or match."""
    made: list[Source] = []
    if sources.prometheus is not None:
        made.append(_prometheus(sources.prometheus, start=start if metrics_start is None else metrics_start, end=end))
    if sources.loki is not None:
        made.append(_loki(sources.loki, start=start, end=end))
    if sources.elasticsearch is not None:
        made.append(_elasticsearch(sources.elasticsearch, start=start, end=end))
    if sources.jaeger is not None:
        made.append(_jaeger(sources.jaeger, start=start, end=end))
    if sources.zipkin is not None:
        made.append(_zipkin(sources.zipkin, start=start, end=end))
    if sources.tempo is not None:
        made.append(_tempo(sources.tempo, start=start, end=end))
    return made


@dataclass
class SourcesPull:
    """What a pull of every configured source brought: one import per source that worked, and the reason of
    each that failed (by format)."""

    imports: list[SourceImport] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)

    @property
    def losses(self) -> list[str]:
        return [loss for imported in self.imports for loss in imported.losses]

    @property
    def written(self) -> list[Path]:
        return [path for imported in self.imports for path in imported.written]


def pull_sources(sources: list[Source], *, out: Path, on_page: OnPage = _ignore,
                 on_start: Callable[[Source], None] | None = None,
                 on_done: Callable[[Source, SourceImport | str], None] | None = None) -> SourcesPull:
    """Pull every source into the dataset ``out``, one after another; a source that fails is recorded and
    the next one pulled. ``on_start`` is called as each pull starts, ``on_done`` as it ends, with its import
    or the reason it failed (a command prints them as they come)."""
    result = SourcesPull()
    for source in sources:
        log.info("%s: pulling from %s", source.fmt, redacted(source.url))
        for note in source.notes:
            log.info("%s", note)
        if on_start is not None:
            on_start(source)
        outcome: SourceImport | str
        try:
            outcome = import_pulled(source, out=out, on_page=on_page)
        except RcaError as exc:  # the server down, refusing, or the dataset unwritable: the others still run
            outcome = result.failures[source.fmt] = str(exc)
        else:
            result.imports.append(outcome)
        if on_done is not None:
            on_done(source, outcome)
    return result
