"""The semantic reason step with the real embedding model (slow: loads the ONNX model)."""
from __future__ import annotations

import pytest

from judge.challenge import score_cases
from judge.groundtruth import TruthCase
from judge.validation import Answer
from rca.challenge import EARLY

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("reason, right", [
    ("CPU saturation on the pod", True),
    ("disk filled up on the node", False),
    ("network packets are lost", False),
])
def test_real_embedder_semantic_reason(reason: str, right: bool) -> None:
    from knowledge.embedding import load_embedder
    from rca.settings import EmbeddingSettings

    truth = TruthCase.model_validate({
        "uuid": "c1", "fault_type": "cpu stress", "instance": "emailservice", "key_metrics": [],
        "fault_description": ["high CPU utilization", "CPU saturation", "CPU overload", "CPU usage spike"],
    })
    answer = Answer(uuid="c1", component="emailservice", reason=reason, steps=())
    (outcome,) = score_cases([truth], {"c1": answer}, rules=EARLY, embedder=load_embedder(EmbeddingSettings()),
                             semantic_threshold=0.6)
    assert outcome.reason_keyword_right is False
    assert outcome.reason_semantic_right is right
