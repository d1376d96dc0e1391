"""The judge server on a real PostgreSQL (Debian's binaries), started by the test in a temp dir as `postgres`:
migrations, concurrent submissions with an exact quota count, library-equal scores, team isolation, rescore."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest

from judge.groundtruth import load_truth
from judge.server.store import requeue_contest
from tests.judge_server_support import (
    HTTP,
    ManualClock,
    free_port,
    judge_server,
    library_score,
    make_answers,
    server_settings,
    setup_contest,
    truth_subset,
    wait_until_scored,
    write_jsonl,
)


def _pg_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


@pytest.fixture(scope="module")
def postgres_url():
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not installed: apt-get install postgresql")
    runuser = shutil.which("runuser")
    as_postgres = [runuser, "-u", "postgres", "--"] if os.geteuid() == 0 and runuser else []
    if os.geteuid() == 0 and not as_postgres:
        pytest.skip("running as root without runuser: PostgreSQL refuses to run as root")
    # Not under pytest's tmp_path: its parents are private to root and postgres must reach the folder.
    root = Path(tempfile.mkdtemp(prefix="judge-pg-"))
    os.chmod(root, 0o755)
    if as_postgres:
        shutil.chown(root, user="postgres")
    data = root / "data"
    port = free_port()
    subprocess.run([*as_postgres, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                    "--no-sync"], check=True, capture_output=True)
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run([*as_postgres, str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l",
                    str(root / "log"), "-w", "-t", "60", "start"], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_postgres, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def test_postgres_end_to_end(postgres_url, tmp_path) -> None:
    gt = truth_subset(tmp_path / "gt.jsonl", 8, start=100)
    truth = load_truth(gt)
    clock = ManualClock(datetime(2025, 6, 1, 4, 0, tzinfo=UTC))
    settings = server_settings(daily_quota=4)
    with judge_server(postgres_url, settings=settings, clock=clock) as (url, engine):
        assert engine.dialect.name == "postgresql"
        teams = [f"pg{i}" for i in range(6)]
        tickets = setup_contest(engine, name="pg", gt=gt, rules="late", teams=teams)
        files = {v: write_jsonl(tmp_path / f"r{v}.jsonl", make_answers(truth, variant=v)) for v in range(5)}
        expected = {v: library_score(gt, path, rules="late") for v, path in files.items()}

        def one(job):
            team, variant = job
            return team, variant, HTTP.post(url + "/", content=json.dumps({"data": make_answers(truth, variant=variant)}).encode(),
                                            headers={"ticket": tickets[team], "contest": "pg", "Content-Type": "application/json"})

        # 5 tries per team against a daily quota of 4, all at once: exactly 4 accepted per team.
        jobs = [(team, v) for v in range(5) for team in teams]
        with ThreadPoolExecutor(max_workers=12) as pool:
            results = list(pool.map(one, jobs))
        for team in teams:
            codes = sorted(r.status_code for t, _, r in results if t == team)
            assert codes == [200, 200, 200, 200, 403]
            remaining = sorted(r.json()["remaining_attempts"] for t, _, r in results if t == team and r.status_code == 200)
            assert remaining == [0, 1, 2, 3]
        accepted = {r.json()["submission_id"]: (t, v) for t, v, r in results if r.status_code == 200}
        wait_until_scored(url)
        for team in teams:
            listed = HTTP.get(url + "/api/submissions", headers={"ticket": tickets[team], "contest": "pg"}).json()
            own = {sid for sid, (t, _) in accepted.items() if t == team}
            assert {s["submission_id"] for s in listed["submissions"]} == own
            for row in listed["submissions"]:
                assert row["score"] == expected[accepted[row["submission_id"]][1]]
        foreign = next(sid for sid, (t, _) in accepted.items() if t == "pg0")
        response = HTTP.get(url + "/status", headers={"ticket": tickets["pg1"], "contest": "pg", "submission": foreign})
        assert (response.status_code, response.json()) == (404, {"detail": "Submission not found"})
        board = HTTP.get(url + "/api/contests/pg/leaderboard").json()["ranking"]
        assert {r["team"] for r in board} == set(teams)
        clock.advance(seconds=1)
        assert requeue_contest(engine, contest="pg") == len(accepted)
        wait_until_scored(url)
        rescored = HTTP.get(url + "/api/submissions", headers={"ticket": tickets["pg0"], "contest": "pg"}).json()
        assert all(r["score"] == expected[accepted[r["submission_id"]][1]] for r in rescored["submissions"])
