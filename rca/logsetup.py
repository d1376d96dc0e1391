"""Logging configuration, applied once by the CLI."""
from __future__ import annotations

import logging


def configure_logging(verbosity: int = 0) -> None:
    level = logging.WARNING if verbosity < 0 else logging.INFO if verbosity == 0 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    # Third-party chatter that drowns our own progress lines.
    for noisy in ("httpx", "httpx2", "chromadb", "drain3", "urllib3", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
