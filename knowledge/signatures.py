"""Machine-checkable fault signatures: the ``signals`` of each SOP's front matter.

An SOP's prose says what a fault looks like ("`pod_cpu_usage` saturates, `rrt` rises, no
errors"). Its ``signals`` say the same in a form code can check against a candidate's
evidence lines, so the diagnoser can tell the model which runbooks the evidence fits
and which it contradicts. The check only reports; the model decides.

A signal is one or more clues separated by ``|`` (any of them counts), each
``<modality>:<pattern>[:<direction>]``:

* ``metric:pod_cpu_usage:up``: a metric evidence line whose KPI name matches the glob
  ``pod_cpu_usage`` and moved ``up`` (directions: up, down, silent; ``any`` or omitted
  accepts all);
* ``log:server misbehaving``: log evidence whose log line (the example the index quotes,
  not the rendered sentence) contains the phrase (case-insensitive) and burst or is new;
  ``log:silent`` matches a log stream that stopped, ``log:fell`` a template that stopped
  while its pod kept logging (a code path no longer reached);
* ``trace:<signal>``: trace evidence of that signal: ``latency`` or ``errors`` on calls
  into the component, ``calls_stopped`` (calls into it vanished), ``calls_dropped`` (the
  component stopped making some of its own calls while its demand held), ``fanout`` (the
  component's own calls to several services went wrong at once; a fan-out of errors also
  counts as ``errors``, one of latency as ``latency``), ``wait`` (calls to or from the
  component slow between the two sides of the call while the callee's own spans are not:
  its network, or its queue before a span opens; a wait also counts as ``latency``),
  ``inside`` (calls into the component slower inside its own spans: a latency that is not
  a wait, the component's own work slowed), ``stopped_after`` (the component's handlers
  stopped after one of its calls, into a service with no trouble of its own);
* a leading ``not`` makes the signal a contradiction: evidence the fault would not produce.

Clues match evidence data (``Observation``: the index's ``EvidenceItem``), never the
wording of its observation line, so rewording evidence cannot change a fit.
"""
from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, cast

from rca.errors import InputError

Modality = Literal["metric", "log", "trace"]
MODALITIES = ("metric", "log", "trace")
DIRECTIONS = ("up", "down", "silent", "any")
# The z at which an evidence line shows its signal fully; a line at z 5 (the detectors' usual
# threshold) shows it half. Why: a pod whose CPU rose 180x (z 50) and memory 1.3x (z 7) is a CPU
# stress, though the memory-stress signature counts as many signals seen.
FULL_Z = 10.0
# trace clue -> the words of the evidence line it points the reader to (its label in a fit).
TRACE_SIGNALS: dict[str, str] = {"latency": "p95", "errors": "errors", "calls_stopped": "calls stopped",
                                 "calls_dropped": "calls dropped", "wait": "between the spans",
                                 "fanout": "on calls from", "inside": "p95", "stopped_after": "stopped after"}
# Trace clues that read a narrower case of one evidence signal: ``inside`` is a ``latency`` line
# whose spans tell the callee's own time from the wait between the spans (``wait_share``).
NARROWED_TRACE_CLUES: dict[str, str] = {"inside": "latency"}
# ``inside`` needs most of the added time inside the callee's spans: a latency line can also be a
# wait the ranker did not read as the edge's hop (small beside a larger wait elsewhere).
INSIDE_MAX_WAIT_SHARE = 0.5


class SignalError(InputError):
    """A signal string that does not follow the grammar above."""


class Observation(Protocol):
    """What a signal is checked against (``index.models.EvidenceItem`` satisfies it)."""

    # Read-only members, so that models with narrower (Literal) field types satisfy it too.
    @property
    def modality(self) -> str: ...
    @property
    def signal(self) -> str: ...  # level | silent | burst | new_template | fell | latency | errors | calls_stopped | ...
    @property
    def key(self) -> str: ...
    @property
    def direction(self) -> str: ...
    @property
    def example(self) -> str: ...  # log: the quoted log line
    @property
    def fanout_signal(self) -> str | None: ...  # fanout: what the caller pod's calls showed (errors | latency)
    @property
    def wait_share(self) -> float | None: ...  # trace latency: share of the added time between the spans
    @property
    def magnitude(self) -> float: ...  # robust z against the baseline; 0 = not measured
    @property
    def own_share(self) -> float: ...  # the share the component's own fault explains (1: all of it)


@dataclass(frozen=True)
class Clue:
    """One checkable observation: modality, pattern and (for metrics) direction."""

    modality: Modality
    pattern: str
    direction: str = "any"

    @classmethod
    def parse(cls, text: str, *, spec: str) -> Clue:
        modality, _, rest = text.strip().partition(":")
        if modality not in MODALITIES or not rest.strip():
            raise SignalError(f"{spec!r}: expected '[not ]<metric|log|trace>:<pattern>[:<direction>]'")
        pattern, direction = rest, "any"
        if modality == "metric":
            pattern, _, direction = rest.partition(":")
            direction = direction.strip() or "any"
            if direction not in DIRECTIONS:
                raise SignalError(f"{spec!r}: direction must be one of {', '.join(DIRECTIONS)}")
        if modality == "trace" and pattern.strip() not in TRACE_SIGNALS:
            raise SignalError(f"{spec!r}: a trace clue names a signal: one of {', '.join(TRACE_SIGNALS)}")
        return cls(modality=cast(Modality, modality), pattern=pattern.strip(), direction=direction)

    def matches(self, item: Observation) -> bool:
        if item.modality != self.modality:
            return False
        if self.modality == "metric":
            direction_ok = self.direction == "any" or item.direction == self.direction
            return direction_ok and fnmatch.fnmatchcase(item.key, self.pattern)
        if self.modality == "trace":
            if self.pattern in NARROWED_TRACE_CLUES:  # only where the spans tell the two apart
                return (item.signal == NARROWED_TRACE_CLUES[self.pattern] and item.wait_share is not None
                        and item.wait_share < INSIDE_MAX_WAIT_SHARE)
            # A fan-out is the component's own calls going wrong at once: a fan-out of errors
            # counts as errors, a fan-out of latency as latency (a CPU-starved or delayed pod
            # measures every call it makes as slow). A wait is latency too: the time between a
            # call's two spans is a delayed network's, but also a starved callee's queue before
            # its span opens (on Nezha's tuning day a CPU-stressed currencyservice shows it).
            return item.signal == self.pattern or (
                self.pattern in ("errors", "latency") and item.signal == "fanout" and item.fanout_signal == self.pattern
            ) or (self.pattern == "latency" and item.signal == "wait")
        if self.pattern in ("silent", "fell"):
            return item.signal == self.pattern
        # A line that stopped is the opposite of a line that appeared: phrases match bursts and new lines.
        return item.signal in ("burst", "new_template") and self.pattern.lower() in item.example.lower()

    def label(self) -> str:
        if self.modality == "metric":
            return self.pattern if self.direction == "any" else f"{self.pattern} {self.direction}"
        if self.modality == "trace":
            return f"trace '{TRACE_SIGNALS[self.pattern]}'"
        return f"{self.modality} '{self.pattern}'"


@dataclass(frozen=True)
class Signal:
    """One expected (or, negated, contradicting) sign of a fault: any of its clues."""

    clues: tuple[Clue, ...]
    negated: bool = False

    @classmethod
    def parse(cls, spec: str) -> Signal:
        text = spec.strip()
        negated = text.lower().startswith("not ")
        if negated:
            text = text[4:]
        clues = tuple(Clue.parse(part, spec=spec) for part in text.split("|"))
        return cls(clues=clues, negated=negated)

    def seen(self, evidence: Sequence[Observation]) -> Clue | None:
        """The first clue that some evidence line shows, if any."""
        return next((clue for clue in self.clues if any(clue.matches(item) for item in evidence)), None)


@dataclass(frozen=True)
class SignatureMatch:
    """How well one fault type's signals fit one component's evidence."""

    fault_type: str
    matched: tuple[str, ...]  # labels of expected signals seen
    expected: int  # number of expected (non-negated) signals
    contradicted: tuple[str, ...]  # labels of contradicting signals seen
    # Position, in the evidence as given (strongest first), of the strongest line an expected
    # signal explains; ties in ``score`` go to the fit that explains the stronger evidence.
    lead: int = 0
    # Sum over the expected signals seen of how strongly the evidence shows them (each at most
    # 1, see ``FULL_Z``); None: every one counts 1.
    support: float | None = None

    @property
    def score(self) -> float:
        """Signals seen minus contradictions, over the square root of signals expected.

        Between a pure share (which favours terse signatures: 2/2 beats 4/5) and a pure
        count (which favours long ones).
        """
        if not self.expected:
            return 0.0
        seen = len(self.matched) if self.support is None else self.support
        return (seen - len(self.contradicted)) / math.sqrt(self.expected)

    def render(self) -> str:
        text = f"{self.fault_type} {len(self.matched)}/{self.expected}"
        if self.matched:
            text += f" ({', '.join(self.matched)})"
        if self.contradicted:
            text += f", against: {', '.join(self.contradicted)}"
        return text


def parse_signals(specs: Iterable[str]) -> list[Signal]:
    return [Signal.parse(spec) for spec in specs]


def _strength(item: Observation) -> float:
    """How fully one evidence line shows a signal: a z of ``FULL_Z`` or more counts whole, a weaker
    line in proportion; a line without a measured z counts whole. Only the share the component's own
    fault explains counts: a callee's traffic that fell because its callers stopped calling is no
    sign of the callee's fault."""
    return (1.0 if item.magnitude <= 0 else min(1.0, item.magnitude / FULL_Z)) * item.own_share


def match_signature(fault_type: str, signals: Sequence[Signal], evidence: Sequence[Observation]) -> SignatureMatch:
    matched: list[str] = []
    contradicted: list[str] = []
    lead = len(evidence)
    support = 0.0
    for signal in signals:
        clue = signal.seen(evidence)
        if clue is None:
            continue
        (contradicted if signal.negated else matched).append(clue.label())
        if not signal.negated:
            showing = [i for i, item in enumerate(evidence) if any(c.matches(item) for c in signal.clues)]
            lead = min(lead, showing[0])
            support += max(_strength(evidence[i]) for i in showing)
    expected = sum(1 for s in signals if not s.negated)
    return SignatureMatch(fault_type=fault_type, matched=tuple(matched), expected=expected,
                          contradicted=tuple(contradicted), lead=lead, support=round(support, 6))


def rank_signatures(signatures: Mapping[str, Sequence[Signal]], evidence: Sequence[Observation], *,
                    fault_types: Sequence[str]) -> list[SignatureMatch]:
    """``fault_types`` (those with signals) ranked by fit to ``evidence``, best first.

    ``evidence`` comes strongest first (a candidate's own order). Equal scores go to the fit
    that explains the stronger evidence line (``lead``), then keep the order of ``fault_types``;
    a type with no matched signal is left out.
    """
    matches = [match_signature(ft, signatures[ft], evidence) for ft in fault_types if signatures.get(ft)]
    kept = [m for m in matches if m.matched]
    return sorted(kept, key=lambda m: (-m.score, m.lead))
