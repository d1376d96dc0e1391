"""Logging set-up: records go to the stderr of the moment, even after a command swapped it."""
from __future__ import annotations

import io
import logging
import sys

from rca.logsetup import configure_logging


def test_a_record_logged_after_the_commands_stderr_closed_goes_to_the_current_stderr(monkeypatch):
    command_stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", command_stderr)  # what CliRunner does for one invoke
    configure_logging(0)
    logging.getLogger("rca.test").warning("during the command")
    command_stderr.close()  # the invoke ended
    later = io.StringIO()
    monkeypatch.setattr(sys, "stderr", later)
    logging.getLogger("rca.test").warning("after the command")
    assert "WARNING rca.test: after the command" in later.getvalue()
    assert "Logging error" not in later.getvalue()


def test_verbosity_sets_the_root_level():
    try:
        for verbosity, level in [(-1, logging.ERROR), (0, logging.WARNING), (1, logging.INFO), (2, logging.DEBUG)]:
            configure_logging(verbosity)
            assert logging.getLogger().level == level
    finally:
        configure_logging(0)
