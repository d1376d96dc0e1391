"""Throughput of the judge server: T teams x S submissions sent in parallel to a real uvicorn server.

Prints the POST latency (p50 / p95 / max), how long until every submission was scored, and the
scoring rate. The database is a fresh SQLite file in a temp dir unless --db names another (e.g. a
PostgreSQL URL; its tables must be empty of a contest called ``bench``).

    python scripts/bench_judge_server.py --teams 20 --per-team 10 --cases 50
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import httpx
import uvicorn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from judge.groundtruth import parse_truth  # noqa: E402
from judge.server.app import create_app  # noqa: E402
from judge.server.quota import utc_now  # noqa: E402
from judge.server.store import add_team, create_contest, open_database  # noqa: E402
from judge.server.worker import ScoringWorker  # noqa: E402
from rca.settings import JudgeServerSettings, JudgeSettings  # noqa: E402

GROUND_TRUTH = ROOT / "data" / "reference" / "aiops2025" / "groundtruth.jsonl"
log = logging.getLogger("bench_judge_server")


def _answers(truth, variant: int) -> list[dict]:
    return [{
        "uuid": case.uuid,
        "component": case.instance[0] if (i + variant) % 3 else "frontend",
        "reason": (case.key_metrics or ["latency"])[0] + " high",
        "reasoning_trace": [{"step": s, "action": "LoadMetrics", "observation": f"{case.fault_type} signals"}
                            for s in range(1, 2 + (i + variant) % 6)],
    } for i, case in enumerate(truth)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database URL (default: a fresh SQLite file)")
    parser.add_argument("--teams", type=int, default=20)
    parser.add_argument("--per-team", type=int, default=10)
    parser.add_argument("--cases", type=int, default=50, help="cases of the contest (first N of the reference truth)")
    parser.add_argument("--clients", type=int, default=20, help="parallel client threads")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    workdir = tempfile.TemporaryDirectory(prefix="bench-judge-")
    db_url = args.db or f"sqlite:///{workdir.name}/bench.sqlite"
    lines = [line for line in GROUND_TRUTH.read_text(encoding="utf-8").splitlines() if line.strip()][: args.cases]
    text = "\n".join(lines) + "\n"
    truth = parse_truth(text, source=str(GROUND_TRUTH))
    engine = open_database(db_url)
    create_contest(engine, name="bench", kind="rca", rules="late", truth=text, case_count=len(truth), now=utc_now())
    tickets = [add_team(engine, contest="bench", name=f"team{i}", now=utc_now()) for i in range(args.teams)]
    settings = JudgeServerSettings(semantic=False, worker_poll_s=0.05, rate_max_requests=100_000,
                                   daily_quota=max(10, args.per_team), total_quota=max(350, args.per_team))
    worker = ScoringWorker(engine, server=settings, judge=JudgeSettings(), clock=utc_now, embedder_factory=None)
    server = uvicorn.Server(uvicorn.Config(create_app(engine, settings=settings, worker=worker),
                                           host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    bodies = [json.dumps({"data": _answers(truth, v)}).encode() for v in range(args.per_team)]
    client = httpx.Client(timeout=120)

    def post(job: tuple[int, int]) -> float:
        team, variant = job
        started = time.perf_counter()
        response = client.post(url + "/", content=bodies[variant],
                               headers={"ticket": tickets[team], "contest": "bench", "Content-Type": "application/json"})
        if response.status_code != 200:
            raise SystemExit(f"POST refused: {response.status_code} {response.text}")
        return time.perf_counter() - started

    jobs = [(t, v) for v in range(args.per_team) for t in range(args.teams)]
    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.clients) as pool:
        latencies = sorted(pool.map(post, jobs))
    posted = time.perf_counter() - began
    while True:
        queue = client.get(url + "/api/queue").json()
        if queue["queued"] == 0 and queue["scoring"] == 0:
            break
        time.sleep(0.05)
    scored = time.perf_counter() - began
    server.should_exit = True
    thread.join(15)
    n = len(latencies)
    print(f"database        {engine.dialect.name}")
    print(f"submissions     {n} ({args.teams} teams x {args.per_team}), {len(truth)} cases each, {args.clients} clients")
    print(f"POST latency    p50 {1000 * statistics.median(latencies):.1f} ms, "
          f"p95 {1000 * latencies[int(0.95 * (n - 1))]:.1f} ms, max {1000 * latencies[-1]:.1f} ms")
    print(f"all accepted    {posted:.2f} s ({n / posted:.1f} submissions/s)")
    print(f"all scored      {scored:.2f} s ({n / scored:.1f} submissions/s end to end); queue {queue}")
    print(f"finished        {datetime.now(UTC).isoformat(timespec='seconds')}")


if __name__ == "__main__":
    main()
