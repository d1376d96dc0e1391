"""How far the index's first candidate can be trusted: ``answer_confidence``.

An answer is ``"high"`` when its candidate scored at least ``RankWeights.confident_score``
in the usual scoring, ``"low"`` when it scored less or when the candidates come from the
relaxed second scoring (nothing passed the usual thresholds), and ``None`` when there is no
candidate at all. The score sums a candidate's evidence over the modalities, so a weak first
candidate is one backed by a single modest anomaly: on the tuning sets (Nezha
OnlineBoutique 2022-08-22, the simulator's seeds 101-104; docs/real-data.md, round 16)
every first candidate that was wrong scored below 3.0, and every one at 3.0 or above was
right.
"""
from __future__ import annotations

from collections.abc import Sequence

from index.models import Candidate, Confidence
from index.params import RankWeights


def answer_confidence(candidates: Sequence[Candidate], *, relaxed: bool, weights: RankWeights) -> Confidence | None:
    """The confidence of an answer naming ``candidates[0]`` (None: no candidate, no answer to trust)."""
    if not candidates:
        return None
    if relaxed or candidates[0].score < weights.confident_score:
        return "low"
    return "high"
