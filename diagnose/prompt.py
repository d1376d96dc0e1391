"""Prompt assembly: a byte-stable static prefix first, a compact per-case tail after it.

The system message (instructions, how a case reads, the fault catalogue) is byte-identical
for every case, so llama.cpp / vLLM keep its KV cache and evaluate only the case part
(``ServerTimings.prompt_cached`` shows it). The case part is the only prompt text paid for on
every call, so it has a designed budget (``CASE_TOKENS``): one line per candidate and
modality, rounded numbers, no repeated prose (the format is explained once, in the prefix).
When a case runs over, the least important text goes first: runbook excerpts, look-alike
notes, then evidence items per candidate.

Seconds a case, embedded 1.5B on 2 cores (measured here: prefill ~38 tok/s, decode ~11 tok/s):
``CASE_TOKENS`` 230 / 38 ~ 6 s, plus a ~16-token reply (component and fault type only) / 11
~ 1.5 s: under the 8 s a case of issue 27.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from diagnose.templates import render
from index.models import Candidate, EvidenceItem
from knowledge.retrieval import CatalogueEntry, RetrievedDoc
from knowledge.signatures import SignatureMatch
from rca.system import SystemSpec
from rca.timeutil import parse_utc

# Characters per token of a case part with Qwen's tokenizer (measured 2.9 on real and simulated
# cases: every digit is a token of its own); the real count comes back in the usage of each call.
CHARS_PER_TOKEN = 2.9

# The per-case budget, in approximate tokens of the user message: what the server evaluates
# on every call once the static prefix is cached (see the module docstring for the seconds).
CASE_TOKENS = 170
# Evidence items a candidate shows at most (grouped into one line per modality).
EVIDENCE_PER_CANDIDATE = 4
# Runbook excerpt characters per retrieved SOP in the case part; 0 leaves them out (the
# catalogue in the prefix and the look-alike notes carry the runbooks' knowledge).
SOP_CHARS = 0

# Per candidate: fault types whose SOP signals best fit that candidate's own evidence.
RunbookMatches = dict[str, list[SignatureMatch]]


@dataclass(frozen=True)
class Prompt:
    messages: list[dict[str, str]]
    approx_tokens: int
    dropped_evidence: int
    dropped_sops: int
    # Each candidate's number in the case part (``candidate_numbers``): the reply answers with it.
    numbers: dict[str, int] = field(default_factory=dict)

    def render(self) -> str:
        return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in self.messages)


def candidate_numbers(candidates: Sequence[Candidate]) -> dict[str, int]:
    """Each candidate's number in the case part (its rank, from 1): what the reply answers with."""
    return {c.component: i + 1 for i, c in enumerate(candidates)}


def approx_tokens(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + 1


def catalogue_line(entry: CatalogueEntry) -> str:
    """One fault type in the prompt's catalogue: ``- type | levels | key metrics | signature``."""
    return f"- {entry.fault_type} | {'/'.join(entry.levels)} | {', '.join(entry.key_metrics)} | {entry.reason_template}"


def static_system_prompt(catalogue: Sequence[CatalogueEntry], *, system: SystemSpec) -> str:
    """The system message (``diagnose/prompts/system.md``): the system's paragraph, instructions,
    how a case reads, and the fault catalogue, less the fault types that can hit nothing in this
    system (no JVM, no storage).

    It depends on nothing case-specific, so it is byte-identical for every case of a run: the
    prefix the server keeps cached.
    """
    possible = set(system.possible_fault_types())
    return render("system", catalogue="\n".join(catalogue_line(e) for e in catalogue if e.fault_type in possible),
                  **system.prompt_values())


def _abnormal_pods(candidate: Candidate) -> list[str]:
    """Pods named by a service candidate's evidence: how widely the service is hit."""
    if candidate.level != "service":
        return []
    prefix = candidate.component + "-"
    return sorted({i.component for i in candidate.evidence if i.component.startswith(prefix)})


def shown_evidence(candidate: Candidate, max_items: int) -> list[EvidenceItem]:
    """The evidence lines a candidate shows in the prompt: the strongest line of each modality
    first, then the strongest of the rest, in the candidate's own order.

    Why: log lines are where a language model reads more than the rules do (a runtime's own
    wording of an error the SOP keywords do not list), but they are rarely the strongest
    z-scores; ranked by strength alone they were cut whenever a candidate had many metric
    and trace anomalies, and the model never saw them.
    """
    items = list(candidate.evidence)
    if len(items) <= max_items:
        return items
    chosen: list[int] = []
    for modality in dict.fromkeys(item.modality for item in items):
        if len(chosen) < max_items:
            chosen.append(next(i for i, item in enumerate(items) if item.modality == modality))
    chosen += [i for i in range(len(items)) if i not in chosen][: max_items - len(chosen)]
    return [items[i] for i in sorted(chosen)]


_Z_SCORE = re.compile(r"\s*\(z=[^)]*\)|, z=[-\d.]+")
_RATIO = re.compile(r"\b(\d+(?:\.\d+)?(?:e[+-]?\d+)?)x\b")
_SCIENTIFIC = re.compile(r"\b\d+(?:\.\d+)?e\+\d+\b")
_ONSET = re.compile(r",? from \d\d:\d\d\b")


def _round_ratio(match: re.Match[str]) -> str:
    value = float(match.group(1))
    return f"{value:.0f}x" if value >= 10 else f"{value:.1f}x"


def compact_evidence(text: str, *, own: str | Sequence[str]) -> str:
    """An evidence line without what the prompt says elsewhere: the z-score (the order already
    ranks), the candidate's own name (the line sits under it), the onset (its head line has the
    first one; a digit is a token to Qwen's tokenizer, so a time costs six), and ratios rounded
    (``2.9e+02x`` -> ``290x``, ``39.8x`` -> ``40x``)."""
    text = _Z_SCORE.sub("", text)
    for name in (own,) if isinstance(own, str) else own:
        text = re.sub(rf" (?:on|to|from) {re.escape(name)}(?= |;|$)", "", text)
    text = _ONSET.sub("", text)
    text = _RATIO.sub(_round_ratio, text)
    return _SCIENTIFIC.sub(lambda m: f"{float(m.group(0)):.0f}", text).strip(" ,")


def _fits(matches: Sequence[SignatureMatch]) -> str:
    """Fault types by how many of their documented signals show, best first; what speaks against
    the best one. The signals themselves are the evidence lines below it, so they are not repeated."""
    best = matches[0]
    against = f" (against: {', '.join(best.contradicted)})" if best.contradicted else ""
    return "; ".join([f"{best.fault_type} {len(best.matched)}/{best.expected}{against}"]
                     + [f"{m.fault_type} {len(m.matched)}/{m.expected}" for m in matches[1:]])


def _onset(candidate: Candidate) -> datetime | None:
    """The first moment any of the candidate's evidence moved: where a cause precedes its victims."""
    onsets = [item.onset for item in candidate.evidence if item.onset is not None]
    return min(onsets) if onsets else None


def _minutes(onset: datetime, *, opens: datetime) -> str:
    """``+1 min`` / ``-34 min``: an onset against the moment the incident window opens. Why
    relative: a digit is a token to Qwen's tokenizer, so ``04:03`` costs five where ``+1`` costs
    two, and the window's own times need not be shown for the model to compare onsets."""
    minutes = round((onset - opens).total_seconds() / 60)
    return f"{minutes:+d} min"


def _head(rank: int, candidate: Candidate, *, pods: Sequence[str], opens: datetime | None) -> str:
    """``2. cartservice service 4.9, 2 pods, from -3 min``: rank, name, level, score, breadth
    (``pods``: the abnormal pods of a service), onset (against the window's start ``opens``;
    a clock time when the window is not a ``start to end`` pair)."""
    head = f"{rank}. {candidate.component} {candidate.level} {candidate.score:.1f}"
    if pods:
        head += f", {len(pods)} pod{'s' if len(pods) > 1 else ''}"
    onset = _onset(candidate)
    if onset is not None:
        head += f", from {_minutes(onset, opens=opens) if opens else f'{onset:%H:%M}'}"
    return head


def _candidate_block(rank: int, candidate: Candidate, max_items: int, matches: Sequence[SignatureMatch], *,
                     opens: datetime | None) -> str:
    """A contender in the case: a head line, its fits, one line per modality of evidence."""
    pods = _abnormal_pods(candidate)
    lines = [_head(rank, candidate, pods=pods, opens=opens)]
    if matches:
        lines.append(" fits: " + _fits(matches))
    # A service with one abnormal pod: its head line says so, and the evidence need not name the pod.
    own = (candidate.component, *pods) if len(pods) == 1 else (candidate.component,)
    by_modality: dict[str, list[str]] = {}
    for item in shown_evidence(candidate, max_items):
        by_modality.setdefault(item.modality, []).append(compact_evidence(item.text, own=own))
    lines += [f" {modality}: {'; '.join(texts)}" for modality, texts in by_modality.items()]
    return "\n".join(lines)


def _open_types(name: str, types: Sequence[str], *, system: SystemSpec) -> str:
    """A contender's open fault types; every type it can suffer said in two words instead of listed."""
    if len(types) > 3 and set(types) == set(system.applicable_fault_types(name)):
        return "any type"
    return ", ".join(types)


def _window_start(window: str) -> datetime | None:
    """The start of a ``2025-06-06T01:10:04Z to 2025-06-06T01:26:04Z`` window; None for another shape."""
    start, sep, _ = window.partition(" to ")
    try:
        return parse_utc(start) if sep else None
    except ValueError:
        return None


def case_prompt_text(
    *,
    uuid: str,
    window: str,
    candidates: Sequence[Candidate],
    sops: Sequence[RetrievedDoc],
    evidence_per_candidate: int,
    sop_chars: int,
    missing: Sequence[str] = (),
    runbook_matches: RunbookMatches | None = None,
    reading: str | None = None,
    choices: Mapping[str, Sequence[str]] | None = None,
    distinctions: Sequence[str] = (),
    system: SystemSpec,
) -> str:
    """The case part of the prompt; ``uuid`` is not shown (it tells the model nothing), nor the
    window's clock times (each candidate's onset is given against its start)."""
    blocks = [f"Gaps: {'; '.join(missing)}."] if missing else []
    # Runbook text goes before the candidates: a small model leans on whatever it read
    # last, and the last thing it reads should be this incident's own evidence.
    if sops and sop_chars > 0:
        blocks.append("Runbooks (background, not evidence):")
        blocks.extend(f"[{s.title}] {' '.join(s.excerpt[:sop_chars].split())}" for s in sops)
    matches = runbook_matches or {}
    ranks = candidate_numbers(candidates)  # one numbering for the candidates' lines and the question
    # Only the contenders are shown: a candidate the rules have ruled out is evaluated on every
    # call for nothing (the embedded model never chose one), and the case part is what a call pays for.
    contenders = [c for c in candidates if not choices or c.component in choices]
    opens = _window_start(window)
    blocks.extend(_candidate_block(ranks[c.component], c, evidence_per_candidate, matches.get(c.component, []),
                                   opens=opens)
                  for c in contenders)
    if reading:
        blocks.append(reading)
    if choices and distinctions:
        blocks.append("notes:")
        blocks.extend(f"- {line}" for line in distinctions)
    # Numbers, not names: each contender's head line names it. The open fault types stay, best
    # first: without them the 1.5B model chose a type from its own prior (12 of 24 tuning cases
    # changed type, 3 for the worse; docs/real-data.md, round 10).
    question = " or ".join(f"{ranks[name]} ({_open_types(name, types, system=system)})" for name, types in choices.items()) \
        if choices else " or ".join(str(ranks[c.component]) for c in contenders)
    blocks.append(f"Choose: {question}.")
    return "\n".join(blocks)


def build_prompt(
    *,
    catalogue: Sequence[CatalogueEntry],
    uuid: str,
    window: str,
    candidates: Sequence[Candidate],
    sops: Sequence[RetrievedDoc],
    max_tokens: int,
    missing: Sequence[str] = (),
    runbook_matches: RunbookMatches | None = None,
    reading: str | None = None,
    choices: Mapping[str, Sequence[str]] | None = None,
    distinctions: Sequence[str] = (),
    case_tokens: int = CASE_TOKENS,
    sop_chars: int = SOP_CHARS,
    system: SystemSpec,
) -> Prompt:
    """Fit the case part into ``case_tokens`` (and the whole prompt into ``max_tokens``): drop
    runbook excerpts, then look-alike notes, then evidence items per candidate.

    ``choices`` (component -> its open fault types) narrows the question at the end of the
    prompt to the rules' close calls; every candidate's evidence is still shown.
    """
    system_text = static_system_prompt(catalogue, system=system)
    budget = min(case_tokens, max_tokens - approx_tokens(system_text))
    full_evidence = max((len(c.evidence) for c in candidates), default=0)
    evidence_per_candidate = min(full_evidence, EVIDENCE_PER_CANDIDATE)
    sop_list = list(sops) if sop_chars > 0 else []
    notes = list(distinctions)
    while True:
        user = case_prompt_text(
            uuid=uuid, window=window, candidates=candidates, sops=sop_list,
            evidence_per_candidate=evidence_per_candidate, sop_chars=sop_chars, missing=missing,
            runbook_matches=runbook_matches, reading=reading, choices=choices, distinctions=notes, system=system,
        )
        if approx_tokens(user) <= budget:
            break
        if sop_list:
            sop_list.pop()
        elif len(notes) > 1:
            notes.pop()  # one note stays while evidence can still shrink: it answers the open question
        elif evidence_per_candidate > 3:
            evidence_per_candidate -= 1
        elif notes:
            notes.pop()
        elif evidence_per_candidate > 1:
            evidence_per_candidate -= 1
        else:
            break  # cannot shrink further; the usage record will show the overrun
    messages = [{"role": "system", "content": system_text}, {"role": "user", "content": user}]
    dropped_evidence = sum(max(0, len(c.evidence) - evidence_per_candidate) for c in candidates)
    return Prompt(
        messages=messages,
        approx_tokens=approx_tokens(system_text) + approx_tokens(user),
        dropped_evidence=dropped_evidence,
        dropped_sops=len(sops) - len(sop_list),
        numbers=candidate_numbers(candidates),
    )


def decision_schema(candidates: Sequence[str], *,
                    extra: Mapping[str, dict[str, Any]] | None = None,
                    fault_types: Mapping[str, Sequence[str]] | None = None,
                    numbers: Mapping[str, int] | None = None,
                    system: SystemSpec) -> dict[str, Any]:
    """JSON schema of the model's reply: the component (or its number) and its fault type, nothing else.

    One branch per candidate: ``component`` is exactly that candidate and ``fault_type``
    one of the types that can happen to it (no JVM faults outside Java services, node
    faults only on nodes), so the grammar-constrained decoder cannot emit an impossible pair.
    No free-text reason: the answer's reason and trace are built by code from the chosen
    candidate's evidence, and every reply token is a decode step (~90 ms on 2 cores).
    ``extra`` adds required fields after those (e.g. the team judge's ``verdict``).
    ``fault_types`` narrows a candidate's types further (the open ones, ``diagnose.reading``).
    ``numbers`` (candidate -> its number in the prompt): the reply names the ``candidate`` by
    number instead. Why: spelling a name out let the 1.5B model's prior for the name decide (it
    wrote "checkoutservice" for a victim caller whatever the evidence said; docs/real-data.md).
    ``system``: the system whose runtimes, storage and node names decide what can happen.
    """
    key = "candidate" if numbers else "component"
    fields = [key, "fault_type", *(extra or {})]
    branches = [
        {
            "type": "object",
            "properties": {
                key: {"type": "integer", "const": numbers[name]} if numbers else {"type": "string", "const": name},
                "fault_type": {"type": "string", "enum": list((fault_types or {}).get(name)
                                                                  or system.applicable_fault_types(name))},
                **(extra or {}),
            },
            "required": fields,
            "additionalProperties": False,
        }
        for name in candidates
    ]
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def fault_type_schema(component: str, *, system: SystemSpec) -> dict[str, Any]:
    """JSON schema of the confirmation turn: the component's fault type and the reason."""
    return {
        "type": "object",
        "properties": {
            "fault_type": {"type": "string", "enum": system.applicable_fault_types(component)},
            "reason": {"type": "string", "minLength": 5, "maxLength": 160},
        },
        "required": ["fault_type", "reason"],
        "additionalProperties": False,
    }


def fault_type_turn_text(candidate: Candidate, matches: Sequence[SignatureMatch], *, max_items: int = 10) -> str:
    """Second turn: all of the chosen component's evidence and its SOP signal check."""
    lines = [f"Now settle the fault type of {candidate.component}. All of its evidence:"]
    lines += [f"   - {item.modality}: {item.text}" for item in shown_evidence(candidate, max_items)]
    if matches:
        lines.append("SOP signals seen in this evidence, best fit first (k/n = documented signals seen; "
                     "against = evidence that fault would not produce):")
        lines += [f"   - {m.render()}" for m in matches]
    else:
        lines.append("No fault type's documented signals show in this evidence; judge from the key metrics.")
    lines.append(f"Choose the fault type of {candidate.component} that this evidence fits best; keep your first "
                 "choice unless the evidence favours another. Reply with JSON only: "
                 '{"fault_type": ..., "reason": one sentence: the fault type, then its key KPI or log keyword}.')
    return "\n".join(lines)
