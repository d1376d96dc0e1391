"""``rca import <format> SRC... --out DIR`` for every reader of ``preprocess.formats``.

format reader -> canonical frames -> ``preprocess.dataset_writer.write_frames`` (merging into
``DIR``) -> the 2025 layout, so ``rca preprocess`` and ``diagnose`` read the import unchanged.
Exit status (docs/reliability.md): 0 everything read, 2 bad arguments or nothing readable,
3 finished with data loss (every skipped record is named on stderr, file:line and field).

``rca import prometheus|loki|ecs|jaeger|zipkin|tempo --url URL ...`` pulls the range from the server's query
API instead (``preprocess/formats/pull.py``), saves the answers under ``DIR/.pulled/<format>/``
and imports those files by the same path as exports given on the command line
(docs/formats/pull.md). ``rca import otlp --listen HOST:PORT`` receives OTLP/HTTP instead, as a Collector's
exporter sends it (``preprocess/formats/receive_otlp.py``, docs/formats/otlp.md).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from preprocess.formats import FORMATS, FormatResult, make_reader
from rca.clisupport import build_settings, fail
from rca.errors import RcaError
from rca.timeutil import format_utc, parse_duration, parse_utc

if TYPE_CHECKING:
    from preprocess.formats.pull import PageDone, PromQuery
    from preprocess.formats.pull_sources import PullRun, Source, SourceImport
    from preprocess.formats.receive_otlp import ReceiveLimits

log = logging.getLogger(__name__)

DATA_LOSS = 3
SHOWN_ISSUES = 20  # issues printed one by one; the rest are counted (all are in the debug log)


def expand(sources: list[Path]) -> list[Path]:
    """Files named, and every file under a directory named (sorted); a missing path is an error."""
    files: list[Path] = []
    for source in sources:
        if source.is_dir():
            files += sorted(p for p in source.rglob("*") if p.is_file() and not p.name.startswith("."))
        elif source.is_file():
            files.append(source)
        else:
            fail(f"{source}: no such file or directory")
    if not files:
        fail(f"no input files under {', '.join(map(str, sources))}")
    return files


def report(result: FormatResult, *, fmt: str, out: Path, written: int) -> None:
    """Counts, then every issue (lost ones first), on stderr."""
    for issue in sorted(result.issues, key=lambda i: not i.lost)[:SHOWN_ISSUES]:
        typer.secho(f"  {'LOST' if issue.lost else 'note'} {issue}", err=True, fg="yellow" if issue.lost else None)
    if len(result.issues) > SHOWN_ISSUES:
        typer.echo(f"  ... and {len(result.issues) - SHOWN_ISSUES} more issue(s)", err=True)
    counts = ", ".join(f"{frame.height} {name} rows" for name, frame in result.frames().items()) or "no rows"
    typer.echo(f"{fmt}: {len(result.files)} file(s) read: {counts}; {written} dataset file(s) written under {out}",
               err=True)
    if result.lost:
        typer.echo(f"finished with data loss: {len(result.lost)} record(s) or file(s) skipped", err=True)


def run_import(fmt: str, *, sources: list[Path], out: Path, at: datetime | None = None) -> None:
    # Imported here: the writer pulls pyarrow and polars, which `rca --help` does not need.
    from preprocess.dataset_writer import write_frames

    files = expand(sources)
    try:
        result = make_reader(fmt, at=at).read(files)
        written = write_frames(out, **result.frames())
    except RcaError as exc:
        fail(str(exc))
    report(result, fmt=fmt, out=out, written=len(written))
    if result.lost:
        raise typer.Exit(DATA_LOSS)


def _command(fmt: str) -> Callable[..., None]:
    def command(
        sources: list[Path] = typer.Argument(..., help="Export files, or directories of them (gzip read as is)."),
        out: Path = typer.Option(..., "--out", help="Dataset directory to write (merged into when it exists)."),
    ) -> None:
        run_import(fmt, sources=sources, out=out)

    command.__doc__ = make_reader(fmt).description
    return command


# --------------------------------------------------------------------------- pulling from a server (--url)

# Each of these is a command's option (typer reads a parameter's default as its declaration).
def _sources_argument(what: str) -> list[Path]:
    return typer.Argument(None, help=f"{what}, or directories of them (gzip read as is). Or give --url.",
                          metavar="SOURCES...", show_default=False)


def _out_option() -> Path:
    return typer.Option(..., "--out", help="Dataset directory to write (merged into when it exists).")


def _url_option(example: str) -> str | None:
    return typer.Option(None, "--url", help=f"Pull from this server's query API instead of files ({example}).",
                        show_default=False)


def _start_option() -> str | None:
    return typer.Option(None, "--start", help="With --url: UTC start of the range (ISO-8601, 2025-06-05T16:00:00Z).",
                        show_default=False)


def _end_option() -> str | None:
    return typer.Option(None, "--end", help="With --url: UTC end of the range (default with --since: now).",
                        show_default=False)


def _since_option() -> str | None:
    return typer.Option(None, "--since", help="With --url: the last DURATION (15m, 2h, 1d) before --end or now.",
                        show_default=False)


def _timeout_option() -> float:
    return typer.Option(30.0, "--timeout", min=0.001, help="With --url: seconds to wait to connect, and for data.")


def _header_option() -> list[str] | None:
    return typer.Option(None, "--header", help="With --url: 'Name: value' sent with every request (repeatable, "
                                               "e.g. authorisation; never logged).", show_default=False)


def _file_or_url(sources: list[Path] | None, url: str | None, *, pull_only: dict[str, object]) -> bool:
    """True to pull (``--url``), False to read files; both or neither is an error, as is a pull flag with files."""
    if sources and url:
        fail("give export files (SOURCES) or --url, not both")
    if not sources and not url:
        fail("give export files (SOURCES), or --url to pull from a server")
    if not url:
        given = [flag for flag, value in pull_only.items() if value not in (None, [], ())]
        if given:
            fail(f"{', '.join(given)} only apply with --url")
    return bool(url)


def _window(*, start: str | None, end: str | None, since: str | None,
            needed: str = "with --url, give the range") -> tuple[datetime, datetime]:
    """``--start/--end`` or ``--since [--end]`` as a UTC range; a bad or empty range is a usage error (no range
    at all: ``needed``, then the flags)."""
    def instant(flag: str, text: str) -> datetime:
        try:
            return parse_utc(text)
        except ValueError as exc:
            fail(f"{flag} {text!r}: {exc}")

    if since is not None and start is not None:
        fail("give --start and --end, or --since, not both")
    if since is not None:
        last = instant("--end", end) if end is not None else datetime.now(UTC).replace(microsecond=0)
        try:
            first = last - parse_duration(since)
        except ValueError as exc:
            fail(f"--since {exc}")
    elif start is not None:
        if end is None:
            fail("--start needs --end (or give --since DURATION)")
        first, last = instant("--start", start), instant("--end", end)
    else:
        fail(f"{needed}: --start and --end, or --since DURATION")
    if last <= first:
        fail(f"the range {format_utc(first)}..{format_utc(last)} is empty: --end must be after --start")
    return first, last


def _duration(flag: str, text: str) -> timedelta:
    """``--step``, ``--rate-window``: a duration (``60s``, ``1m``, ``1h30m``) or a number of seconds, as Prometheus
    takes it; anything else, or one not positive, is a usage error naming ``flag``."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            return parse_duration(text)
        except ValueError as exc:
            fail(f"{flag} {exc}")
    if not (seconds > 0 and math.isfinite(seconds)):
        fail(f"{flag} {text!r}: must be a positive number of seconds")
    return timedelta(seconds=seconds)


def header_options(lines: list[str] | None) -> dict[str, str]:
    """The `--header` lines as a header mapping; a malformed one exits 2 (`fail`), naming only its first word."""
    from preprocess.formats.pull_http import parse_header

    headers: dict[str, str] = {}
    for line in lines or []:
        try:
            name, value = parse_header(line)
        except ValueError as exc:
            fail(str(exc))
        headers[name] = value
    return headers


def pull_and_import(fmt: str, *, url: str, out: Path, window: tuple[datetime, datetime], timeout_s: float,
                    header_lines: list[str] | None, pull: PullRun) -> None:
    """Fetch (or find on disk) every chunk with ``pull``, then import the saved files like given ones."""
    from preprocess.formats.pull_sources import Source, import_pulled

    source = Source(fmt, url, pull, timeout_s=timeout_s, headers=header_options(header_lines))
    announce(source, window=window, out=out)
    try:
        imported = import_pulled(source, out=out, on_page=_show_page)
    except RcaError as exc:
        fail(str(exc))
    if show_import(imported, out=out):
        raise typer.Exit(DATA_LOSS)


def announce(source: Source, *, window: tuple[datetime, datetime], out: Path) -> None:
    """The lines before a pull: the source's notes, and the range in full (a --since pull is resumed by giving
    it as --start/--end)."""
    from preprocess.formats.pull_http import redacted
    from preprocess.formats.pull_store import PulledPages

    for note in source.notes:
        typer.echo(note, err=True)
    first, last = window
    typer.echo(f"{source.fmt}: pulling {format_utc(first)}..{format_utc(last)} from {redacted(source.url)} "
               f"(pages kept under {PulledPages(out, source.fmt).root}; rerun with --start {format_utc(first)} "
               f"--end {format_utc(last)} to resume)", err=True)


def _show_page(page: PageDone) -> None:
    typer.echo(f"  {page}", err=True)


def show_import(imported: SourceImport, *, out: Path) -> bool:
    """What a pull brought, on stderr, as `rca import --url` says it; True when some of it was lost."""
    pulled = imported.pulled
    typer.echo(f"{imported.fmt}: {pulled.fetched} page(s) fetched, {pulled.reused} already on disk, "
               f"{imported.requests} request(s)", err=True)
    for loss in pulled.losses:
        typer.secho(f"  LOST {loss}", err=True, fg="yellow")
    for query in pulled.empty:
        typer.echo(f"  note: no series: {query}", err=True)
    report(imported.read, fmt=imported.fmt, out=out, written=len(imported.written))
    if imported.read.lost:
        return True
    if pulled.losses:
        typer.echo(f"finished with data loss: {len(pulled.losses)} range(s) could not be pulled in full", err=True)
        return True
    return False


def _prometheus(
    sources: list[Path] = _sources_argument("query_range / query JSON, or text / OpenMetrics expositions"),
    out: Path = _out_option(),
    at: str = typer.Option(None, "--at", help="UTC time of exposition samples that carry no timestamp."),
    url: str | None = _url_option("http://prometheus:9090"),
    queries: list[str] | None = typer.Option(None, "--query", help="With --url: PromQL expression to pull "
                                                                   "(repeatable).", show_default=False),
    presets: list[str] | None = typer.Option(
        None, "--preset", help="With --url: a set of standard queries, named for the detectors: kubernetes, istio, "
                               "spanmetrics, or the path of your own TOML file (repeatable).", show_default=False),
    matchers: list[str] | None = typer.Option(
        None, "--match", help="With --preset: label matcher put into the presets' selectors, e.g. "
                              "'namespace=\"prod\"' (repeatable).", show_default=False),
    rate_window: str | None = typer.Option(
        None, "--rate-window", metavar="DURATION",
        help="With --preset: the range of the presets' rates, [<window>] in their queries (default 1m). It must hold "
             "two samples: give four scrape intervals, e.g. 4m where Prometheus scrapes every minute (its default).",
        show_default=False),
    start: str | None = _start_option(),
    end: str | None = _end_option(),
    since: str | None = _since_option(),
    step: str = typer.Option("60s", "--step", help="With --url: resolution of the pulled series."),
    timeout: float = _timeout_option(),
    header: list[str] | None = _header_option(),
) -> None:
    """Prometheus /api/v1/query_range JSON, or a text / OpenMetrics exposition; or pull with --url and --query / --preset."""
    if _file_or_url(sources, url, pull_only={"--query": queries, "--preset": presets, "--match": matchers,
                                             "--rate-window": rate_window, "--start": start, "--end": end,
                                             "--since": since, "--header": header}):
        from preprocess.formats.pull import PromQuery, pull_prometheus

        if at is not None:
            fail("--at is for exposition files; a pulled query_range carries its times")
        if not queries and not presets:
            fail("give at least one --query EXPR or --preset NAME to pull")
        if matchers and not presets:
            fail("--match scopes the queries of a --preset; write the matchers into your --query")
        if rate_window is not None and not presets:
            fail("--rate-window sets the range of a --preset's rates; write the range into your --query")
        window, resolution = _window(start=start, end=end, since=since), _duration("--step", step)
        rates = None if rate_window is None else _duration("--rate-window", rate_window)
        pulled = [PromQuery(expr) for expr in queries or []] + _preset_queries(presets or [], matchers or [],
                                                                               rate_window=rates)
        pull_and_import("prometheus", url=str(url), out=out, window=window, timeout_s=timeout, header_lines=header,
                        pull=lambda client, pages, on_page: pull_prometheus(
                            client=client, pages=pages, queries=pulled, start=window[0], end=window[1],
                            step=resolution, on_page=on_page))
        return
    when = None
    if at is not None:
        try:
            when = parse_utc(at)
        except ValueError as exc:
            fail(f"--at {at!r}: {exc}")
    run_import("prometheus", sources=sources, out=out, at=when)


def _preset_queries(presets: list[str], matchers: list[str], *, rate_window: timedelta | None) -> list[PromQuery]:
    """The queries of every ``--preset``, scoped by ``--match``, their rates over ``--rate-window`` (None: the
    default); what a matcher cannot scope, and a range written out that the window does not set, are said."""
    from preprocess.formats.pull_sources import prometheus_queries

    try:
        queries, notes = prometheus_queries(presets=presets, matchers=matchers, rate_window=rate_window, queries=[])
    except RcaError as exc:
        fail(str(exc))
    for note in notes:
        typer.echo(note, err=True)
    return queries


def _loki(
    sources: list[Path] = _sources_argument("query_range JSON (streams)"),
    out: Path = _out_option(),
    url: str | None = _url_option("http://loki:3100"),
    queries: list[str] | None = typer.Option(None, "--query", help="With --url: LogQL log query to pull "
                                                                   "(repeatable), e.g. '{namespace=\"prod\"}'.",
                                             show_default=False),
    start: str | None = _start_option(),
    end: str | None = _end_option(),
    since: str | None = _since_option(),
    limit: int = typer.Option(5000, "--limit", min=1, help="With --url: lines per request (at most the server's "
                                                           "max_entries_limit_per_query)."),
    timeout: float = _timeout_option(),
    header: list[str] | None = _header_option(),
) -> None:
    """Grafana Loki /loki/api/v1/query_range JSON (resultType streams); or pull with --url and --query."""
    if _file_or_url(sources, url, pull_only={"--query": queries, "--start": start, "--end": end, "--since": since,
                                             "--header": header}):
        from preprocess.formats.pull import pull_loki

        if not queries:
            fail("give at least one --query '{LABEL=\"VALUE\"}' to pull")
        window = _window(start=start, end=end, since=since)
        pull_and_import("loki", url=str(url), out=out, window=window, timeout_s=timeout, header_lines=header,
                        pull=lambda client, pages, on_page: pull_loki(
                            client=client, pages=pages, queries=queries, start=window[0], end=window[1],
                            limit=limit, on_page=on_page))
        return
    run_import("loki", sources=sources, out=out)


def _pulled_per_service(fmt: str, *, what: str, example: str, service_help: str, doc: str,
                        pull: Callable[..., PullRun]) -> Callable[..., None]:
    """``rca import jaeger|zipkin``: files, or a pull of a trace API that answers whole traces, per ``--service``
    or not (``pull(services=, start=, end=, limit=)``)."""
    def command(
        sources: list[Path] = _sources_argument(what),
        out: Path = _out_option(),
        url: str | None = _url_option(example),
        services: list[str] | None = typer.Option(None, "--service", help=service_help, show_default=False),
        start: str | None = _start_option(),
        end: str | None = _end_option(),
        since: str | None = _since_option(),
        limit: int = typer.Option(1000, "--limit", min=1, help="With --url: traces per request; a time chunk that "
                                                               "returns this many is split."),
        timeout: float = _timeout_option(),
        header: list[str] | None = _header_option(),
    ) -> None:
        if _file_or_url(sources, url, pull_only={"--service": services, "--start": start, "--end": end,
                                                 "--since": since, "--header": header}):
            window = _window(start=start, end=end, since=since)
            pull_and_import(fmt, url=str(url), out=out, window=window, timeout_s=timeout, header_lines=header,
                            pull=pull(services=list(services or []), start=window[0], end=window[1], limit=limit))
            return
        run_import(fmt, sources=sources, out=out)

    command.__doc__ = doc
    return command


def _jaeger_pull(**kwargs: Any) -> PullRun:
    from preprocess.formats.pull_sources import jaeger_pull

    return jaeger_pull(**kwargs)


def _zipkin_pull(**kwargs: Any) -> PullRun:
    from preprocess.formats.pull_sources import zipkin_pull

    return zipkin_pull(**kwargs)


_jaeger = _pulled_per_service(
    "jaeger", what="query-API JSON ({\"data\": [traces]})", example="http://jaeger-query:16686",
    service_help="With --url: service whose traces to pull (repeatable; default: every service).",
    doc="Jaeger query-API JSON (GET /api/traces); or pull with --url.", pull=_jaeger_pull)


def _otlp(
    sources: list[Path] = typer.Argument(None, help="OTLP/JSON (one request a line) or protobuf export files, or "
                                                    "directories of them (gzip read as is). Or give --listen.",
                                         metavar="SOURCES...", show_default=False),
    out: Path = _out_option(),
    listen: str | None = typer.Option(None, "--listen", help="Receive OTLP/HTTP instead of reading files, on "
                                                             "HOST:PORT (0.0.0.0:4318: a Collector's otlphttp "
                                                             "exporter's endpoint http://HOST:4318), until SIGINT "
                                                             "or SIGTERM.", show_default=False),
    listen_grpc: str | None = typer.Option(None, "--listen-grpc", help="Receive OTLP/gRPC on HOST:PORT "
                                                                       "(0.0.0.0:4317: a Collector's otlp "
                                                                       "exporter), with or without --listen.",
                                           show_default=False),
    import_every: float | None = typer.Option(None, "--import-every", min=1.0,
                                              help="Receiving: seconds between imports of what was received "
                                                   "[default: 60]", show_default=False),
    max_body_mb: float | None = typer.Option(None, "--max-body-mb", min=0.001,
                                             help="Receiving: the largest request taken, sent or unzipped, in "
                                                  "MiB [default: 32]", show_default=False),
    max_pending_mb: float | None = typer.Option(None, "--max-pending-mb", min=0.001,
                                                help="Receiving: requests received and not yet imported, at "
                                                     "most, in MiB; past it a sender is told to retry "
                                                     "(HTTP 503, gRPC UNAVAILABLE) [default: 1024]",
                                                show_default=False),
) -> None:
    """OpenTelemetry OTLP export requests (traces, metrics, logs; JSON or protobuf); or receive them with --listen
    (OTLP/HTTP) and --listen-grpc (OTLP/gRPC)."""
    receiving = listen is not None or listen_grpc is not None
    if sources and receiving:
        fail("give export files (SOURCES) or --listen / --listen-grpc, not both")
    if not sources and not receiving:
        fail("give export files (SOURCES), or --listen HOST:PORT (OTLP/HTTP) or --listen-grpc HOST:PORT to receive")
    if not receiving:
        given = [flag for flag, value in (("--import-every", import_every), ("--max-body-mb", max_body_mb),
                                          ("--max-pending-mb", max_pending_mb)) if value is not None]
        if given:
            fail(f"{', '.join(given)} only apply with --listen or --listen-grpc")
        run_import("otlp", sources=sources, out=out)
        return
    from preprocess.formats.receive_otlp import ReceiveLimits

    defaults = ReceiveLimits()
    limits = ReceiveLimits(
        max_body_bytes=int(max_body_mb * 2**20) if max_body_mb is not None else defaults.max_body_bytes,
        max_pending_bytes=int(max_pending_mb * 2**20) if max_pending_mb is not None else defaults.max_pending_bytes)
    _receive_otlp(http=listen, grpc_at=listen_grpc, out=out,
                  import_every_s=import_every if import_every is not None else IMPORT_EVERY_S, limits=limits)


IMPORT_EVERY_S = 60.0


def _receive_otlp(*, http: str | None, grpc_at: str | None, out: Path, import_every_s: float,
                  limits: ReceiveLimits) -> None:
    """The OTLP receivers (receive_otlp.py) until SIGINT or SIGTERM, the importer beside them; each import
    round said on stderr. Both addresses are bound before anything is received."""
    from contextlib import ExitStack

    from preprocess.formats.receive_otlp import Importer, ImportRound, OtlpInbox, create_app, start_grpc
    from rca.httpserve import listen_address, listening_socket, serve, wait_for_signal

    def address(flag: str, text: str, port: int) -> tuple[str, int]:
        try:
            return listen_address(text, example_port=port)
        except RcaError as exc:
            fail(str(exc).replace("--listen ", f"{flag} ", 1))

    http_at = address("--listen", http, 4318) if http is not None else None
    grpc_address = address("--listen-grpc", grpc_at, 4317) if grpc_at is not None else None

    def said(done: ImportRound) -> None:
        report(done.result, fmt=f"otlp: {done.requests} request(s) received", out=out, written=len(done.written))

    inbox = OtlpInbox(out, limits=limits)
    importer = Importer(inbox, every_s=import_every_s, on_round=said)
    with ExitStack() as stack:  # closed in reverse: the servers stop taking requests, then the last round
        sock = None
        if http_at is not None:
            try:
                sock = stack.enter_context(listening_socket(*http_at))
            except OSError as exc:
                fail(f"--listen {http}: cannot listen there: {exc.strerror or exc}")
        importer.start()
        stack.callback(importer.stop)
        if grpc_address is not None:
            try:
                grpc_server, _ = start_grpc(inbox, host=grpc_address[0], port=grpc_address[1])
            except OSError as exc:
                fail(f"--listen-grpc {grpc_at}: cannot listen there: {exc}")
            stack.callback(lambda: grpc_server.stop(grace=5).wait())  # requests in flight are saved first
        where = []
        if http is not None:
            where.append(f"http://{http.strip()} (OTLP/HTTP: POST /v1/traces, /v1/metrics, /v1/logs)")
        if grpc_at is not None:
            where.append(f"{grpc_at.strip()} (OTLP/gRPC)")
        waiting = len(inbox.pending())
        typer.echo(f"listening on {' and '.join(where)}; imported into {out} every {import_every_s:g} s and at the "
                   "stop" + (f"; {waiting} request(s) a stopped receiver left are imported first" if waiting else "")
                   + "; SIGINT or SIGTERM stops", err=True)
        stopped_by = serve(create_app(inbox), sock=sock) if sock is not None else wait_for_signal()
    counts = inbox.counts()
    typer.echo(f"stopped{f' ({stopped_by})' if stopped_by else ''}: {counts['received']} request(s) received, "
               f"{counts['imported']} imported into {out}"
               + (f", {counts['pending']} saved under {inbox.root} for the next start" if counts["pending"] else ""),
               err=True)
    if counts["pending"]:
        raise typer.Exit(DATA_LOSS)


_zipkin = _pulled_per_service(
    "zipkin", what="v2 JSON (a list of spans, or of traces)", example="http://zipkin:9411",
    service_help="With --url: only the traces through this service (repeatable; default: every trace).",
    doc="Zipkin v2 JSON (GET /api/v2/traces, /api/v2/trace/<id>); or pull with --url.", pull=_zipkin_pull)


def _ecs(
    sources: list[Path] = _sources_argument("NDJSON (Filebeat events, hits, or _search answers)"),
    out: Path = _out_option(),
    url: str | None = _url_option("http://elasticsearch:9200, or OpenSearch"),
    index: str | None = typer.Option(None, "--index", help="With --url: the index, pattern or list to search "
                                                           "(filebeat-*, logs-*).", show_default=False),
    query: str | None = typer.Option(None, "--query", help="With --url: Lucene query string the documents must "
                                                           "match, e.g. 'kubernetes.namespace:\"shop\"' (default: "
                                                           "every document).", show_default=False),
    start: str | None = _start_option(),
    end: str | None = _end_option(),
    since: str | None = _since_option(),
    limit: int = typer.Option(5000, "--limit", min=1, max=10_000,
                              help="With --url: documents per request (at most index.max_result_window, 10000); a "
                                   "time chunk that holds more is split."),
    timeout: float = _timeout_option(),
    header: list[str] | None = _header_option(),
) -> None:
    """Elasticsearch / Filebeat NDJSON with ECS fields (@timestamp, message, kubernetes.*); or pull with --url and --index."""
    if _file_or_url(sources, url, pull_only={"--index": index, "--query": query, "--start": start, "--end": end,
                                             "--since": since, "--header": header}):
        from preprocess.formats.pull_sources import elasticsearch_pull

        if not index:
            fail("give --index NAME (an index or pattern, e.g. filebeat-*) to pull")
        window = _window(start=start, end=end, since=since)
        pull_and_import("ecs", url=str(url), out=out, window=window, timeout_s=timeout, header_lines=header,
                        pull=elasticsearch_pull(index=index, start=window[0], end=window[1], query=query, limit=limit))
        return
    run_import("ecs", sources=sources, out=out)


def _tempo(
    sources: list[Path] = _sources_argument("trace JSON ({\"batches\": [...]}, GET /api/traces/<id>)"),
    out: Path = _out_option(),
    url: str | None = _url_option("http://tempo:3200"),
    query: str | None = typer.Option(None, "--query", help="With --url: the TraceQL search whose traces to pull "
                                                           "(default '{}': every trace), e.g. "
                                                           "'{ resource.k8s.namespace.name = \"shop\" }'.",
                                     show_default=False),
    start: str | None = _start_option(),
    end: str | None = _end_option(),
    since: str | None = _since_option(),
    limit: int = typer.Option(500, "--limit", min=1, help="With --url: trace ids per search; a time chunk that "
                                                          "finds this many is split."),
    timeout: float = _timeout_option(),
    header: list[str] | None = _header_option(),
) -> None:
    """Grafana Tempo trace JSON (GET /api/traces/<id>); or pull with --url (TraceQL search, then each trace)."""
    if _file_or_url(sources, url, pull_only={"--query": query, "--start": start, "--end": end, "--since": since,
                                             "--header": header}):
        from preprocess.formats.pull import TEMPO_QUERY
        from preprocess.formats.pull_sources import tempo_pull

        window = _window(start=start, end=end, since=since)
        pull_and_import("tempo", url=str(url), out=out, window=window, timeout_s=timeout, header_lines=header,
                        pull=tempo_pull(start=window[0], end=window[1], query=query or TEMPO_QUERY, limit=limit))
        return
    run_import("tempo", sources=sources, out=out)


def _sources(
    ctx: typer.Context,
    out: Path = _out_option(),
    start: str | None = typer.Option(None, "--start", help="UTC start of the range (ISO-8601, 2025-06-05T16:00:00Z).",
                                     show_default=False),
    end: str | None = typer.Option(None, "--end", help="UTC end of the range (default with --since: now).",
                                   show_default=False),
    since: str | None = typer.Option(None, "--since", help="The last DURATION (15m, 2h, 1d) before --end or now.",
                                     show_default=False),
) -> None:
    """Pull every server of the config's [sources] (Prometheus, Loki, Elasticsearch, Jaeger, Zipkin, Tempo) over the range into --out."""
    from preprocess.formats.pull_sources import configured_sources, pull_sources

    settings = build_settings(ctx)
    if not settings.sources.configured():
        fail("no source configured: give [sources.prometheus], [sources.loki], [sources.elasticsearch], "
             "[sources.jaeger], [sources.zipkin] or [sources.tempo] (each with its "
             "url) in the config file (--config, or config/config.toml), or RCA_SOURCES__<NAME>__URL and the "
             "rest in the environment: docs/formats/pull.md")
    window = _window(start=start, end=end, since=since, needed="give the range")
    try:
        sources = configured_sources(settings.sources, start=window[0], end=window[1])
    except RcaError as exc:
        fail(str(exc))
    lost: list[str] = []

    def started(source: Source) -> None:
        announce(source, window=window, out=out)

    def done(source: Source, outcome: SourceImport | str) -> None:
        if isinstance(outcome, str):
            typer.secho(f"error: {outcome}", err=True, fg="red")
        elif show_import(outcome, out=out):
            lost.append(source.fmt)

    pulled = pull_sources(sources, out=out, on_page=_show_page, on_start=started, on_done=done)
    typer.echo(f"sources: {len(pulled.imports)} of {len(sources)} pulled into {out} "
               f"({len(pulled.written)} dataset file(s) written)"
               + (f"; failed: {', '.join(pulled.failures)}" if pulled.failures else "")
               + (f"; data lost: {', '.join(lost)}" if lost else ""), err=True)
    if pulled.failures:
        raise typer.Exit(2)  # as a single pull that fails (docs/formats/pull.md): the others are in --out
    if lost:
        raise typer.Exit(DATA_LOSS)


_PULLING: dict[str, Callable[..., None]] = {"prometheus": _prometheus, "loki": _loki, "jaeger": _jaeger,
                                              "zipkin": _zipkin, "tempo": _tempo, "ecs": _ecs, "otlp": _otlp}


def register(app: typer.Typer) -> None:
    """Add one ``rca import <format>`` command per registered reader to ``app``, and ``rca import sources``."""
    for fmt in FORMATS:
        app.command(fmt)(_PULLING.get(fmt) or _command(fmt))
    app.command("sources")(_sources)
