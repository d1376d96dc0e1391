"""Throughput of ``rca import otlp --listen``: a simulated release sent over OTLP/HTTP, then imported; prints a table.

    .venv/bin/python scripts/bench_receive_otlp.py --work-dir work/bench-receive [--cases 4] [--seed 7]

The receiver runs as the command runs it (uvicorn on a loopback port, in a thread of this process) and one
client sends every request in turn, as a Collector's ``otlphttp`` exporter does: protobuf, gzipped, 2000
spans, log records or metric series a request. Timed apart: receiving (decode, save, answer) and one
import round of everything received (read, merge into the dataset). Figures only: no assertion, no threshold.
"""
from __future__ import annotations

import argparse
import gzip
import resource
import shutil
import threading
import time
from pathlib import Path

import httpx
import uvicorn
from rich.console import Console
from rich.table import Table

from bench import export as ex
from preprocess.formats.receive_otlp import OtlpInbox, ReceiveLimits, create_app
from rca.httpserve import listening_socket
from rca.logsetup import configure_logging
from simulate.simulator import SimulationOptions, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="where the simulated release and the dataset go")
    parser.add_argument("--cases", type=int, default=4, help="simulated cases (each about an hour of telemetry)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    configure_logging(-1)

    release = args.work_dir / "release"
    if not release.is_dir():
        simulate(SimulationOptions(out_dir=release, cases=args.cases, seed=args.seed))
    frames = ex.release_frames(release)
    requests = ([("traces", r) for r in ex.otlp_trace_requests(frames["spans"])]
                + [("logs", r) for r in ex.otlp_log_requests(frames["logs"])]
                + [("metrics", r) for r in ex.otlp_metric_requests(apm=frames["apm"], infra=frames["infra"])])
    bodies = [(signal, gzip.compress(ex.otlp_proto_message(request))) for signal, request in requests]

    out = args.work_dir / "received"
    shutil.rmtree(out, ignore_errors=True)
    inbox = OtlpInbox(out, limits=ReceiveLimits())
    sock = listening_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(inbox), log_config=None, access_log=False,
                                          lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    sent = sum(len(body) for _, body in bodies)
    began = time.perf_counter()
    with httpx.Client(timeout=60) as client:
        for signal, body in bodies:
            reply = client.post(f"{url}/v1/{signal}", content=body,
                                headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
            reply.raise_for_status()
    receiving = time.perf_counter() - began
    server.should_exit = True
    thread.join()
    sock.close()

    began = time.perf_counter()
    done = inbox.import_pending()  # one round, as the command's importer runs it
    importing = time.perf_counter() - began
    assert done is not None
    rows = {name: frame.height for name, frame in done.result.frames().items()}
    total = sum(rows.values())

    table = Table(title=f"OTLP/HTTP receiver: {len(bodies)} requests ({sent / 2**20:.1f} MiB gzipped), "
                        f"{args.cases} simulated case(s), seed {args.seed}")
    for column in ("step", "seconds", "requests/s", "rows", "rows/s"):
        table.add_column(column, justify="right" if column != "step" else "left")
    table.add_row("receive (decode, save, answer)", f"{receiving:.2f}", f"{len(bodies) / receiving:,.0f}",
                  f"{total:,}", f"{total / receiving:,.0f}")
    table.add_row("import round (read, merge)", f"{importing:.2f}", "", f"{total:,}", f"{total / importing:,.0f}")
    console = Console()
    console.print(table)
    console.print("rows: " + ", ".join(f"{name} {count:,}" for name, count in rows.items())
                  + f"; {len(done.written)} dataset file(s); peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")


if __name__ == "__main__":
    main()
