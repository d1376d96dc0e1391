"""How far the index's first candidate can be trusted: ``answer_confidence``.

An answer is ``"high"`` when its candidate scored at least ``RankWeights.confident_score``
in the usual scoring and leads its first rival (the best candidate of another service or
node: a service's own pods are not rivals) by at least ``RankWeights.confident_margin``;
``"low"`` when it scored less, led by less, or when the candidates come from the relaxed
second scoring (nothing passed the usual thresholds); and ``None`` when there is no candidate
at all. The score sums a candidate's evidence over the modalities, so a weak first candidate is
one backed by a single modest anomaly (round 16: on the tuning sets of then, every wrong first
candidate scored below 3.0). On crowded days (faults minutes apart, the simulator's packed
view) a strong wrong first candidate comes with a rival about as strong: the lead tells them
apart (docs/real-data.md, round 18).
"""
from __future__ import annotations

from collections.abc import Sequence

from index.models import Candidate, Confidence
from index.params import RankWeights
from rca.system import SystemSpec


def first_rival(candidates: Sequence[Candidate], *, system: SystemSpec) -> Candidate | None:
    """The first candidate of another service or node than ``candidates[0]``'s (its own pods are no rivals)."""
    if not candidates:
        return None
    owner = system.service_of(candidates[0].component)
    return next((c for c in candidates[1:] if system.service_of(c.component) != owner), None)


def answer_confidence(candidates: Sequence[Candidate], *, relaxed: bool, weights: RankWeights,
                      system: SystemSpec) -> Confidence | None:
    """The confidence of an answer naming ``candidates[0]`` (None: no candidate, no answer to trust)."""
    if not candidates:
        return None
    first = candidates[0]
    if relaxed or first.score < weights.confident_score:
        return "low"
    rival = first_rival(candidates, system=system)
    if rival is not None and first.score - rival.score < weights.confident_margin:
        return "low"
    return "high"
