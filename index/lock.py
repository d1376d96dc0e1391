"""The writer lock of an index directory: one ``rca preprocess`` at a time per index.

Two writers on one index corrupt it silently: both restore the same Drain3 miner state,
mine different days and save their own template table, so the log counts of one run
point at the other's template ids. The lock is an ``fcntl.flock`` on ``<index>/.writer.lock``;
the kernel drops it when its holder dies (even by ``kill -9``), so a stale lock file never
blocks a later run. While held, the file names the holder (pid, host, command, start time)
so the refused writer can say who to wait for.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from rca.errors import DataError

log = logging.getLogger(__name__)

LOCK_NAME = ".writer.lock"


class IndexBusyError(DataError):
    """Another process holds the index's writer lock."""


def _holder_text(path: Path) -> str:
    try:
        raw = path.read_text(encoding="utf-8")
        holder = json.loads(raw)
        return (f"pid {holder['pid']} on {holder['host']} since {holder['since']} "
                f"(command: {holder['command']})")
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (its details are unreadable)"


@contextmanager
def writer_lock(index_dir: Path, *, wait: bool = False, poll_s: float = 1.0) -> Iterator[None]:
    """Hold the index's writer lock for the block; refuse (``IndexBusyError``) or ``wait`` if held."""
    index_dir = Path(index_dir)
    index_dir.mkdir(parents=True, exist_ok=True)
    path = index_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        announced = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder_text(path)
                if not wait:
                    raise IndexBusyError(f"{index_dir}: index is being written by {holder}; "
                                         "wait for it to finish or pass --wait") from None
                if not announced:
                    log.warning("%s: waiting for the index writer lock held by %s", index_dir, holder)
                    announced = True
                time.sleep(poll_s)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": datetime.now(UTC).isoformat(timespec="seconds"),
              "command": " ".join(sys.argv)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode("utf-8"), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # released: no holder to name
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
