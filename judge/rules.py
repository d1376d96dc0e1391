"""The two published rule versions of the 2025 challenge, and everything that differs between them.

early = the task statement; late = the submission README (see docs/scoring.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

RulesName = Literal["early", "late"]


@dataclass(frozen=True)
class RuleVersion:
    name: RulesName
    required_fields: frozenset[str]
    # Late rules reject any other field (HTTP 400); early rules only warn.
    extra_fields_are_errors: bool
    # Early rules accept a list of components/reasons and score the first one.
    lists_allowed: bool
    reason_words: int | None  # None: the first reason, whole
    observation_chars: int | None
    observation_words: int | None
    # Whose traces count for the mean path length: component right (late) or component and reason right (early).
    efficiency_needs_reason: bool
    fuzzy_kpi_match: bool


EARLY = RuleVersion(
    name="early",
    required_fields=frozenset({"uuid", "component", "reason", "time", "reasoning_trace"}),
    extra_fields_are_errors=False,
    lists_allowed=True,
    reason_words=None,
    observation_chars=100,
    observation_words=None,
    efficiency_needs_reason=True,
    fuzzy_kpi_match=True,
)
LATE = RuleVersion(
    name="late",
    required_fields=frozenset({"uuid", "component", "reason", "reasoning_trace"}),
    extra_fields_are_errors=True,
    lists_allowed=False,
    reason_words=20,
    observation_chars=None,
    observation_words=20,
    efficiency_needs_reason=False,
    fuzzy_kpi_match=False,
)
RULES: dict[str, RuleVersion] = {"early": EARLY, "late": LATE}

# Early rules: "first reason only". A string may still list several reasons; these separate them.
_REASON_SEPARATORS = re.compile(r"[;；\n]")


def rule_version(name: str) -> RuleVersion:
    try:
        return RULES[name]
    except KeyError:
        raise ValueError(f"unknown rules {name!r}; expected one of {sorted(RULES)}") from None


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
