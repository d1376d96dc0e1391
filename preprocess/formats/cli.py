"""``rca import <format> SRC... --out DIR`` for every reader of ``preprocess.formats``.

format reader -> canonical frames -> ``preprocess.dataset_writer.write_frames`` (merging into
``DIR``) -> the 2025 layout, so ``rca preprocess`` and ``diagnose`` read the import unchanged.
Exit status (docs/reliability.md): 0 everything read, 2 bad arguments or nothing readable,
3 finished with data loss (every skipped record is named on stderr, file:line and field).

``rca import prometheus|loki|jaeger --url URL ...`` pulls the range from the server's query
API instead (``preprocess/formats/pull.py``), saves the answers under ``DIR/.pulled/<format>/``
and imports those files by the same path as exports given on the command line
(docs/formats/pull.md).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from preprocess.formats import FORMATS, FormatResult, make_reader
from rca.clisupport import fail
from rca.errors import RcaError
from rca.timeutil import format_utc, parse_duration, parse_utc

if TYPE_CHECKING:
    from preprocess.formats.pull import PageDone, PromQuery, PullResult
    from preprocess.formats.pull_http import PullClient
    from preprocess.formats.pull_store import PulledPages

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


def _window(*, start: str | None, end: str | None, since: str | None) -> tuple[datetime, datetime]:
    """``--start/--end`` or ``--since [--end]`` as a UTC range; a bad or empty range is a usage error."""
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
        fail("with --url, give the range: --start and --end, or --since DURATION")
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


PullRun = Callable[["PullClient", "PulledPages", Callable[["PageDone"], None]], "PullResult"]


def pull_and_import(fmt: str, *, url: str, out: Path, window: tuple[datetime, datetime], timeout_s: float,
                    header_lines: list[str] | None, pull: PullRun) -> None:
    """Fetch (or find on disk) every chunk with ``pull``, then import the saved files like given ones."""
    from preprocess.formats.pull_http import PullClient, redacted
    from preprocess.formats.pull_store import PulledPages

    headers = header_options(header_lines)
    pages = PulledPages(out, fmt)
    first, last = window
    # The range in full: a --since pull is resumed by giving it again as --start/--end.
    typer.echo(f"{fmt}: pulling {format_utc(first)}..{format_utc(last)} from {redacted(url)} "
               f"(pages kept under {pages.root}; rerun with --start {format_utc(first)} --end {format_utc(last)} "
               "to resume)", err=True)

    def on_page(page: PageDone) -> None:
        typer.echo(f"  {page}", err=True)

    try:
        with PullClient(url, timeout_s=timeout_s, headers=headers) as client:
            result = pull(client, pages, on_page)
    except RcaError as exc:
        fail(str(exc))
    typer.echo(f"{fmt}: {result.fetched} page(s) fetched, {result.reused} already on disk, "
               f"{client.requests} request(s)", err=True)
    for loss in result.losses:
        typer.secho(f"  LOST {loss}", err=True, fg="yellow")
    for query in result.empty:
        typer.echo(f"  note: no series: {query}", err=True)
    if not result.files:
        fail(f"{fmt}: nothing was pulled from {redacted(url)}")
    run_import(fmt, sources=result.files, out=out)
    if result.losses:
        typer.echo(f"finished with data loss: {len(result.losses)} range(s) could not be pulled in full", err=True)
        raise typer.Exit(DATA_LOSS)


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
    from preprocess.formats.prom_presets import DEFAULT_RATE_WINDOW, preset_queries
    from preprocess.formats.pull import PromQuery

    try:
        entries = preset_queries(presets, matchers=matchers, window=rate_window or DEFAULT_RATE_WINDOW)
    except RcaError as exc:
        fail(str(exc))
    for preset in dict.fromkeys(entry.preset for entry in entries):
        mine = [entry for entry in entries if entry.preset == preset]
        unscoped = [entry.name for entry in mine if not entry.scoped]
        # A user's file may write its ranges out ([1m]): --rate-window does not reach them, and a pull that
        # seemed to set them would still come back empty.
        fixed = [entry.name for entry in mine if entry.fixed_range is not None]
        typer.echo(f"prometheus: preset {preset}: {len(mine)} queries"
                   + (f" (not scoped by --match: {', '.join(unscoped)})" if matchers and unscoped else "")
                   + (f" (ranges written out, not set by --rate-window: {', '.join(fixed)})"
                      if rate_window is not None and fixed else ""), err=True)
    return [PromQuery(entry.query, name=entry.name, if_empty=entry.if_empty) for entry in entries]


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


def _jaeger(
    sources: list[Path] = _sources_argument("query-API JSON ({\"data\": [traces]})"),
    out: Path = _out_option(),
    url: str | None = _url_option("http://jaeger-query:16686"),
    services: list[str] | None = typer.Option(None, "--service", help="With --url: service whose traces to pull "
                                                                      "(repeatable; default: every service).",
                                              show_default=False),
    start: str | None = _start_option(),
    end: str | None = _end_option(),
    since: str | None = _since_option(),
    limit: int = typer.Option(1000, "--limit", min=1, help="With --url: traces per request; a time chunk that "
                                                           "returns this many is split."),
    timeout: float = _timeout_option(),
    header: list[str] | None = _header_option(),
) -> None:
    """Jaeger query-API JSON (GET /api/traces); or pull with --url."""
    if _file_or_url(sources, url, pull_only={"--service": services, "--start": start, "--end": end,
                                             "--since": since, "--header": header}):
        from preprocess.formats.pull import jaeger_services, pull_jaeger
        from preprocess.formats.pull_http import PullError, redacted

        window = _window(start=start, end=end, since=since)

        def pull(client: PullClient, pages: PulledPages, on_page: Callable[[PageDone], None]) -> PullResult:
            names = list(services or []) or jaeger_services(client)
            if not names:
                raise PullError(f"{redacted(str(url))}: the Jaeger server knows no service (/api/services is empty)")
            return pull_jaeger(client=client, pages=pages, services=names, start=window[0], end=window[1],
                               limit=limit, on_page=on_page)

        pull_and_import("jaeger", url=str(url), out=out, window=window, timeout_s=timeout, header_lines=header,
                        pull=pull)
        return
    run_import("jaeger", sources=sources, out=out)


_PULLING: dict[str, Callable[..., None]] = {"prometheus": _prometheus, "loki": _loki, "jaeger": _jaeger}


def register(app: typer.Typer) -> None:
    """Add one ``rca import <format>`` command per registered reader to ``app``."""
    for fmt in FORMATS:
        app.command(fmt)(_PULLING.get(fmt) or _command(fmt))
