"""Torture run: every probe of issue 16 against a small simulated release, through the real commands.

    python scripts/torture.py [--cases 2] [--keep] [--only NAME ...]

Simulates a small release (``rca simulate``) in a fresh directory under ``work/``, builds its
index, then attacks the nightly job and the diagnoser the way a hostile input would: bad
files, a typo'd ``--out``, two concurrent writers, killed parents and workers, broken model
endpoints, bad cases. Every command is the real CLI in a subprocess; the model endpoint is a
scripted OpenAI-compatible HTTP server on 127.0.0.1 (it stands for a broken or hostile
endpoint, so no model is loaded). Prints one line per probe:

    PASS  bad-metric-file/truncated   exit 3, lost infra_pod_pod_cpu_usage_2025-06-06.parquet, 5 other infra KPIs kept

and exits 1 if any probe failed.
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from index import store  # noqa: E402
from simulate.simulator import SimulationOptions, simulate  # noqa: E402

log = logging.getLogger("torture")
HEAVY_MODULES = ("polars", "chromadb", "ruptures", "index.build")


@dataclass
class Verdict:
    ok: bool
    saw: str


@dataclass
class Done:
    code: int
    out: str
    err: str

    @property
    def both(self) -> str:
        return self.out + self.err


def rca(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> Done:
    """Run the real ``rca`` command (python -m app.cli) and capture everything."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80", **(env or {})}
    done = subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=REPO, env=full_env, capture_output=True,
                          text=True, timeout=timeout)
    return Done(done.returncode, done.stdout, done.stderr)


def rca_popen(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "app.cli", *args], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def children(pid: int) -> list[int]:
    """Direct child processes of ``pid`` (Linux /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return " Z " not in Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False


def no_traceback(done: Done) -> bool:
    return "Traceback" not in done.both


def first_line(text: str, limit: int = 110) -> str:
    """The user-facing error line (``error: ...``), else the first logged error without its prefix."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = next((x for x in lines if x.startswith("error:")), None)
    if line is None:
        logged = next((x for x in lines if " ERROR " in x), lines[0] if lines else "")
        line = logged.split(": ", 1)[-1] if " ERROR " in logged else logged
    return line[:limit]


# --------------------------------------------------------------------------- scripted endpoint


class Endpoint:
    """An OpenAI-compatible server whose behaviour a probe sets: valid, invalid, html, torn, error, hang."""

    def __init__(self) -> None:
        self.mode = "valid"
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                outer.requests += 1
                outer.respond(self, body)

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def respond(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        if self.mode == "hang":
            time.sleep(5)
            return
        if self.mode == "error":
            self._send(handler, 500, b'{"error": {"message": "overloaded"}}', "application/json")
            return
        if self.mode == "html":
            self._send(handler, 200, b"<html><body>Sign in to the proxy</body></html>", "text/html")
            return
        if self.mode == "torn":
            self._send(handler, 200, b'{"id": "x", "choices": [{"message": ', "application/json")
            return
        schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
        branches = schema.get("anyOf") or [schema]
        props = branches[0].get("properties", {})
        fault = (props.get("fault_type", {}).get("enum") or ["cpu stress"])[0]
        # The pipeline's schema asks for the candidate's number; other schemas for its name.
        if "candidate" in props:
            chosen: dict = {"candidate": 99 if self.mode == "invalid" else props["candidate"].get("const", 1)}
        else:
            chosen = {"component": "no-such-component" if self.mode == "invalid"
                      else props.get("component", {}).get("const", "unknown")}
        answer = json.dumps({**chosen, "fault_type": fault, "reason": f"{fault}: scripted reply"})
        completion = {"id": "c", "object": "chat.completion", "created": 0, "model": "scripted",
                      "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                                   "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
        self._send(handler, 200, json.dumps(completion).encode(), "application/json")

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, payload: bytes, content_type: str) -> None:
        handler.send_response(status)
        handler.send_header("content-type", content_type)
        handler.send_header("content-length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)


# --------------------------------------------------------------------------- the world


class World:
    """The simulated release, its clean index, and fresh copies for probes that damage them."""

    def __init__(self, root: Path, *, cases: int) -> None:
        self.root = root
        self.data = root / "data"
        log.info("simulating %d case(s) into %s", cases, self.data)
        simulate(SimulationOptions(out_dir=self.data, cases=cases, seed=16, scale="small"))
        self.days = sorted(p.name for p in self.data.iterdir() if p.is_dir() and p.name[:2] == "20")
        self.day = self.days[0]
        self.input_file = self.data / "input.json"
        self.cases = json.loads(self.input_file.read_text())
        self.index = root / "index"
        log.info("building the clean index")
        done = rca("-q", "preprocess", "--data-dir", str(self.data), "--index-dir", str(self.index), "--all")
        if done.code != 0:
            raise SystemExit(f"clean preprocess failed ({done.code}): {done.err[-2000:]}")
        self.endpoint = Endpoint()
        self._n = 0

    def scratch(self, name: str) -> Path:
        """An empty directory of the probe's own."""
        self._n += 1
        base = self.root / f"{self._n:02d}-{name.replace('/', '-')}"
        base.mkdir()
        return base

    def fresh(self, name: str, *, data: bool = False, index: bool = False) -> tuple[Path, Path]:
        """Copies of the data and/or index for one probe (uncopied ones are the shared clean ones)."""
        base = self.scratch(name)
        data_dir, index_dir = self.data, self.index
        if data:
            data_dir = base / "data"
            shutil.copytree(self.data, data_dir)
        if index:
            index_dir = base / "index"
            shutil.copytree(self.index, index_dir)
        return data_dir, index_dir

    def diagnose(self, *args: str, mode: str = "valid", index: Path | None = None, input_file: Path | None = None,
                 runs: Path | None = None, env: dict[str, str] | None = None) -> Done:
        self.endpoint.mode = mode
        self.endpoint.requests = 0
        runs_dir = runs or (self.root / "runs")
        return rca("diagnose", *args, "--input", str(input_file or self.input_file),
                   "--index-dir", str(index or self.index), "--runs-dir", str(runs_dir),
                   "--backend", "openai", "--base-url", self.endpoint.url, "--model", "scripted",
                   "--one-turn", env={"RCA_LLM__MAX_RETRIES": "0", "RCA_LLM__TIMEOUT_S": "30", **(env or {})})


# --------------------------------------------------------------------------- probes: defect 1


CPU_KPI = "pod_cpu_usage"


def _cpu_file(data: Path, day: str) -> Path:
    return next((data / day / "metric-parquet" / "infra" / "infra_pod").glob(f"infra_pod_{CPU_KPI}_*.parquet"))


def _damage_truncate(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


def _damage_empty(path: Path) -> None:
    path.write_bytes(b"")


def _damage_columns(path: Path) -> None:
    pl.DataFrame({"unrelated": [1]}).write_parquet(path)


def _damage_time(path: Path) -> None:
    pl.read_parquet(path).with_columns(pl.lit("yesterday afternoon").alias("time")).write_parquet(path)


def bad_metric_file(world: World, damage: Callable[[Path], None], name: str) -> Verdict:
    data, _ = world.fresh(name, data=True)
    index = data.parent / "index"
    bad = _cpu_file(data, world.day)
    damage(bad)
    done = rca("preprocess", "--data-dir", str(data), "--index-dir", str(index), "--date", world.day)
    manifest = store.load_manifest(index)
    lost = [f.name() for f in manifest.partitions[f"{world.day}/metric"].lost_files]
    series = pl.read_parquet(store.table_path(index, world.day, "metric_series"))
    infra_kpis = set(series.filter(pl.col("kind") == "infra_pod").get_column("kpi").unique())
    rerun = rca("preprocess", "--data-dir", str(data), "--index-dir", str(index), "--date", world.day)
    ok = (done.code == 3 and lost == [bad.name] and bad.name in done.both and CPU_KPI not in infra_kpis
          and len(infra_kpis) > 0 and rerun.code == 3 and "skipped" in rerun.out and no_traceback(done))
    return Verdict(ok, f"exit {done.code}, lost {lost}, {len(infra_kpis)} other infra_pod KPIs kept, "
                       f"rerun exit {rerun.code}")


def data_status_in_prompt(world: World) -> Verdict:
    data, _ = world.fresh("status", data=True)
    index = data.parent / "index"
    bad = _cpu_file(data, world.day)
    _damage_truncate(bad)
    rca("-q", "preprocess", "--data-dir", str(data), "--index-dir", str(index), "--all")
    uuid = world.cases[0]["uuid"]
    done = world.diagnose("--uuid", uuid, "--print-prompt", "--json", index=index)
    try:
        line = json.loads(done.out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Verdict(False, f"exit {done.code}: {first_line(done.both)}")
    text = line["messages"][-1]["content"]
    metric = next(s for s in line["data_status"] if s["modality"] == "metric")
    ok = metric["state"] == "partial" and "file(s) unreadable" in text and bad.name in text
    said = next((x for x in text.splitlines() if "unreadable" in x), "nothing about it")
    return Verdict(ok, f"metric status {metric['state']}; prompt says: {said.strip()[:90]}")


# --------------------------------------------------------------------------- defect 2


def out_typo(world: World) -> Verdict:
    base = world.scratch("out-typo")
    target = base / "input.json"
    shutil.copy(world.input_file, target)
    raw = target.read_bytes().rstrip(b"\n")
    target.write_bytes(raw)  # as an editor leaves it: no final newline
    done = world.diagnose("--all", "-o", str(target), input_file=target)
    intact = target.read_bytes() == raw
    return Verdict(done.code == 2 and intact and no_traceback(done),
                   f"exit {done.code}, file {'unchanged' if intact else 'MODIFIED'}: {first_line(done.err)}")


# --------------------------------------------------------------------------- defect 3


def concurrent_writers(world: World) -> Verdict:
    """Two writers started together on one index: one runs, the other refuses naming it; with --wait it queues."""
    _, index = world.fresh("concurrent", index=True)
    args = ("preprocess", "--data-dir", str(world.data), "--index-dir", str(index), "--all", "--force")
    pair = [rca_popen(*args), rca_popen(*args)]
    results = [(p.pid, *p.communicate(timeout=900), p.returncode) for p in pair]
    codes = sorted(code for *_, code in results)
    refused = next((r for r in results if r[3] == 4), None)
    winner = next((r for r in results if r[3] == 0), None)
    named = refused is not None and winner is not None and f"pid {winner[0]}" in refused[2]
    queued = [rca_popen(*args, "--wait"), rca_popen(*args, "--wait")]  # whichever is second waits
    queued_results = [(p.pid, *p.communicate(timeout=900), p.returncode) for p in queued]
    waited = [r for r in queued_results if "waiting for the index writer lock" in r[2]]
    templates = set(pl.read_parquet(store.index_table_path(index, "log_templates")).get_column("template_id"))
    dangling = 0
    for day in world.days:
        counts = pl.read_parquet(store.table_path(index, day, "log_counts"))
        dangling += counts.filter(~pl.col("template_id").is_in(list(templates))).height
    queued_codes = sorted(r[3] for r in queued_results)
    ok = codes == [0, 4] and named and queued_codes == [0, 0] and len(waited) == 1 and dangling == 0
    said = first_line(refused[2], 90) if refused else "nobody refused"
    return Verdict(ok, f"together: exits {codes}, refused one named the holder: {named} ({said}); with --wait: "
                       f"exits {queued_codes}, {len(waited)} waited; {dangling} log rows with unknown template")


# --------------------------------------------------------------------------- defect 4


def invalid_after_repair(world: World) -> Verdict:
    runs = world.root / "runs-invalid"
    uuid = world.cases[0]["uuid"]
    done = world.diagnose("--uuid", uuid, mode="invalid", runs=runs)
    record_path = runs / "adhoc" / f"{uuid}.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    ok = (done.code == 1 and "invalid after repair" in done.err and no_traceback(done)
          and record.get("status") == "failed" and len(record.get("raw_responses", [])) == 2)
    return Verdict(ok, f"exit {done.code}, record status {record.get('status')} with "
                       f"{len(record.get('raw_responses', []))} raw replies: {first_line(done.err, 70)}")


def endpoint_garbage(world: World, mode: str) -> Verdict:
    base = world.scratch(f"endpoint-{mode}")
    out = base / "result.jsonl"
    done = world.diagnose("--all", "-o", str(out), mode=mode, runs=base / "runs")
    expected = "text/html" if mode == "html" else "invalid JSON"
    calls = world.endpoint.requests
    ok = done.code == 2 and expected in done.err and "batch stopped" in done.err and no_traceback(done) and calls == 1
    return Verdict(ok, f"exit {done.code}, {calls} request(s): {first_line(done.err, 90)}")


def corrupt_table(world: World) -> Verdict:
    _, index = world.fresh("corrupt-table", index=True)
    uuid = world.cases[0]["uuid"]
    day = world.day
    table = store.table_path(index, day, "trace_edges")
    _damage_truncate(table)
    done = world.diagnose("--uuid", uuid, index=index)
    rerun = rca("preprocess", "--data-dir", str(world.data), "--index-dir", str(index), "--date", day)
    after = world.diagnose("--uuid", uuid, index=index)
    rebuilt = "trace" in rerun.out and "written" in rerun.out
    ok = (done.code != 0 and "trace_edges.parquet" in done.err and no_traceback(done) and rebuilt and after.code == 0)
    return Verdict(ok, f"diagnose exit {done.code} naming the table; rerun without --force "
                       f"{'rebuilt it' if rebuilt else 'did NOT rebuild it'}; then diagnose exit {after.code}")


def corrupt_manifest(world: World) -> Verdict:
    _, index = world.fresh("corrupt-manifest", index=True)
    (index / store.MANIFEST_NAME).write_text('{"schema_version": 2, "partitions": {"')
    done = world.diagnose("--uuid", world.cases[0]["uuid"], index=index)
    ok = done.code == 2 and "corrupt manifest" in done.err and no_traceback(done)
    return Verdict(ok, f"exit {done.code}: {first_line(done.err, 90)}")


def _start_with_workers(index: Path, world: World) -> tuple[subprocess.Popen, list[int]]:
    process = rca_popen("-q", "preprocess", "--data-dir", str(world.data), "--index-dir", str(index), "--all",
                        "--force", "--workers", "3")
    deadline = time.monotonic() + 60
    workers: list[int] = []
    while time.monotonic() < deadline and process.poll() is None:
        # The pool's workers are children of the spawn resource tracker's sibling: the direct
        # children of the CLI that run multiprocessing's spawn main.
        workers = [c for c in children(process.pid)
                   if "multiprocessing" in Path(f"/proc/{c}/cmdline").read_bytes().decode(errors="replace")
                   and "resource_tracker" not in Path(f"/proc/{c}/cmdline").read_bytes().decode(errors="replace")]
        if workers:
            time.sleep(1.0)  # let them pick up a partition
            break
        time.sleep(0.05)
    return process, workers


def killed_worker(world: World) -> Verdict:
    _, index = world.fresh("killed-worker", index=True)
    process, workers = _start_with_workers(index, world)
    if not workers:
        process.kill()
        return Verdict(False, "no worker process seen")
    os.kill(workers[0], signal.SIGKILL)
    out, err = process.communicate(timeout=600)
    ok = process.returncode == 1 and "worker process died" in err + out and "Traceback" not in err + out
    return Verdict(ok, f"exit {process.returncode}: {first_line(err + out, 90)}")


# --------------------------------------------------------------------------- defect 5


def bad_case(world: World) -> Verdict:
    base = world.scratch("bad-case")
    broken = base / "input.json"
    good = world.cases[0]
    broken.write_text(json.dumps([good, {"uuid": "no-window-1", "Anomaly Description": "it broke, please look"}]))
    one = world.diagnose("--uuid", good["uuid"], input_file=broken, runs=base / "runs")
    every = world.diagnose("--all", input_file=broken, runs=base / "runs")
    ok = (one.code == 0 and good["uuid"] in one.out and every.code == 1
          and "no-window-1 cannot be diagnosed" in every.err and good["uuid"] in every.out)
    return Verdict(ok, f"--uuid of the good case exit {one.code}; --all exit {every.code}, "
                       f"bad case named: {'no-window-1' in every.err}")


# --------------------------------------------------------------------------- defect 6


def backend_failure_stops(world: World, mode: str) -> Verdict:
    base = world.scratch(f"backend-{mode}")
    out = base / "result.jsonl"
    env = {"RCA_LLM__TIMEOUT_S": "1", "RCA_LLM__MAX_RETRIES": "1"} if mode == "hang" else {}
    started = time.monotonic()
    done = world.diagnose("--all", "-o", str(out), mode=mode, runs=base / "runs", env=env)
    seconds = time.monotonic() - started
    calls = world.endpoint.requests
    records = sorted((base / "runs" / "result").glob("*.json"))
    statuses = [json.loads(p.read_text())["status"] for p in records]
    expected_calls = 2 if mode == "hang" else 1  # one case: its attempts, then stop
    said = done.err.count("HTTP 500") if mode == "error" else 1  # the cause, printed once
    ok = (done.code == 2 and "batch stopped" in done.err and calls == expected_calls and statuses == ["failed"]
          and said == 1)
    return Verdict(ok, f"exit {done.code} after {seconds:.0f} s, {calls} request(s), run records {statuses}, "
                       f"cause printed {said} time(s)")


# --------------------------------------------------------------------------- defect 7


def orphaned_workers(world: World) -> Verdict:
    _, index = world.fresh("orphans", index=True)
    process, workers = _start_with_workers(index, world)
    if not workers:
        process.kill()
        return Verdict(False, "no worker process seen")
    killed_at = time.time()
    process.send_signal(signal.SIGKILL)
    process.wait()
    time.sleep(5)
    survivors = [w for w in workers if alive(w)]
    late = [p for p in index.rglob("*") if p.is_file() and p.stat().st_mtime > killed_at + 0.5]
    for w in survivors:
        os.kill(w, signal.SIGKILL)
    return Verdict(not survivors and not late,
                   f"{len(workers)} worker(s); alive 5 s after kill -9 of the parent: {len(survivors)}; "
                   f"index files written after the kill: {len(late)}")


# --------------------------------------------------------------------------- defect 8


def _hour_file(data: Path, day: str) -> Path:
    return sorted((data / day / "log-parquet").glob("*.parquet"))[0]


def log_without_pod(world: World) -> Verdict:
    data, _ = world.fresh("log-no-pod", data=True)
    path = _hour_file(data, world.day)
    pl.read_parquet(path).drop("k8_pod").write_parquet(path)
    done = rca("preprocess", "--data-dir", str(data), "--index-dir", str(data.parent / "index"), "--date", world.day)
    return Verdict(done.code == 3 and path.name in done.both and "k8_pod" in done.both,
                   f"exit {done.code}, file named: {path.name in done.both}")


def non_utf8(world: World) -> Verdict:
    data, _ = world.fresh("non-utf8", data=True)
    path = _hour_file(data, world.day)
    table = pq.read_table(path)
    raw = [m.encode() if m is not None else b"" for m in table.column("message").to_pylist()]
    for row in range(min(4, len(raw))):
        raw[row] = b"caf\xe9 \xff broken bytes"
    binary = pa.array(raw, type=pa.binary())
    invalid = pa.Array.from_buffers(pa.string(), len(raw), binary.buffers())  # unchecked, like a broken exporter
    pq.write_table(table.set_column(table.schema.get_field_index("message"), "message", invalid), path)
    index = data.parent / "index"
    done = rca("preprocess", "--data-dir", str(data), "--index-dir", str(index), "--date", world.day)
    clean = store.load_manifest(world.index).partitions[f"{world.day}/log"].rows["lines_read"]
    now = store.load_manifest(index).partitions[f"{world.day}/log"].rows["lines_read"]
    return Verdict(done.code == 0 and now == clean and "not UTF-8" in done.both,
                   f"exit {done.code}, lines read {now} of {clean}, repair logged: {'not UTF-8' in done.both}")


# --------------------------------------------------------------------------- defect 9


def warnings_summarised(world: World) -> Verdict:
    _, index = world.fresh("warnings", index=True)
    done = rca("preprocess", "--data-dir", str(world.data), "--index-dir", str(index), "--all", "--force")
    about_absent = [x for x in done.err.splitlines() if "absent" in x or "missing telemetry" in x]
    limit = 2 * len(world.days) + 2  # one per hourly partition, and at most one per metric source
    return Verdict(len(about_absent) <= limit, f"{len(about_absent)} warning line(s) about absent files "
                                               f"for {len(world.days)} partial day(s), of {len(done.err.splitlines())}")


def error_once(world: World) -> Verdict:
    done = world.diagnose("--uuid", "no-such-case")
    count = done.err.count("unknown uuid no-such-case")
    return Verdict(done.code == 2 and count == 1, f"exit {done.code}, message printed {count} time(s)")


def all_with_uuid(world: World) -> Verdict:
    done = world.diagnose("--all", "--uuid", world.cases[0]["uuid"])
    return Verdict(done.code == 2 and "not both" in done.err, f"exit {done.code}: {first_line(done.err, 80)}")


def print_prompt_json(world: World) -> Verdict:
    done = world.diagnose("--uuid", world.cases[0]["uuid"], "--print-prompt", "--json")
    try:
        line = json.loads(done.out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Verdict(False, f"exit {done.code}, not JSON: {done.out[:80]!r}")
    return Verdict(done.code == 0 and "messages" in line, f"exit {done.code}, JSON with {sorted(line)}")


def answer_table(world: World) -> Verdict:
    done = world.diagnose("--all")
    uuids = {c["uuid"] for c in world.cases}
    rows = [line.split() for line in done.out.splitlines()]
    # Table rows: "<uuid> <component> <index top> ..."; the reason lines after it: "<uuid> (<calls>, <tokens>): ...".
    names = [row[1] for row in rows if len(row) > 2 and row[0] in uuids and not row[1].startswith("(")]
    cut = [n for n in names if n.endswith("…")]
    widest = max((len(x) for x in done.out.splitlines()), default=0)
    return Verdict(done.code == 0 and bool(names) and not cut and widest <= 80,
                   f"exit {done.code}, components {names}, widest line {widest}")


def help_is_light(world: World) -> Verdict:
    probe = ("import sys, time\nstarted = time.perf_counter()\nsys.argv = ['rca', '--help']\nfrom app import cli\n"
             "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
             f"print(round(time.perf_counter() - started, 2), sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules),"
             " file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True)
    seconds, _, heavy = done.stderr.strip().splitlines()[-1].partition(" ")
    return Verdict(heavy == "[]", f"{seconds} s in-process, heavy modules imported: {heavy}")


def readme_small_model(world: World) -> Verdict:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    found = "qwen2.5-coder-0.5b" in text and "--model qwen2.5-coder-0.5b" in text
    return Verdict(found, "README names how to choose the 0.5B model" if found else "README says nothing about 0.5B")


# --------------------------------------------------------------------------- main


def probes() -> dict[str, Callable[[World], Verdict]]:
    table: dict[str, Callable[[World], Verdict]] = {}
    for label, damage in (("truncated", _damage_truncate), ("empty", _damage_empty),
                          ("no-columns", _damage_columns), ("odd-time", _damage_time)):
        table[f"1 bad-metric-file/{label}"] = functools.partial(bad_metric_file, damage=damage, name=label)
    table["1 data-status-in-prompt"] = data_status_in_prompt
    table["2 out-typo"] = out_typo
    table["3 concurrent-writers"] = concurrent_writers
    table["4 invalid-after-repair"] = invalid_after_repair
    table["4 endpoint-html"] = lambda w: endpoint_garbage(w, "html")
    table["4 endpoint-torn-json"] = lambda w: endpoint_garbage(w, "torn")
    table["4 corrupt-index-table"] = corrupt_table
    table["4 corrupt-manifest"] = corrupt_manifest
    table["4 killed-worker"] = killed_worker
    table["5 case-without-window"] = bad_case
    table["6 backend-error-stops"] = lambda w: backend_failure_stops(w, "error")
    table["6 backend-hang-stops"] = lambda w: backend_failure_stops(w, "hang")
    table["7 orphaned-workers"] = orphaned_workers
    table["8 log-without-pod"] = log_without_pod
    table["8 non-utf8-strings"] = non_utf8
    table["9 absent-files-summarised"] = warnings_summarised
    table["9 error-printed-once"] = error_once
    table["9 all-with-uuid"] = all_with_uuid
    table["9 print-prompt-json"] = print_prompt_json
    table["9 answer-table-80-columns"] = answer_table
    table["9 help-imports-nothing"] = help_is_light
    table["9 readme-0.5b"] = readme_small_model
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2, help="Simulated cases (hours of data).")
    parser.add_argument("--keep", action="store_true", help="Keep the work directory.")
    parser.add_argument("--only", nargs="*", default=None, help="Run only probes whose name contains one of these.")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    (REPO / "work").mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="torture-", dir=REPO / "work"))
    failures = 0
    try:
        world = World(root, cases=args.cases)
        for name, probe in probes().items():
            if args.only and not any(o in name for o in args.only):
                continue
            started = time.monotonic()
            try:
                verdict = probe(world)
            except Exception as exc:  # noqa: BLE001 (a probe that crashes is a FAIL line, not the end of the run)
                verdict = Verdict(False, f"probe crashed: {type(exc).__name__}: {exc}")
            failures += not verdict.ok
            print(f"{'PASS' if verdict.ok else 'FAIL'}  {name:<30} {verdict.saw}  ({time.monotonic() - started:.0f} s)",
                  flush=True)
    finally:
        if args.keep:
            log.info("work directory kept: %s", root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{failures} probe(s) failed" if failures else "all probes passed")
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
