"""How the judge applies a rule version (``rca.challenge``): which part of a reason or an
observation is scored, and when an observation names a KPI.

The rule-version data itself lives in the kernel so that the diagnoser shapes its answers
from the same values; the judge keeps its own parser (``judge/validation.py``).
"""
from __future__ import annotations

import re

from rca.challenge import RuleVersion

# Early rules: "first reason only". A string may still list several reasons; these separate them.
_REASON_SEPARATORS = re.compile(r"[;；\n]")


def first_words(text: str, count: int) -> str:
    return " ".join(text.split()[:count])


def scored_reason(reason: str, rules: RuleVersion) -> str:
    """The part of a reason the rules score."""
    if rules.reason_words is not None:
        return first_words(reason, rules.reason_words)
    return _REASON_SEPARATORS.split(reason, maxsplit=1)[0].strip()


def scored_observation(observation: str, rules: RuleVersion) -> str:
    """The part of an observation the rules score."""
    if rules.observation_words is not None:
        return first_words(observation, rules.observation_words)
    if rules.observation_chars is not None:
        return observation[: rules.observation_chars]
    return observation


def _fuzzy_form(text: str) -> str:
    # Case and separators do not matter: "Pod CPU usage" names pod_cpu_usage.
    return " ".join(token for token in re.split(r"[^0-9a-z]+", text.lower()) if token)


def names_kpi(observation: str, kpi: str, rules: RuleVersion) -> bool:
    """Whether an observation names a KPI: exact name (late) or fuzzy (early)."""
    if rules.fuzzy_kpi_match:
        wanted = _fuzzy_form(kpi)
        return bool(wanted) and wanted in _fuzzy_form(observation)
    return kpi in observation
