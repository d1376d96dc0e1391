"""Logging configuration, applied once by the CLI."""
from __future__ import annotations

import logging


def configure_logging(verbosity: int = 0) -> None:
    """Quiet by default (warnings and errors; long jobs show progress bars, not log lines): ``-v``
    adds what each step did, ``-vv`` the debugging detail, ``-q`` leaves errors only."""
    level = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    # Third-party chatter that drowns our own progress lines.
    for noisy in ("httpx", "httpx2", "chromadb", "drain3", "urllib3", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
