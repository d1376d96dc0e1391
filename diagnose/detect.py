"""Does a window hold a fault at all? (``diagnose --detect``)

Two opinions: the evidence index's strongest candidate score against a floor calibrated
on tuning seeds (``[diagnose] detect_floor``; ``rca bench calibrate-detect``), and, when
the score falls within ``detect_margin`` of the floor and a model is at hand, the
model's judgement of the evidence (one short call, JSON schema). Far above the floor is a
fault and far below is quiet without asking anyone.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from diagnose.cases import Case
from diagnose.pipeline import EvidenceSource, one_level_per_service
from diagnose.templates import render
from index.models import Candidate
from rca.llm.base import LLMBackend, LLMError
from rca.settings import Settings
from rca.system import system_from_settings
from rca.timeutil import format_utc

SCHEMA = {
    "type": "object",
    "properties": {"fault": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["fault", "reason"],
    "additionalProperties": False,
}


class Detection(BaseModel):
    model_config = ConfigDict(frozen=True)

    uuid: str
    fault: bool
    score: float  # the strongest candidate's score (0 when the index found nothing)
    floor: float
    decided_by: Literal["evidence", "model"]
    model_fault: bool | None = None
    reason: str = ""
    top: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


def _evidence_lines(candidates, limit: int = 3, per: int = 3) -> str:
    lines = []
    for c in candidates[:limit]:
        lines.append(f"- {c.component} (score {c.score:.2f})")
        lines += [f"    {e.text}" for e in c.evidence[:per]]
    return "\n".join(lines) or "- nothing anomalous"


class DetectReply(BaseModel):
    fault: bool
    reason: str = ""


def detect_case(case: Case, *, settings: Settings, evidence: EvidenceSource,
                model: Callable[[], LLMBackend] | None) -> Detection:
    """Fault or not for ``case``'s window (see the module doc); ``model`` opens the backend
    only when the evidence is too close to the floor to decide alone."""
    result = evidence.query(start=case.start, end=case.end, top_k=settings.diagnose.top_candidates * 4)
    ranked = one_level_per_service(result.candidates, system=system_from_settings(settings))
    return detect_from_candidates(case, ranked, settings=settings, model=model)


def detect_from_candidates(case: Case, candidates: Sequence[Candidate], *, settings: Settings,
                           model: Callable[[], LLMBackend] | None) -> Detection:
    """``detect_case`` on candidates already ranked for the window (one level per service)."""
    t0 = time.perf_counter()
    cfg = settings.diagnose
    score = candidates[0].score if candidates else 0.0
    top = candidates[0].component if candidates else None
    floor = cfg.detect_floor
    near = floor * (1 - cfg.detect_margin) <= score <= floor * (1 + cfg.detect_margin)
    if model is None or not near:
        return Detection(uuid=case.uuid, fault=score >= floor, score=round(score, 3), floor=floor,
                         decided_by="evidence", top=top, reason=f"strongest evidence {score:.2f} vs floor {floor:.2f}",
                         seconds=round(time.perf_counter() - t0, 3))
    prompt = render("detect", window=f"{format_utc(case.start)} to {format_utc(case.end)}", score=f"{score:.2f}",
                    floor=f"{floor:.2f}", evidence=_evidence_lines(candidates),
                    **system_from_settings(settings).prompt_values())
    reply = model().chat([{"role": "user", "content": prompt}], json_schema=SCHEMA, schema_name="detection",
                     temperature=0.0, max_tokens=80)
    try:
        parsed = DetectReply.model_validate(json.loads(reply.text))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise LLMError(f"{case.uuid}: detection reply is not the requested JSON ({exc})") from exc
    return Detection(uuid=case.uuid, fault=parsed.fault, score=round(score, 3), floor=floor, decided_by="model",
                     model_fault=parsed.fault, reason=parsed.reason[:200], top=top,
                     prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
                     seconds=round(time.perf_counter() - t0, 3))
