"""``diagnose`` / ``rca diagnose``: answer cases with the LLM over indexed evidence.

    diagnose --uuid 345fbe93-80 [--input input.json] [--index-dir I] [--print-prompt] [--json]
    diagnose --window 2025-06-22T04:18Z/2025-06-22T04:21Z     # an incident window, no case file
    diagnose --since 15m                                       # the last 15 minutes of the newest telemetry
    rca diagnose --alerts alerts.json [--uuid ID]              # Alertmanager webhook payloads / API v2 alerts, or [{id, start, end, summary}]
    rca diagnose --alertmanager http://am:9093 [--alert-filter 'service="cart"'] [--header 'Name: value'] [--uuid ID]
                                                               # the alerts firing now (GET /api/v2/alerts); none: exit 0
    rca diagnose --listen 127.0.0.1:9095 [--out answers.jsonl] # Alertmanager's webhook receiver (POST /alerts), until
                                                               # SIGINT/SIGTERM (diagnose/receiver.py); with [sources],
                                                               # each case's telemetry pulled into --data-dir first
    diagnose --mode react|team --uuid X [--data-dir D]   # agent modes (docs/agentic.md)
    rca diagnose --all --out result.jsonl [--report-dir reports/]

Exit status: 0 every case answered; 1 some case failed (each is named once, keeps its run
record, and the others still ran); 2 bad arguments or unusable inputs (index, input file,
model backend). A backend failure stops a batch at once, keeping what was answered.
"""
from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from rca.challenge import RuleVersion, rule_version
from rca.clisupport import build_settings, fail, state
from rca.errors import InputError, RcaError
from rca.llm.base import LLMError
from rca.logsetup import configure_logging
from rca.settings import Settings

if TYPE_CHECKING:
    from diagnose.cases import CaseFile
    from diagnose.refresh import SourceRefresh
    from preprocess.formats.pull_sources import Source

log = logging.getLogger(__name__)


def rca_diagnose(
    ctx: typer.Context,
    uuid: list[str] | None = typer.Option(None, "--uuid", "-u", help="Case uuid (repeatable)."),
    all_cases: bool = typer.Option(False, "--all", help="Every case of the input file."),
    window: str | None = typer.Option(
        None, "--window", help="Diagnose this UTC window START/END (e.g. 2025-06-22T04:18Z/2025-06-22T04:21Z)."),
    since: str | None = typer.Option(
        None, "--since", help="Diagnose the last DURATION (15m, 1h30m) before the newest indexed telemetry (else now)."),
    alerts: Path | None = typer.Option(
        None, "--alerts", help="Alert file: Alertmanager (or Grafana) webhook payloads (one, or JSON lines), an Alertmanager "
        "API v2 alert list, or a JSON list of {id, start, end, summary}; every case, or those named by --uuid."),
    alertmanager: str | None = typer.Option(
        None, "--alertmanager", help="Diagnose the alerts firing now at this Alertmanager (http://am:9093): "
        "GET URL/api/v2/alerts, active and neither silenced nor inhibited; every alert, or those named by --uuid. "
        "None firing: says so, exit status 0."),
    listen: str | None = typer.Option(
        None, "--listen", help="Serve Alertmanager's (or Grafana's) webhook receiver on HOST:PORT (127.0.0.1:9095) "
        "until SIGINT/SIGTERM: POST /alerts diagnoses each firing group once, answers appended to --out "
        "(default <runs_dir>/webhook.jsonl); GET /healthz, GET /answers?limit=N."),
    alert_filters: list[str] | None = typer.Option(
        None, "--alert-filter", help="--alertmanager: only alerts matching this label matcher, Alertmanager's "
        "filter: 'service=\"cart\"', 'pod=~\"cart-.*\"' (=, !=, =~, !~; repeatable: all must match).",
        show_default=False),
    header: list[str] | None = typer.Option(
        None, "--header", help="--alertmanager: 'Name: value' sent with the request (repeatable, e.g. "
        "authorisation; never logged).", show_default=False),
    alert_lead: str | None = typer.Option(
        None, "--alert-lead", help="--alerts/--alertmanager/--listen: open each window this long before the alert fired (5m; "
        "its rule's for: and rate window; config diagnose.alert_lead)."),
    input_file: Path | None = typer.Option(None, "--input", "-i", help="input.json with the cases (config paths.input_file)."),
    index_dir: Path | None = typer.Option(None, "--index-dir", help="Evidence index (config paths.index_dir)."),
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="Raw telemetry the react/team tools read (config paths.data_dir); --listen with "
        "[sources]: where each case's pulled telemetry goes."),
    listen_index: bool | None = typer.Option(
        None, "--index-each-case", help="--listen: build the index of --data-dir for each case before diagnosing "
        "it, for telemetry pushed there (rca import otlp --listen) with no timer running rca preprocess; "
        "[sources] does it anyway (config diagnose.listen_index).", show_default=False),
    mode: str | None = typer.Option(
        None, "--mode", help="pipeline (one prepared call) | react (tool loop) | team (specialists + judge)."),
    max_steps: int | None = typer.Option(None, "--max-steps", min=1, help="react: tool calls before the answer."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Append answers to this JSONL file (resumable)."),
    runs_dir: Path | None = typer.Option(None, "--runs-dir", help="Run records directory (config paths.runs_dir)."),
    print_prompt: bool = typer.Option(False, "--print-prompt", help="Print the prompt of each case and stop (no LLM call)."),
    as_json: bool = typer.Option(False, "--json", help="Print answers as JSON lines."),
    detect: bool = typer.Option(False, "--detect", help="Only say whether each window holds a fault "
                                "(evidence vs the calibrated floor; the model judges near it)."),
    strict: bool | None = typer.Option(None, "--strict/--no-strict", help="Late challenge rules (four-field answers); same as [challenge] rules = \"late\"."),
    self_consistency: int | None = typer.Option(None, "--self-consistency", min=1, help="Samples for a majority vote (1 = off)."),
    confirm_fault_type: bool | None = typer.Option(
        None, "--confirm-fault-type/--one-turn", help="A second turn settles the chosen component's fault type."),
    backend: str | None = typer.Option(None, "--backend", help="embedded | openai."),
    model: str | None = typer.Option(None, "--model", help="Model: embedded name (qwen2.5-coder-1.5b/0.5b) or endpoint model."),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint (openai backend)."),
    concurrency: int | None = typer.Option(None, "--concurrency", min=1, help="Cases in the model at once (embedded: server slots; remote: requests)."),
    report: bool = typer.Option(False, "--report", help="Write an HTML case page per case (to --report-dir)."),
    report_dir: Path | None = typer.Option(None, "--report-dir", help="Case pages + index.html here (implies --report; default <runs_dir>/reports)."),
    config: Path | None = typer.Option(None, "--config", help="TOML config file."),
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, help="More log output."),
) -> None:
    """Diagnose cases: candidates from the evidence index, SOPs from the knowledge base, the LLM decides."""
    st = state(ctx)
    if config is not None:
        st.config_path = config
    if verbose:
        configure_logging(verbose)
    elif ctx.parent is None:
        configure_logging(st.verbosity)  # standalone `diagnose`: no root callback ran
    llm_overrides: dict[str, object] = {"backend": backend, "openai_api_base": base_url, "concurrency": concurrency}
    if model is not None:
        llm_overrides["embedded_model" if (backend or "") != "openai" and model.startswith("qwen2.5-coder") else "llm_model"] = model
    settings = build_settings(
        ctx,
        overrides={
            "paths": {"input_file": input_file, "index_dir": index_dir, "runs_dir": runs_dir, "data_dir": data_dir},
            "llm": llm_overrides,
            "challenge": {"rules": None if strict is None else ("late" if strict else "early")},
            "diagnose": {"self_consistency": self_consistency,
                         "confirm_fault_type": confirm_fault_type, "mode": mode, "react_max_steps": max_steps,
                         "alert_lead": alert_lead, "listen_index": listen_index},
        },
    )
    if listen is not None:
        given = [flag for flag, value in (
            ("--window", window), ("--since", since), ("--alerts", alerts), ("--alertmanager", alertmanager)) if value]
        if given:
            fail(f"give one of {', '.join(given)}, --listen")
        _listen(settings, listen, out=out, leave_out=[flag for flag, value in (
            ("--uuid", uuid), ("--all", all_cases), ("--alert-filter", alert_filters), ("--header", header),
            ("--print-prompt", print_prompt), ("--detect", detect), ("--json", as_json), ("--report", report),
            ("--report-dir", report_dir)) if value])
        return
    if listen_index is not None:
        fail("--index-each-case goes with --listen")
    cases, unusable, case_windows = _select_cases(settings, uuid or [], all_cases, window=window, since=since,
                                                  alerts=alerts, alertmanager=alertmanager,
                                                  alert_filters=alert_filters or [], header_lines=header or [])
    for name, problem in unusable.items():
        log.error("case %s cannot be diagnosed: %s", name, problem)
    if detect:
        try:
            _detect(settings, cases, as_json=as_json)
        except LLMError as exc:
            fail(f"LLM backend failed: {exc}")
        except (FileNotFoundError, RcaError) as exc:
            fail(str(exc))
        if unusable:
            raise typer.Exit(1)
        return
    try:
        _, failed = run(settings, cases, out=out, print_prompt=print_prompt, as_json=as_json, case_windows=case_windows)
    except LLMError as exc:
        fail(f"LLM backend failed: {exc}")
    except RcaError as exc:
        fail(str(exc))
    if (report or report_dir is not None) and not print_prompt:
        from diagnose.report.case import write_reports_for_cases

        batch = settings.paths.runs_dir / (out.stem if out is not None else "adhoc")
        index = write_reports_for_cases([c.uuid for c in cases], runs_dir=batch, settings=settings,
                                        out_dir=report_dir or settings.paths.runs_dir / "reports")
        typer.echo(f"case report(s): {index}", err=True)  # stderr: stdout carries the answers
    if failed or unusable:
        raise typer.Exit(1)


def _select_cases(settings: Settings, uuids: list[str], all_cases: bool, *, window: str | None = None,
                  since: str | None = None, alerts: Path | None = None, alertmanager: str | None = None,
                  alert_filters: list[str] | None = None, header_lines: list[str] | None = None):
    """The cases to run, by name the requested ones that are unusable (no window ...), and the
    incident windows to leave out of each other's baselines (None: the input file's).

    Cases come from one source: ``--window``, ``--since``, ``--alerts``, ``--alertmanager`` or the
    input file (``--uuid``/``--all``); the answers and run records have the same shape whichever it is.
    An alert file's windows are every alert's, not only the chosen ones' (as input.json's are), and
    so are the pulled alerts'. No alert firing at ``--alertmanager``: said, and exit status 0.
    """
    from diagnose.cases import CaseError, case_from_window, case_since, read_alerts, read_cases

    sources = [name for name, given in (("--window", window), ("--since", since), ("--alerts", alerts),
                                        ("--alertmanager", alertmanager)) if given]
    if len(sources) > 1:
        fail(f"give one of {', '.join(sources)}")
    if alertmanager is None:
        given = [flag for flag, value in (("--alert-filter", alert_filters), ("--header", header_lines)) if value]
        if given:
            fail(f"{', '.join(given)}: only with --alertmanager")
    alerted = alerts is not None or alertmanager is not None
    try:
        if window is not None or since is not None:
            if uuids or all_cases:
                fail(f"{sources[0]} names its own case; leave out --uuid/--all")
            if window is not None:
                return [case_from_window(window)], {}, None
            return [case_since(since or "", until=_newest_telemetry(settings.paths.index_dir))], {}, None
        if alerts is not None:
            case_file = read_alerts(alerts, lead=settings.diagnose.alert_lead, span=settings.diagnose.alert_span)
            all_cases = all_cases or not uuids  # an alert file alone means every alert
        elif alertmanager is not None:
            case_file = _firing_alerts(settings, alertmanager, alert_filters or [], header_lines or [])
            all_cases = all_cases or not uuids  # as an alert file: every alert firing
        else:
            if bool(uuids) == all_cases:
                fail("give --uuid X (repeatable) or --all, not both" if all_cases
                     else "give --uuid X (repeatable), --all, --window START/END, --since 15m, --alerts FILE "
                          "or --alertmanager URL")
            case_file = read_cases(settings.paths.input_file)
    except CaseError as exc:
        fail(str(exc))
    windows = [(c.start, c.end) for c in case_file.cases] if alerted else None
    if all_cases:
        return case_file.cases, case_file.bad, windows
    by_uuid = {c.uuid: c for c in case_file.cases}
    unknown = [u for u in uuids if u not in by_uuid and u not in case_file.bad]
    if unknown:
        fail(f"unknown uuid {', '.join(unknown)} in {case_file.path}")
    return ([by_uuid[u] for u in uuids if u in by_uuid], {u: case_file.bad[u] for u in uuids if u in case_file.bad},
            windows)


def _firing_alerts(settings: Settings, url: str, filters: list[str], header_lines: list[str]) -> CaseFile:
    """The cases of the alerts firing now at the Alertmanager ``url``; none firing ends the command (status 0)."""
    from diagnose.alertmanager import pull_alerts
    from preprocess.formats.cli import header_options  # `rca import --url`'s --header parser: one rule for both
    from preprocess.formats.pull_http import PullError

    try:
        case_file = pull_alerts(url, filters=filters, headers=header_options(header_lines),
                                lead=settings.diagnose.alert_lead, span=settings.diagnose.alert_span)
    except PullError as exc:  # names the flag, or the URL it asked
        fail(str(exc))
    if not case_file.cases and not case_file.bad:
        matching = f" matching {' and '.join(filters)}" if filters else ""
        typer.echo(f"no alert firing{matching} at {case_file.path} (active, neither silenced nor inhibited): "
                   "nothing to diagnose", err=True)
        raise typer.Exit(0)
    return case_file


def listen_address(text: str) -> tuple[str, int]:
    """``--listen``'s ``HOST:PORT`` as (host, port); ``typer.Exit`` (status 2) with the usage error otherwise."""
    from rca.httpserve import listen_address as parsed

    try:
        return parsed(text, example_port=9095)
    except InputError as exc:
        fail(str(exc))


def _listen(settings: Settings, text: str, *, out: Path | None, leave_out: list[str]) -> None:
    """``--listen HOST:PORT``: the webhook receiver (diagnose/receiver.py) until SIGINT or SIGTERM.

    The socket is bound before the model loads (a port in use fails at once, status 2), and the model
    is loaded before the first request is served (a backend that cannot start is said here, not per case).
    """
    if leave_out:
        fail(f"--listen serves until stopped, answers to --out: leave out {', '.join(leave_out)}")
    host, port = listen_address(text)
    from diagnose.receiver import CaseWorker, create_app
    from diagnose.service import Diagnoser
    from index.status import newest_telemetry
    from rca.httpserve import listening_socket, serve

    out = out if out is not None else settings.paths.runs_dir / "webhook.jsonl"
    try:
        sock = listening_socket(host, port)
    except OSError as exc:
        fail(f"--listen {text}: cannot listen there: {exc.strerror or exc}")
    with sock:
        try:
            # No other incident is known ahead: each window's baseline is its own history (case_windows=[]).
            with Diagnoser.from_settings(settings, case_windows=[]) as diagnoser:
                refresh = _source_refresh(settings)
                worker = CaseWorker(diagnoser, settings=settings, out=out,
                                    indexed_until=lambda: newest_telemetry(settings.paths.index_dir), refresh=refresh)
                _ = diagnoser.llm  # the model, loaded once, now
                typer.echo(f"listening on http://{text.strip()}/alerts (Alertmanager webhook_configs url); answers "
                           f"appended to {out}; SIGINT or SIGTERM stops", err=True)
                if refresh is not None and settings.sources.configured():
                    typer.echo(f"each case first pulls {', '.join(settings.sources.configured())} ([sources]) into "
                               f"{settings.paths.data_dir} and indexes it into {settings.paths.index_dir}", err=True)
                elif refresh is not None:
                    typer.echo(f"each case first indexes {settings.paths.data_dir} into {settings.paths.index_dir} "
                               "(diagnose.listen_index)", err=True)
                stopped_by = serve(create_app(worker, settings=settings), sock=sock)
        except LLMError as exc:
            fail(f"LLM backend failed: {exc}")
        except RcaError as exc:
            fail(str(exc))
    counts = worker.counts()
    typer.echo(f"stopped{f' ({stopped_by})' if stopped_by else ''}: {counts['answered']} answered, "
               f"{counts['failed']} failed, in {out}", err=True)


def _source_refresh(settings: Settings) -> SourceRefresh | None:
    """With ``[sources]``: what pulls each received case's telemetry into ``[paths] data_dir`` and indexes it
    (``diagnose/refresh.py``); without, with ``[diagnose] listen_index``: what indexes it, as it reached
    ``data_dir`` by itself (pushed); else None: the receiver reads the index as others keep it.

    The sources are made once here, over an empty range, so a preset that cannot be read is an error at
    the start (``RcaError``), not a warning in every case."""
    if not settings.sources.configured() and not settings.diagnose.listen_index:
        return None
    from diagnose.refresh import SourceRefresh
    from index.params import IndexParams
    from preprocess.formats.pull_sources import configured_sources
    from rca.system import system_from_settings

    params = IndexParams.from_settings(settings.index, system=system_from_settings(settings))
    now = datetime.now(UTC)
    configured_sources(settings.sources, start=now, end=now)

    def sources(*, start: datetime, end: datetime, metrics_start: datetime) -> list[Source]:
        return configured_sources(settings.sources, start=start, end=end, metrics_start=metrics_start)

    return SourceRefresh(sources=sources, data_dir=settings.paths.data_dir, index_dir=settings.paths.index_dir,
                         naming=params.system.trace,
                         # The baseline, what a window's scoring reads before it; and for the metrics the older
                         # history the metric detector checks that baseline against (a previous incident in it).
                         baseline=timedelta(minutes=params.baseline_minutes),
                         metric_history=timedelta(minutes=params.metric.history_minutes),
                         detector_params=params.detector_params(), workers=settings.preprocess.workers,
                         threads=settings.preprocess.threads)


def _newest_telemetry(index_dir: Path) -> datetime:
    """The newest instant the evidence index holds (``--since`` counts back from it), else now.

    Why not always now: an SRE replaying yesterday's data, or an index built nightly, would
    otherwise ask for minutes the index has not seen.
    """
    from index.status import newest_telemetry

    try:
        newest = newest_telemetry(index_dir)
    except RcaError as exc:
        log.warning("no index manifest to date --since from (%s); counting back from now", exc)
        newest = None
    if newest is not None:
        log.info("--since counts back from the newest indexed telemetry, %s", newest.isoformat())
        return newest
    log.info("--since counts back from now: the index at %s holds no telemetry", index_dir)
    return datetime.now(UTC)


def run(settings: Settings, cases, *, out: Path | None, print_prompt: bool, as_json: bool,
        case_windows: list[tuple[datetime, datetime]] | None = None) -> tuple[list, dict[str, str]]:
    """Diagnose ``cases``; returns the case records (none with ``print_prompt``) and failures by uuid.

    ``case_windows``: incident windows left out of each other's baselines (None: the input file's)."""
    from diagnose.service import Diagnoser

    with Diagnoser.from_settings(settings, case_windows=case_windows) as diagnoser:
        if print_prompt:
            for case in cases:
                _print_prompt(diagnoser.prepare(case), as_json=as_json)
            return [], {}
        if out is not None:
            summary = diagnoser.run(cases, out=out, show_progress=not as_json)
            records, failed = summary.records, summary.failed
        else:
            records, failed = diagnoser.run_adhoc(cases)
    _report(Console(), records, rules=rule_version(settings.challenge.rules), as_json=as_json)
    return records, failed


def _print_prompt(prepared, *, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps({
            "uuid": prepared.case.uuid,
            "messages": prepared.prompt.messages,
            "approx_tokens": prepared.prompt.approx_tokens,
            "candidates": [c.component for c in prepared.candidates],
            "data_status": [s.model_dump(mode="json") for s in prepared.data_status],
        }, ensure_ascii=False))
        return
    typer.echo(prepared.prompt.render())  # plain echo: no wrapping, copy-pasteable
    typer.echo(f"(~{prepared.prompt.approx_tokens} tokens)")


def _detect(settings: Settings, cases, *, as_json: bool) -> None:
    from diagnose.detect import detect_case
    from diagnose.service import Diagnoser

    with Diagnoser.from_settings(settings) as diagnoser:
        found = [detect_case(case, settings=settings, evidence=diagnoser.evidence, model=lambda: diagnoser.llm)
                 for case in cases]
    if as_json:
        for d in found:
            typer.echo(d.model_dump_json())
        return
    table = Table(title=f"detection (floor {settings.diagnose.detect_floor:g})")
    for column in ("uuid", "fault", "score", "decided by", "top", "reason"):
        table.add_column(column)
    for d in found:
        table.add_row(d.uuid, "yes" if d.fault else "no", f"{d.score:.2f}", d.decided_by, d.top or "-", d.reason[:60])
    Console().print(table)


def _report(console: Console, records, *, rules: RuleVersion, as_json: bool) -> None:
    if as_json:
        for record in records:
            typer.echo(json.dumps(record.final_answer().to_submission(rules=rules), ensure_ascii=False))
        return
    # Identifiers never shorten (a cut "checkoutservice-2" names another pod): the table holds only
    # short columns (about 75 characters with the longest names and a challenge uuid), each at the
    # width of its longest value; a longer uuid (`--window`'s names the window) folds onto a second
    # line instead. Each reason, whole, follows the table on a line of its own.
    # "trust": the answer's confidence (index.confidence); the model calls and tokens go with the reason.
    rows = []
    for r in records:
        top = r.candidates[0].component if r.candidates else "-"  # "-": nothing moved in the window
        agree = "-" if r.agreed_with_index is None else "yes" if r.agreed_with_index else "NO"
        rows.append((r.uuid, r.answer.component or "-", top, agree, r.confidence or "-",
                     f"{r.timings_s.get('total_s', 0):.1f}"))
    table = Table(title="diagnoses", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for position, column in enumerate(("uuid", "component", "index top", "agree", "trust", "s")):
        if position == 0:
            table.add_column(column, overflow="fold")
        else:
            table.add_column(column, no_wrap=True, min_width=max([len(column), *(len(row[position]) for row in rows)]))
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for r in records:
        usage = r.usage
        calls = f"{usage.calls} call{'s' if usage.calls != 1 else ''}"
        console.print(f"{r.uuid} ({calls}, {usage.prompt_tokens}/{usage.completion_tokens} tokens): {r.answer.reason}",
                      markup=False, highlight=False)


def main() -> None:
    """Console script ``diagnose``: the same command as ``rca diagnose``."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(rca_diagnose)  # a single command: typer runs it without a sub-command name
    app()


if __name__ == "__main__":
    main()
