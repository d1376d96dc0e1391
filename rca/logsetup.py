"""Logging configuration, applied once by the CLI."""
from __future__ import annotations

import logging
import sys
from typing import TextIO


class CurrentStderrHandler(logging.StreamHandler[TextIO]):
    """Writes each record to ``sys.stderr`` as it is when the record is emitted.

    A plain ``StreamHandler`` keeps the stream it was given at set-up. Where the command runs
    inside a process that swaps stderr for its duration (typer's ``CliRunner``, a notebook, a
    caller capturing a command's output), that stream is closed after the command, and every
    later log call in the process fails with "Logging error" instead of being written.
    """

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        """StreamHandler assigns its stream once at set-up; the current stderr is read instead."""


def configure_logging(verbosity: int = 0) -> None:
    """Quiet by default (warnings and errors; long jobs show progress bars, not log lines): ``-v``
    adds what each step did, ``-vv`` the debugging detail, ``-q`` leaves errors only."""
    level = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True,
                        handlers=[CurrentStderrHandler()])
    # Third-party chatter that drowns our own progress lines.
    for noisy in ("httpx", "httpx2", "chromadb", "drain3", "urllib3", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
