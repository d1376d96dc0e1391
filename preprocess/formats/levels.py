"""A log record's level, where the format keeps it apart from the text, written into the line.

A text logger writes the level into the line (``2025-06-05 10:00:01 ERROR payment declined``), and
the release's lines carry it so (the log detector's templates and keywords keep it: an ``ERROR``
line reads as one). OpenTelemetry keeps it in the record (``severityText`` / ``severityNumber``),
ECS in ``log.level``, a Loki pipeline often in a stream label: the body alone then reads like an
INFO line. ``line_with_level`` puts the level back in front of the text, as a text logger would,
unless the line already states one or is a JSON document (whose own fields say it).
"""
from __future__ import annotations

import re

# OpenTelemetry's severity numbers (logs data model): 1-4 TRACE, 5-8 DEBUG, 9-12 INFO, 13-16 WARN,
# 17-20 ERROR, 21-24 FATAL.
_BY_NUMBER = ((21, "FATAL"), (17, "ERROR"), (13, "WARN"), (9, "INFO"), (5, "DEBUG"), (1, "TRACE"))
# Level names as loggers and shippers spell them, to the one word a line gets.
_NAMES = {"trace": "TRACE", "debug": "DEBUG", "info": "INFO", "information": "INFO", "notice": "INFO",
          "warn": "WARN", "warning": "WARN", "error": "ERROR", "err": "ERROR", "fatal": "FATAL",
          "critical": "FATAL", "crit": "FATAL", "panic": "FATAL", "emerg": "FATAL", "alert": "FATAL",
          "severe": "ERROR"}
# Stream labels a Loki pipeline puts a line's level in (Promtail / Alloy ``labels`` stages, Loki 3's
# ``detected_level``).
LEVEL_LABELS = ("level", "detected_level", "severity", "log_level", "lvl")
# A level word among a line's first four tokens (after a time or a bracketed thread, say): the
# line states its level already.
_STATED = re.compile(r"^\s*(?:\S+\s+){0,3}\[?(?:" + "|".join(sorted(_NAMES, key=len, reverse=True)) + r")\b",
                     re.IGNORECASE)


def level_name(*, text: object = None, number: object = None) -> str | None:
    """The level a record gives, as one upper-case word: its text (``Error``, ``warning``, ``E``
    not) when it names one, else its OpenTelemetry severity number; None when neither does."""
    if isinstance(text, str) and (named := _NAMES.get(text.strip().lower())):
        return named
    if isinstance(number, str) and number.startswith("SEVERITY_NUMBER_"):  # the enum's name (protobuf JSON allows it)
        return _NAMES.get(number.removeprefix("SEVERITY_NUMBER_").rstrip("0123456789").lower())
    try:
        value = int(number) if isinstance(number, (int, str)) and not isinstance(number, bool) else 0
    except ValueError:
        value = 0
    return next((name for floor, name in _BY_NUMBER if value >= floor), None) if 1 <= value <= 24 else None


def line_with_level(message: str | None, level: str | None) -> str | None:
    """``message`` with ``level`` in front (``ERROR payment declined``), unless there is no level,
    the line states one already, or it is a JSON document."""
    if message is None or level is None or message.lstrip().startswith("{") or _STATED.match(message):
        return message
    return f"{level} {message}"
