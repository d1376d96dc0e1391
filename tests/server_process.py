"""A real server binary run by a test: started with its output in a log, waited for, stopped.

Shared by the tests that run Prometheus and Alertmanager (Debian's packages); a failure shows the
log's tail, since a server that exits or never gets ready says why only there.
"""
from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

LOG_TAIL = 3000


def _tail(log_path: Path) -> str:
    return log_path.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL:]


@contextmanager
def running(command: Sequence[str], *, log_path: Path) -> Iterator[subprocess.Popen]:
    """The server started with stdout and stderr in ``log_path``; terminated (killed if it lingers) on exit."""
    with log_path.open("w", encoding="utf-8") as log_file:
        server = subprocess.Popen(list(command), stdout=log_file, stderr=subprocess.STDOUT)
    try:
        yield server
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)


def wait_until(what: str, done: Callable[[], bool], *, server: subprocess.Popen, log_path: Path,
               timeout_s: float, name: str) -> None:
    """Poll ``done`` until it holds; fail with the log's tail when the server exits or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if server.poll() is not None:
            pytest.fail(f"{name} exited ({server.returncode}):\n{_tail(log_path)}")
        if time.monotonic() > deadline:
            pytest.fail(f"{name}: no {what} within {timeout_s:.0f} s:\n{_tail(log_path)}")
        time.sleep(0.05)


def ready(url: str) -> Callable[[], bool]:
    """``GET url/-/ready`` answers 200 (Prometheus' and Alertmanager's readiness endpoint)."""
    def check() -> bool:
        try:
            return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
        except httpx.TransportError:
            return False
    return check
