"""The judge server against a real uvicorn server on loopback (SQLite): protocol bytes, every error,
quotas, rate limit, concurrent load with library-equal scores, team isolation, freeze, rescore, CLI."""
from __future__ import annotations

import json
import sqlite3
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from urllib import error

import httpx
import pytest
from typer.testing import CliRunner

from judge.groundtruth import load_truth
from judge.server.store import requeue_contest, set_frozen
from tests.judge_server_support import (
    HTTP,
    ManualClock,
    judge_server,
    library_score,
    make_answers,
    raw_http,
    server_settings,
    setup_contest,
    truth_subset,
    wait_until_scored,
    write_jsonl,
)

START = datetime(2025, 6, 1, 15, 30, tzinfo=UTC)  # 23:30 in Asia/Shanghai


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One server (late rules contest of 10 cases, 20 teams; early rules contest of 6 cases)."""
    root = tmp_path_factory.mktemp("judge_server")
    gt = truth_subset(root / "gt.jsonl", 10)
    gt_early = truth_subset(root / "gt_early.jsonl", 6, start=20)
    clock = ManualClock(START)
    settings = server_settings(max_body_bytes=64 * 1024, max_field_chars=2000, max_trace_steps=30)
    with judge_server(f"sqlite:///{root / 'judge.sqlite'}", settings=settings, clock=clock) as (url, engine):
        tickets = setup_contest(engine, name="c-late", gt=gt, rules="late", teams=[*(f"team{i:02d}" for i in range(20)), "official", "raw", "errors", "page"])
        early_tickets = setup_contest(engine, name="c-early", gt=gt_early, rules="early", teams=["solo"])
        yield {"url": url, "engine": engine, "gt": gt, "gt_early": gt_early, "tickets": tickets,
               "early_tickets": early_tickets, "root": root, "truth": load_truth(gt), "clock": clock,
               "db": root / "judge.sqlite"}


def _post(url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return HTTP.post(url + "/", content=body, headers=headers, timeout=30)


def _body(answers) -> bytes:
    return json.dumps({"data": answers}).encode("utf-8")


def _headers(ticket: str, contest: str = "c-late") -> dict[str, str]:
    return {"ticket": ticket, "contest": contest, "Content-Type": "application/json"}


def _status(url: str, ticket: str, submission_id: str, contest: str = "c-late") -> httpx.Response:
    return HTTP.get(url + "/status", headers={"ticket": ticket, "contest": contest, "submission": submission_id})


# ---- the official client, byte for byte ---------------------------------------------------------


def test_official_client_submit_and_status(world) -> None:
    """The challenge's submit.py code path: urllib, json.dumps({"data": data}), headers ticket/contest."""
    url, ticket = world["url"], world["tickets"]["official"]
    answers = make_answers(world["truth"], variant=1)
    path = write_jsonl(world["root"] / "official.jsonl", answers)
    data = [json.loads(line.strip()) for line in path.open(encoding="utf-8") if line.strip()]
    request = urllib.request.Request(url, data=json.dumps({"data": data}).encode("utf-8"),
                                     headers={"ticket": ticket, "contest": "c-late", "Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        reply = json.loads(response.read().decode("utf-8"))
    assert set(reply) >= {"submission_id", "remaining_attempts"}
    assert reply["remaining_attempts"] == 9
    wait_until_scored(url)
    status_request = urllib.request.Request(url + "/status", headers={
        "ticket": ticket, "contest": "c-late", "submission": reply["submission_id"], "Content-Type": "application/json"})
    with urllib.request.urlopen(status_request) as response:
        status = json.loads(response.read().decode("utf-8"))
    assert set(status) >= {"submission_id", "score", "create_time", "judge_time"}
    assert status["submission_id"] == reply["submission_id"] and status["judge_time"]
    assert status["score"] == library_score(world["gt"], path, rules="late")
    # An error comes back as the client expects it: HTTPError whose body has "detail".
    bad = urllib.request.Request(url, data=b'{"data": []}', headers={"contest": "c-late", "Content-Type": "application/json"})
    with pytest.raises(error.HTTPError) as caught:
        urllib.request.urlopen(bad)
    assert caught.value.code == 401
    assert json.loads(caught.value.read().decode("utf-8"))["detail"] == "Ticket not provided"


def test_raw_bytes_requests_style_and_prototype_status(world) -> None:
    """Exact bytes of `requests.post(url, json={"data": ...}, headers=...)` and the prototype's GET /status/."""
    url, ticket = world["url"], world["tickets"]["raw"]
    answers = make_answers(world["truth"], variant=2)
    body = json.dumps({"data": answers}).encode("utf-8")  # what requests sends for json=
    host = url.removeprefix("http://")
    request = (f"POST / HTTP/1.1\r\nHost: {host}\r\nUser-Agent: python-requests/2.32.3\r\n"
               f"Accept-Encoding: gzip, deflate\r\nAccept: */*\r\nConnection: close\r\nticket: {ticket}\r\n"
               f"contest: c-late\r\nContent-Length: {len(body)}\r\nContent-Type: application/json\r\n\r\n").encode() + body
    status, reply = raw_http(url, request)
    assert status == 200 and isinstance(reply, dict)
    assert reply["remaining_attempts"] == 9
    wait_until_scored(url)
    status_request = (f"GET /status/ HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nticket: {ticket}\r\n"
                      f"contest: c-late\r\nsubmission_id: {reply['submission_id']}\r\n\r\n").encode()
    code, status_reply = raw_http(url, status_request)
    assert code == 200 and isinstance(status_reply, dict)
    path = write_jsonl(world["root"] / "requests_style.jsonl", answers)
    assert status_reply["score"] == library_score(world["gt"], path, rules="late")


# ---- every error code ------------------------------------------------------------------------------


def _count_rows(db: Path, team_ticket_free_name: str) -> int:
    with sqlite3.connect(db) as con:
        return con.execute("select count(*) from submissions s join teams t on t.id = s.team_id where t.name = ?",
                           (team_ticket_free_name,)).fetchone()[0]


def test_every_error_code(world) -> None:
    url, tickets, truth = world["url"], world["tickets"], world["truth"]
    ticket = tickets["errors"]
    good = make_answers(truth, variant=0)
    deep: object = "x"
    for _ in range(60):
        deep = [deep]
    extra = [dict(a, time="2025-06-05 16:10:02") for a in good]
    wrong_type = [dict(a, component=["a", "b"]) for a in good]
    bad_steps = [dict(a, reasoning_trace=[{"step": 2, "action": "a", "observation": "o"}]) for a in good]
    too_long = [dict(a, reason="x" * 2001) for a in good]
    duplicate = [*good[:-1], good[0]]
    unknown = [*good[:-1], dict(good[-1], uuid="not-a-case")]
    cases = [
        (b"this is not json", 400, "Invalid submission format"),
        ("{\"data\": []}".encode("utf-16"), 400, "Invalid submission format"),
        (json.dumps({"data": deep}).encode(), 400, "Invalid submission format"),
        (b"[" * 50_000, 400, "Invalid submission format"),
        (json.dumps(good).encode(), 400, "Invalid submission format"),
        (_body(extra), 400, "Invalid submission format"),
        (_body(good[:-1] + [{k: v for k, v in good[-1].items() if k != "reason"}]), 400, "Invalid submission format"),
        (_body(wrong_type), 400, "Invalid submission format"),
        (_body(bad_steps), 400, "Invalid submission format"),
        (_body(too_long), 400, "Invalid submission format"),
        (_body(good[:-1]), 400, "Submission length mismatch"),
        (_body(good + good[:1]), 400, "Submission length mismatch"),
        (_body(duplicate), 400, "Submission UUID invalid"),
        (_body(unknown), 400, "Submission UUID invalid"),
        (b'{"data": ["' + b"x" * 70_000 + b'"]}', 413, "Request body too large"),
    ]
    for body, code, detail in cases:
        response = _post(url, body, _headers(ticket))
        assert (response.status_code, response.json()["detail"]) == (code, detail), body[:80]
    # A body bigger than the limit without a Content-Length (chunked) is cut off too.
    response = HTTP.post(url + "/", content=iter([b'{"data": ["', b"y" * 70_000, b'"]}']), headers=_headers(ticket))
    assert (response.status_code, response.json()["detail"]) == (413, "Request body too large")

    auth_cases = [
        ({"contest": "c-late"}, "Ticket not provided"),
        ({"ticket": ticket}, "Contest not provided"),
        ({"ticket": ticket, "contest": "nope"}, "Invalid contest"),
        ({"ticket": "wrong-ticket", "contest": "c-late"}, "Invalid ticket"),
        # A real ticket, but of another contest's team.
        ({"ticket": world["early_tickets"]["solo"], "contest": "c-late"}, "Invalid ticket"),
    ]
    for headers, detail in auth_cases:
        response = _post(url, _body(good), headers)
        assert (response.status_code, response.json()) == (401, {"detail": detail})
        response = HTTP.get(url + "/status", headers={**headers, "submission": str(uuid.uuid4())})
        assert (response.status_code, response.json()) == (401, {"detail": detail})
    response = HTTP.get(url + "/status", headers={"ticket": ticket, "contest": "c-late"})
    assert (response.status_code, response.json()) == (401, {"detail": "Submission ID not provided"})
    for missing in (str(uuid.uuid4()), "garbage", "x" * 500):
        response = _status(url, ticket, missing)
        assert (response.status_code, response.json()) == (404, {"detail": "Submission not found"})
    # Nothing was stored: the next valid submission still has the whole quota.
    assert _count_rows(world["db"], "errors") == 0
    response = _post(url, _body(good), _headers(ticket))
    assert response.status_code == 200 and response.json()["remaining_attempts"] == 9
    # The 400 tells people what is wrong, beside the exact detail.
    response = _post(url, _body(extra), _headers(ticket))
    assert "time" in " ".join(response.json()["errors"])


def test_early_rules_contest_field_set(world) -> None:
    url, ticket, truth = world["url"], world["early_tickets"]["solo"], load_truth(world["gt_early"])
    answers = make_answers(truth, variant=3, rules="early")
    late_shaped = make_answers(truth, variant=3, rules="late")
    response = _post(url, _body(late_shaped), _headers(ticket, "c-early"))
    assert (response.status_code, response.json()["detail"]) == (400, "Invalid submission format")
    response = _post(url, _body(answers), _headers(ticket, "c-early"))
    assert response.status_code == 200
    wait_until_scored(url)
    score = _status(url, ticket, response.json()["submission_id"], "c-early").json()["score"]
    path = write_jsonl(world["root"] / "early.jsonl", answers)
    assert score == library_score(world["gt_early"], path, rules="early")


# ---- load, isolation, pages ------------------------------------------------------------------------


def test_concurrent_load_scores_and_isolation(world) -> None:
    """20 teams x 10 submissions in parallel: all accepted, all scored as the library scores them."""
    url, tickets, truth = world["url"], world["tickets"], world["truth"]
    teams = [f"team{i:02d}" for i in range(20)]
    variants = list(range(10))
    files = {v: write_jsonl(world["root"] / f"load_{v}.jsonl", make_answers(truth, variant=v)) for v in variants}
    expected = {v: library_score(world["gt"], files[v], rules="late") for v in variants}
    assert len(set(expected.values())) >= 4  # the variants really differ

    def one(job: tuple[str, int]) -> tuple[str, int, httpx.Response]:
        team, variant = job
        body = _body(make_answers(truth, variant=variant))
        return team, variant, _post(url, body, _headers(tickets[team]))

    jobs = [(team, v) for v in variants for team in teams]
    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(one, jobs))
    assert all(r.status_code == 200 for _, _, r in results), [r.text for _, _, r in results if r.status_code != 200][:3]
    ids = {r.json()["submission_id"]: (team, v) for team, v, r in results}
    assert len(ids) == len(jobs)
    # Each team got remaining 9..0 exactly once: the quota count never raced.
    for team in teams:
        remaining = sorted(r.json()["remaining_attempts"] for t, _, r in results if t == team)
        assert remaining == list(range(10))
    # The 11th of the day is refused.
    extra = _post(url, _body(make_answers(truth, variant=0)), _headers(tickets["team00"]))
    assert (extra.status_code, extra.json()) == (403, {"detail": "Quota exceeded"})
    wait_until_scored(url, timeout=120)
    for team in teams:
        listed = HTTP.get(url + "/api/submissions", headers=_headers(tickets[team])).json()["submissions"]
        own = {sid for sid, (t, _) in ids.items() if t == team}
        assert {s["submission_id"] for s in listed} == own
        for row in listed:
            assert row["status"] == "done"
            assert row["score"] == expected[ids[row["submission_id"]][1]]
            assert "cases" not in row["summary"]  # aggregates only, never per-case truth
    # No team reads another's submission.
    foreign = next(sid for sid, (t, _) in ids.items() if t == "team01")
    response = _status(url, tickets["team02"], foreign)
    assert (response.status_code, response.json()) == (404, {"detail": "Submission not found"})
    assert _status(url, tickets["team01"], foreign).status_code == 200
    # The leaderboard ranks by each team's last submission; best is beside it.
    board = HTTP.get(url + "/api/contests/c-late/leaderboard").json()["ranking"]
    rows = {r["team"]: r for r in board}
    for team in teams:
        assert rows[team]["submissions"] == 10 and rows[team]["last_score"] in expected.values()
        assert rows[team]["best_score"] == max(expected.values())
    scores = [r["last_score"] for r in board if r["rank"] is not None]
    assert scores == sorted(scores, reverse=True)


def test_team_page_shows_only_own_history(world) -> None:
    url, tickets = world["url"], world["tickets"]
    response = _post(url, _body(make_answers(world["truth"], variant=4)), _headers(tickets["page"]))
    own_id = response.json()["submission_id"]
    wait_until_scored(url)
    page = HTTP.post(url + "/team", data={"contest": "c-late", "ticket": tickets["page"]})
    assert page.status_code == 200 and own_id in page.text and "Team page in" in page.text
    assert 'id="breakdown"' in page.text
    other = HTTP.post(url + "/team", data={"contest": "c-late", "ticket": tickets["team15"]})
    assert own_id not in other.text
    refused = HTTP.post(url + "/team", data={"contest": "c-late", "ticket": "nope"})
    assert refused.status_code == 401 and "Invalid ticket" in refused.text
    leaderboard = HTTP.get(url + "/leaderboard/c-late")
    assert leaderboard.status_code == 200 and "<td>page</td>" in leaderboard.text
    assert HTTP.get(url + "/leaderboard/none").status_code == 404


def test_freeze_and_rescore(world) -> None:
    url, engine, ticket = world["url"], world["engine"], world["early_tickets"]["solo"]
    truth = load_truth(world["gt_early"])
    headers = _headers(ticket, "c-early")
    assert _post(url, _body(make_answers(truth, variant=1, rules="early")), headers).status_code == 200
    wait_until_scored(url)
    world["clock"].advance(seconds=5)
    set_frozen(engine, contest="c-early", frozen=True, now=world["clock"]())
    frozen_board = HTTP.get(url + "/api/contests/c-early/leaderboard").json()
    assert frozen_board["frozen_at"]
    world["clock"].advance(seconds=5)
    response = _post(url, _body(make_answers(truth, variant=2, rules="early")), headers)
    assert response.status_code == 200
    wait_until_scored(url)
    after = HTTP.get(url + "/api/contests/c-early/leaderboard").json()
    assert after["ranking"] == frozen_board["ranking"]  # the later submission is not shown
    assert _status(url, ticket, response.json()["submission_id"], "c-early").json()["judge_time"]  # but scored
    assert "Frozen at" in HTTP.get(url + "/leaderboard/c-early").text
    set_frozen(engine, contest="c-early", frozen=False, now=world["clock"]())
    (unfrozen,) = HTTP.get(url + "/api/contests/c-early/leaderboard").json()["ranking"]
    assert unfrozen["submissions"] == frozen_board["ranking"][0]["submissions"] + 1
    before = HTTP.get(url + "/api/submissions", headers=headers).json()["submissions"]
    world["clock"].advance(seconds=5)
    assert requeue_contest(engine, contest="c-early") == len(before)
    wait_until_scored(url)
    rescored = HTTP.get(url + "/api/submissions", headers=headers).json()["submissions"]
    assert [r["score"] for r in rescored] == [r["score"] for r in before]
    assert all(r["judge_time"] != b["judge_time"] for r, b in zip(rescored, before))


# ---- quotas and rate on their own server -----------------------------------------------------------


def test_quota_day_reset_and_total(tmp_path) -> None:
    gt = truth_subset(tmp_path / "gt.jsonl", 4)
    clock = ManualClock(START)
    settings = server_settings(daily_quota=3, total_quota=5, timezone="Asia/Shanghai")
    with judge_server(f"sqlite:///{tmp_path / 'q.sqlite'}", settings=settings, clock=clock, worker=False) as (url, engine):
        ticket = setup_contest(engine, name="q", gt=gt, rules="late", teams=["t"])["t"]
        good = _body(make_answers(load_truth(gt), variant=0))
        headers = _headers(ticket, "q")
        assert [_post(url, good, headers).json()["remaining_attempts"] for _ in range(2)] == [2, 1]
        assert _post(url, b"garbage", headers).status_code == 400  # rejected: does not count
        assert _post(url, good, headers).json()["remaining_attempts"] == 0
        assert _post(url, good, headers).json() == {"detail": "Quota exceeded"}
        clock.advance(minutes=31)  # 00:01 next day in Shanghai, still 2025-06-01 in UTC
        reply = _post(url, good, headers).json()
        assert reply["remaining_attempts"] == 1 and reply["remaining_attempts_today"] == 2
        assert _post(url, good, headers).status_code == 200
        response = _post(url, good, headers)  # 5 in total: the total quota is used up
        assert (response.status_code, response.json()) == (403, {"detail": "Quota exceeded"})
        clock.advance(days=1)
        assert _post(url, good, headers).status_code == 403


def test_rate_limit(tmp_path) -> None:
    gt = truth_subset(tmp_path / "gt.jsonl", 3)
    clock = ManualClock(START)
    settings = server_settings(rate_max_requests=3, rate_window_s=10)
    with judge_server(f"sqlite:///{tmp_path / 'r.sqlite'}", settings=settings, clock=clock, worker=False) as (url, engine):
        tickets = setup_contest(engine, name="r", gt=gt, rules="late", teams=["a", "b"])
        good = _body(make_answers(load_truth(gt), variant=0))
        first = _post(url, good, _headers(tickets["a"], "r"))
        assert first.json()["remaining_attempts"] == 9
        for _ in range(2):
            assert _status(url, tickets["a"], first.json()["submission_id"], "r").status_code == 200
        response = _post(url, good, _headers(tickets["a"], "r"))
        assert (response.status_code, response.json()) == (429, {"detail": "Too many requests"})
        assert _status(url, tickets["a"], first.json()["submission_id"], "r").status_code == 429
        assert _post(url, good, _headers(tickets["b"], "r")).status_code == 200  # per team
        clock.advance(seconds=11)
        again = _post(url, good, _headers(tickets["a"], "r"))
        assert again.status_code == 200 and again.json()["remaining_attempts"] == 8  # the 429 did not count


# ---- command line -------------------------------------------------------------------------------


def test_admin_cli_and_rca_submit(tmp_path, world) -> None:
    # judge.cli's app is what `rca judge` mounts; `rca submit` is submit_command (app/cli.py registers it).
    # Loading app.cli's every sub-command costs seconds; these two cover the commands under test.
    import typer

    from judge.cli import app as judge_app
    from judge.server.cli import submit_command
    from rca.clisupport import root_callback

    app = typer.Typer()
    app.callback()(root_callback)
    app.add_typer(judge_app, name="judge")
    app.command("submit")(submit_command)
    runner = CliRunner()
    db = f"sqlite:///{tmp_path / 'cli.sqlite'}"
    gt = truth_subset(tmp_path / "gt.jsonl", 5)
    result = runner.invoke(app, ["-q", "judge", "contest", "create", "--name", "cli", "--gt", str(gt), "--rules", "late", "--db", db])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"contest": "cli", "kind": "rca", "rules": "late", "cases": 5}
    again = runner.invoke(app, ["-q", "judge", "contest", "create", "--name", "cli", "--gt", str(gt), "--db", db])
    assert again.exit_code == 2 and "already exists" in again.output
    ticket = runner.invoke(app, ["-q", "judge", "team", "add", "--contest", "cli", "--name", "x", "--db", db]).stdout.strip()
    assert len(ticket) >= 30
    with sqlite3.connect(tmp_path / "cli.sqlite") as con:
        stored = con.execute("select ticket_hash from teams").fetchone()[0]
    assert ticket not in stored and len(stored) == 64
    listed = runner.invoke(app, ["-q", "judge", "team", "list", "--contest", "cli", "--db", db])
    assert json.loads(listed.stdout)["team"] == "x"
    assert runner.invoke(app, ["-q", "judge", "contest", "freeze", "--name", "cli", "--db", db]).exit_code == 0
    contests = runner.invoke(app, ["-q", "judge", "contest", "list", "--db", db])
    assert json.loads(contests.stdout)["frozen_at"]
    missing = runner.invoke(app, ["-q", "judge", "team", "add", "--contest", "nope", "--name", "x", "--db", db])
    assert missing.exit_code == 2 and "no contest named 'nope'" in missing.output
    rescore = runner.invoke(app, ["-q", "judge", "contest", "rescore", "--name", "cli", "--db", db])
    assert json.loads(rescore.stdout) == {"contest": "cli", "requeued": 0}

    # `rca submit` against the module's server; its score equals `rca judge rca --keyword-only`.
    answers = write_jsonl(tmp_path / "result.jsonl", make_answers(world["truth"], variant=6))
    submitted = runner.invoke(app, ["-q", "submit", str(answers), "--server", world["url"], "--contest", "c-late",
                                    "--ticket", world["tickets"]["official"], "--wait", "--timeout", "30"])
    assert submitted.exit_code == 0, submitted.output
    reply = json.loads(submitted.stdout)
    report = tmp_path / "report.json"
    judged = runner.invoke(app, ["-q", "judge", "rca", "--gt", str(world["gt"]), "--pred", str(answers),
                                 "--rules", "late", "--keyword-only", "-o", str(report)])
    assert judged.exit_code == 0, judged.output
    assert reply["score"] == json.loads(report.read_text())["overall"]["final"]
    refused = runner.invoke(app, ["-q", "submit", str(answers), "--server", world["url"], "--contest", "c-late",
                                  "--ticket", "wrong"])
    assert refused.exit_code == 1 and "[401] Invalid ticket" in refused.output
