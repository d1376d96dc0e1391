"""Worker processes die with their parent.

A pool worker whose parent was killed (``kill -9``, OOM killer) would otherwise finish its
task, write into an index nobody will record in a manifest, and then idle forever. Call
``die_with_parent(parent_pid)`` first thing in the worker (a pool ``initializer``):

- on Linux the kernel sends the worker SIGKILL when its parent thread exits
  (``prctl(PR_SET_PDEATHSIG)``);
- elsewhere a daemon thread polls the parent pid and ends the process.

Either way the parent pid is checked once after arming, since the parent may have died
between the fork and the ``prctl`` call.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import threading
import time

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def _arm_linux() -> bool:
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0


def _watch(parent_pid: int, poll_s: float) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(1)  # no cleanup: the parent that would record our work is gone
        time.sleep(poll_s)


def die_with_parent(parent_pid: int, *, poll_s: float = 1.0) -> None:
    """Make this process end as soon as ``parent_pid`` (its parent) is gone."""
    armed = sys.platform.startswith("linux") and _arm_linux()
    if not armed:
        threading.Thread(target=_watch, args=(parent_pid, poll_s), daemon=True, name="lifeline").start()
    if os.getppid() != parent_pid:
        os._exit(1)
