"""The reasoning trace: the steps the pipeline actually took, each with its evidence.

Steps 1-3 are the analyses code ran for the window (metrics, call graph, log
templates); their observations are the strongest evidence lines found, preferring
those of the component the model chose. Then the SOP signal check of the chosen fault
type on the chosen component (what the model was shown), and last the model's decision.
Observations start with the KPI name, the call edge or the log line's own words (the log
step packs the words of several lines) and stay within the part the rule version scores
(``clip_observation``).
"""
from __future__ import annotations

from collections.abc import Sequence

from diagnose.answer import TraceStep, clip_observation
from index.models import Candidate, EvidenceItem
from knowledge.signatures import SignatureMatch
from preprocess.detect_log import log_words
from rca.challenge import RuleVersion

ANALYSES: tuple[tuple[str, str], ...] = (
    ("metric", "metric analysis: APM/infra/TiDB KPIs vs fault-free baseline"),
    ("trace", "trace analysis: call-graph edge latency and errors vs baseline"),
    ("log", "log search: Drain3 template bursts and new templates in window"),
)


def _items_for(modality: str, chosen: str, candidates: Sequence[Candidate]) -> list[EvidenceItem]:
    """Evidence of one modality: the chosen component's first, then the rest by strength."""
    own: list[EvidenceItem] = []
    others: list[EvidenceItem] = []
    for candidate in candidates:
        for item in candidate.evidence:
            if item.modality != modality:
                continue
            (own if candidate.component == chosen or item.component == chosen else others).append(item)
    return sorted(own, key=lambda i: -i.magnitude) + sorted(others, key=lambda i: -i.magnitude)


def _fits(text: str, *, rules: RuleVersion) -> bool:
    return clip_observation(text, rules=rules) == text


def _observation(items: list[EvidenceItem], *, rules: RuleVersion) -> str:
    """The first item's line, plus the keys of further items while they fit in the scored part."""
    text = items[0].text
    for extra in items[1:8]:
        if extra.key in text:
            continue
        candidate = f"{text}; {extra.key} {extra.direction}"
        if _fits(candidate, rules=rules):
            text = candidate
    return clip_observation(text, rules=rules)


def _log_observation(items: list[EvidenceItem], *, rules: RuleVersion) -> str:
    """The log lines' own words rather than their elided text: the first line's words with its
    count and pod, then for each further line its pod and the words not said yet, word by word
    while they fit in the scored part.

    An error line's cause may sit anywhere in it ("... rpc error: code = Unavailable desc = ...");
    dropping masks, numbers, punctuation and filler words (``log_words``) leaves room for the
    words a reader searches for, where cutting the line in the middle loses them.
    """
    said: set[str] = set()
    text = ""
    for item in items[:8]:
        if item.signal == "silent":
            if not text:
                text = clip_observation(item.text, rules=rules)
            continue
        words = [w for w in log_words(item.example) if w.lower() not in said]
        if not words:
            continue
        said.update(w.lower() for w in words)
        if not text:  # the strongest line: its words, then its count and pod, within the scored part
            text = clip_observation(f"{' '.join(words)} x{item.count} on {item.component}", rules=rules)
            continue
        lead = f"{text}; {item.component}:"
        fitting = 0
        while fitting < len(words) and _fits(f"{lead} {' '.join(words[:fitting + 1])}", rules=rules):
            fitting += 1
        if not fitting:
            break  # the scored part is full
        text = f"{lead} {' '.join(words[:fitting])}"
        if fitting < len(words):
            break
    return text


def _signature_observation(signature: SignatureMatch | None, *, fault_type: str, lead: str, rules: RuleVersion) -> str:
    """``<first signal seen>: <fault type> signals k/n (<the others>)``, or that none was seen
    (then led by ``lead``, the chosen component's strongest evidence key)."""
    if signature is None or not signature.matched:
        return clip_observation(f"{lead}: no documented {fault_type} signal in the evidence", rules=rules)
    first, *rest = signature.matched
    text = f"{first}: {fault_type} signals {len(signature.matched)}/{signature.expected}"
    if rest:
        text += f" ({', '.join(rest)})"
    if signature.contradicted:
        text += f"; against: {', '.join(signature.contradicted)}"
    return clip_observation(text, rules=rules)


def build_trace(*, chosen: str, fault_type: str, reason_metrics: Sequence[str], candidates: Sequence[Candidate],
                signature: SignatureMatch | None = None, rules: RuleVersion) -> list[TraceStep]:
    steps: list[TraceStep] = []
    for modality, action in ANALYSES:
        items = _items_for(modality, chosen, candidates)
        if not items:
            continue  # nothing anomalous of this kind: not evidence, so not a step
        observation = _log_observation(items, rules=rules) if modality == "log" else _observation(items, rules=rules)
        steps.append(TraceStep(step=len(steps) + 1, action=action, observation=observation))
    own = [i for c in candidates if c.component == chosen for i in c.evidence]
    if own:  # the check ran on the chosen component's evidence, whatever it found
        steps.append(TraceStep(step=len(steps) + 1, action=f"SOP signal check: {fault_type} runbook vs {chosen} evidence",
                               observation=_signature_observation(signature, fault_type=fault_type, lead=own[0].key, rules=rules)))
    verdict = f"{chosen}: {fault_type}"
    if reason_metrics:
        verdict += f" ({', '.join(reason_metrics)})"
    steps.append(TraceStep(step=len(steps) + 1, action="decision: LLM over ranked candidates and SOPs", observation=clip_observation(verdict, rules=rules)))
    return steps
