"""The two published rule versions of the 2025 challenge, as data: what an answer must hold
and how much of it is scored.

early = the task statement; late = the submission README (see docs/scoring.md). One setting,
``[challenge] rules``, picks the version: the diagnoser shapes its answers from it (fields,
observation length) and the judge scores with it, so the two cannot drift apart.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rca.errors import InputError

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

    @property
    def has_time(self) -> bool:
        """Whether an answer carries the ``time`` field."""
        return "time" in self.required_fields


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


def rule_version(name: str) -> RuleVersion:
    try:
        return RULES[name]
    except KeyError:
        raise InputError(f"unknown rules {name!r}; expected one of {sorted(RULES)}") from None
