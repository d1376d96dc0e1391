"""Command line of the judge server: ``rca judge serve | upgrade | contest ... | team ...`` and ``rca submit``.

Every command takes ``--db URL`` (default ``judge_server.db_url``: a SQLite file under ``data/``).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import typer

from rca.clisupport import build_settings, fail
from rca.errors import RcaError
from rca.settings import Settings

log = logging.getLogger(__name__)

_DB_HELP = "Database URL (default: judge_server.db_url, a SQLite file under data/)."

contest_app = typer.Typer(no_args_is_help=True, help="Contests: create, list, freeze, unfreeze, rescore.")
team_app = typer.Typer(no_args_is_help=True, help="Teams: add (prints the new ticket once), list.")


def _settings(ctx: typer.Context, db: str | None, **server: object) -> Settings:
    return build_settings(ctx, {"judge_server": {"db_url": db, **server}})


def _engine(settings: Settings):
    from judge.server.store import open_database

    try:
        return open_database(settings.judge_server.db_url)
    except RcaError as exc:
        fail(str(exc))


def serve(
    ctx: typer.Context,
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
    host: str | None = typer.Option(None, "--host", help="Address to listen on (default: judge_server.host)."),
    port: int | None = typer.Option(None, "--port", help="Port (default: judge_server.port)."),
) -> None:
    """Serve the submission protocol, the leaderboard and the JSON API; a worker thread scores submissions."""
    import uvicorn

    from judge.server.app import create_app
    from judge.server.quota import time_zone, utc_now
    from judge.server.worker import ScoringWorker

    settings = _settings(ctx, db, host=host, port=port)
    server = settings.judge_server
    try:
        time_zone(server.timezone)
    except RcaError as exc:
        fail(str(exc))
    engine = _engine(settings)

    def load_embedder():
        from knowledge.embedding import load_embedder as load

        return load(settings.embedding)

    worker = ScoringWorker(engine, server=server, judge=settings.judge, clock=utc_now, embedder_factory=load_embedder)
    app = create_app(engine, settings=server, worker=worker)
    log.info("judge server on http://%s:%d (database %s)", server.host, server.port,
             engine.url.render_as_string(hide_password=True))
    uvicorn.run(app, host=server.host, port=server.port, log_level="info")


def upgrade(ctx: typer.Context, db: str | None = typer.Option(None, "--db", help=_DB_HELP)) -> None:
    """Create or migrate the database schema (the server also does it at start)."""
    engine = _engine(_settings(ctx, db))
    log.info("database %s is at the newest schema", engine.url.render_as_string(hide_password=True))


def _qa_keywords(settings: Settings, gt: Path, cache_dir: Path | None) -> tuple[str, int, dict[str, list[str]], str]:
    from judge.qa import KeywordCache, evaluation_model_id, fill_keyword_cache, load_qa_file, uncached_references

    references = load_qa_file(gt)
    cache = KeywordCache((cache_dir or settings.paths.cache_dir / "judge") / "qa_keywords.json",
                         model_id=evaluation_model_id(settings.llm))
    if uncached_references(references, cache):
        # Keywords are extracted once, here; the server then scores without any LLM.
        from rca.llm.factory import open_backend

        with open_backend(settings) as llm:
            fill_keyword_cache(references, cache=cache, llm=llm)
    keywords = {r.answer: cache.get(r.answer) or [] for r in references}
    return gt.read_text(encoding="utf-8"), len(references), keywords, cache.model_id


@contest_app.command("create")
def contest_create(
    ctx: typer.Context,
    name: str = typer.Option(..., "--name", help="Contest name: what teams send in the `contest` header."),
    gt: Path = typer.Option(..., "--gt", help="Ground truth JSONL (groundtruth.jsonl; QA: ground_truth.jsonl)."),
    rules: str | None = typer.Option(None, "--rules", help="Rule version of the RCA kind: early | late (default: [challenge] rules)."),
    kind: str = typer.Option("rca", "--kind", help="rca (challenge scoring) | qa (keyword + similarity)."),
    cache_dir: Path | None = typer.Option(None, "--cache-dir", help="QA keyword cache directory (default: <paths.cache_dir>/judge)."),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
) -> None:
    """Create a contest holding its ground truth; the QA kind extracts reference keywords now (evaluation LLM)."""
    from judge.groundtruth import load_truth
    from judge.server.quota import utc_now
    from judge.server.scoring import KINDS
    from judge.server.store import create_contest
    from rca.challenge import RULES

    settings = _settings(ctx, db)
    rules = rules or settings.challenge.rules
    if kind not in KINDS:
        fail(f"--kind must be one of {list(KINDS)}, got {kind!r}")
    if kind == "rca" and rules not in RULES:
        fail(f"--rules must be one of {sorted(RULES)}, got {rules!r}")
    engine = _engine(settings)
    try:
        if kind == "qa":
            text, count, keywords, model = _qa_keywords(settings, gt, cache_dir)
            create_contest(engine, name=name, kind="qa", rules="qa", truth=text, case_count=count, now=utc_now(),
                           qa_keywords=keywords, qa_model=model)
        else:
            count = len(load_truth(gt))
            create_contest(engine, name=name, kind="rca", rules=rules, truth=gt.read_text(encoding="utf-8"),
                           case_count=count, now=utc_now())
    except RcaError as exc:
        fail(str(exc))
    typer.echo(json.dumps({"contest": name.strip(), "kind": kind, "rules": rules if kind == "rca" else "qa",
                           "cases": count}))


@contest_app.command("list")
def contest_list(ctx: typer.Context, db: str | None = typer.Option(None, "--db", help=_DB_HELP)) -> None:
    """One JSON line per contest."""
    from judge.server.store import iso_utc, list_contests

    for contest in list_contests(_engine(_settings(ctx, db))):
        typer.echo(json.dumps({"contest": contest.name, "kind": contest.kind, "rules": contest.rules,
                               "cases": contest.case_count, "frozen_at": iso_utc(contest.frozen_at)}))


def _freeze(ctx: typer.Context, name: str, db: str | None, *, frozen: bool) -> None:
    from judge.server.quota import utc_now
    from judge.server.store import set_frozen

    try:
        set_frozen(_engine(_settings(ctx, db)), contest=name, frozen=frozen, now=utc_now())
    except RcaError as exc:
        fail(str(exc))
    log.info("contest %s %s", name, "frozen" if frozen else "unfrozen")


@contest_app.command("freeze")
def contest_freeze(ctx: typer.Context, name: str = typer.Option(..., "--name"),
                   db: str | None = typer.Option(None, "--db", help=_DB_HELP)) -> None:
    """Freeze the public leaderboard: later submissions are still scored but not shown."""
    _freeze(ctx, name, db, frozen=True)


@contest_app.command("unfreeze")
def contest_unfreeze(ctx: typer.Context, name: str = typer.Option(..., "--name"),
                     db: str | None = typer.Option(None, "--db", help=_DB_HELP)) -> None:
    """Show every submission on the leaderboard again."""
    _freeze(ctx, name, db, frozen=False)


@contest_app.command("rescore")
def contest_rescore(ctx: typer.Context, name: str = typer.Option(..., "--name"),
                    db: str | None = typer.Option(None, "--db", help=_DB_HELP)) -> None:
    """Queue every judged submission of the contest again (after a change of the judge); the server rescores."""
    from judge.server.store import requeue_contest

    try:
        count = requeue_contest(_engine(_settings(ctx, db)), contest=name)
    except RcaError as exc:
        fail(str(exc))
    typer.echo(json.dumps({"contest": name, "requeued": count}))


@team_app.command("add")
def team_add(
    ctx: typer.Context,
    contest: str = typer.Option(..., "--contest", help="Contest name."),
    name: str = typer.Option(..., "--name", help="Team name (shown on the leaderboard)."),
    db: str | None = typer.Option(None, "--db", help=_DB_HELP),
) -> None:
    """Add a team and print its ticket: it is shown this once (the database keeps only its hash)."""
    from judge.server.quota import utc_now
    from judge.server.store import add_team

    try:
        ticket = add_team(_engine(_settings(ctx, db)), contest=contest, name=name, now=utc_now())
    except RcaError as exc:
        fail(str(exc))
    typer.echo(ticket)


@team_app.command("list")
def team_list(ctx: typer.Context, contest: str = typer.Option(..., "--contest"),
              db: str | None = typer.Option(None, "--db", help=_DB_HELP)) -> None:
    """One JSON line per team of a contest (names only; tickets are not stored)."""
    from judge.server.store import iso_utc, list_teams

    try:
        teams = list_teams(_engine(_settings(ctx, db)), contest=contest)
    except RcaError as exc:
        fail(str(exc))
    for team in teams:
        typer.echo(json.dumps({"team": team.name, "created_at": iso_utc(team.created_at)}))


def register(app: typer.Typer) -> None:
    """Add the server's commands to ``rca judge``."""
    app.command("serve")(serve)
    app.command("upgrade")(upgrade)
    app.add_typer(contest_app, name="contest")
    app.add_typer(team_app, name="team")


def submit_command(
    result: Path = typer.Argument(Path("result.jsonl"), help="Result JSONL to submit."),
    server: str = typer.Option(..., "--server", "-s", help="Judge server URL, e.g. http://127.0.0.1:8080"),
    contest: str = typer.Option(..., "--contest", "-c", help="Contest name."),
    ticket: str = typer.Option(..., "--ticket", "-k", help="Team ticket."),
    submission_id: str | None = typer.Option(None, "--submission-id", "-i", help="Only show this submission's status."),
    wait: bool = typer.Option(False, "--wait", help="Wait until the submission is scored."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds to wait with --wait."),
) -> None:
    """Submit a result file to a judge server (the official protocol) and print the reply as JSON."""
    from judge.server.client import Endpoint, read_answers, status, submit, wait_for_score

    endpoint = Endpoint(server=server, ticket=ticket, contest=contest)
    try:
        if submission_id:
            reply = status(submission_id, endpoint=endpoint)
        else:
            reply = submit(read_answers(result), endpoint=endpoint)
            log.info("submitted %s: id %s, %s attempt(s) left", result, reply.get("submission_id"),
                     reply.get("remaining_attempts"))
            if wait:
                reply = wait_for_score(str(reply["submission_id"]), endpoint=endpoint, poll_s=1.0, timeout_s=timeout)
    except RcaError as exc:
        fail(str(exc), code=1)
    typer.echo(json.dumps(reply))
