"""Prompt assembly: static instructions and SOP catalogue first, case evidence last.

The static block is byte-identical across cases so llama.cpp / vLLM reuse its KV cache
(prefix caching); only the tail after it is new for each case. The whole prompt is kept
under ``max_prompt_tokens`` by dropping the least important evidence first.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from diagnose.templates import render
from index.models import Candidate, EvidenceItem
from knowledge.retrieval import CatalogueEntry, RetrievedDoc
from knowledge.signatures import SignatureMatch
from rca.system import SystemSpec, spec_for
from rca.taxonomy import applicable_fault_types

# Conservative characters-per-token for English/KPI text with Qwen's tokenizer; the
# real count comes back in the usage of each call and is recorded.
CHARS_PER_TOKEN = 3.3

# Per candidate: fault types whose SOP signals best fit that candidate's own evidence.
RunbookMatches = dict[str, list[SignatureMatch]]


@dataclass(frozen=True)
class Prompt:
    messages: list[dict[str, str]]
    approx_tokens: int
    dropped_evidence: int
    dropped_sops: int

    def render(self) -> str:
        return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in self.messages)


def approx_tokens(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + 1


def catalogue_line(entry: CatalogueEntry) -> str:
    """One fault type in the prompt's catalogue: ``- type | levels | key metrics | signature``."""
    return f"- {entry.fault_type} | {'/'.join(entry.levels)} | {', '.join(entry.key_metrics)} | {entry.reason_template}"


def static_system_prompt(catalogue: Sequence[CatalogueEntry], *, system: SystemSpec | None = None) -> str:
    """The system message (``diagnose/prompts/system.md``): the system's paragraph, instructions and
    the fault catalogue, less the fault types that can hit nothing in this system (no JVM, no storage)."""
    spec = spec_for(system)
    possible = set(spec.possible_fault_types())
    return render("system", catalogue="\n".join(catalogue_line(e) for e in catalogue if e.fault_type in possible),
                  **spec.prompt_values())


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


def _candidate_block(rank: int, candidate: Candidate, max_items: int, matches: Sequence[SignatureMatch]) -> str:
    head = f"{rank}. {candidate.component} ({candidate.level}) anomaly score {candidate.score:.2f}"
    if matches:
        best = matches[0]
        head += f"; best SOP fit: {best.fault_type} {len(best.matched)}/{best.expected}"
    pods = _abnormal_pods(candidate)
    if pods:
        head += f"; abnormal pods: {', '.join(pods)}"
    lines = [head] + [f"   - {item.modality}: {item.text}" for item in shown_evidence(candidate, max_items)]
    if matches:
        lines.append("   SOP signals seen: " + "; ".join(m.render() for m in matches))
    return "\n".join(lines)


def _summary_line(candidate: Candidate, matches: Sequence[SignatureMatch]) -> str:
    fit = f"{matches[0].fault_type} fits {len(matches[0].matched)}/{matches[0].expected}" if matches else "no fault type fits"
    return f"- {candidate.component}: anomaly score {candidate.score:.2f}, {fit}"


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
) -> str:
    blocks = [f"Incident {uuid}, window {window} (UTC)."]
    if missing:
        blocks.append("Missing data: " + "; ".join(missing))
    # Runbook text goes before the candidates: a small model leans on whatever it read
    # last, and the last thing it reads should be this incident's own evidence.
    if sops and sop_chars > 0:
        blocks.append("Runbook excerpts retrieved for this evidence (background, not evidence):")
        blocks.extend(f"[{s.title}] {s.excerpt[:sop_chars].strip()}" for s in sops)
    blocks.append("Candidates, ranked by anomaly strength and call-graph position, with their evidence:")
    matches = runbook_matches or {}
    blocks.extend(_candidate_block(i + 1, c, evidence_per_candidate, matches.get(c.component, [])) for i, c in enumerate(candidates))
    # The last lines a small model reads weigh most: end on one line per candidate.
    blocks.append("In short:")
    blocks.extend(_summary_line(c, matches.get(c.component, [])) for c in candidates)
    if reading:
        blocks.append(reading)
    if choices:
        blocks.append("The evidence cannot yet separate these; decide between them:")
        blocks.extend(f"- {name}: {' or '.join(types)}" for name, types in choices.items())
        if distinctions:
            blocks.append("How the runbooks tell these apart (check them against the evidence lines above):")
            blocks.extend(f"- {line}" for line in distinctions)
        names = ", ".join(choices)
    else:
        names = ", ".join(c.component for c in candidates)
    blocks.append(
        f"Choose the root-cause component among: {names}. The reason is your own short sentence about this "
        "incident: fault type, then the anomalous KPI or log keyword. Reply with the JSON object only."
    )
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
    system: SystemSpec | None = None,
) -> Prompt:
    """Fit the case into ``max_tokens``: shrink SOP excerpts, then evidence lines per candidate.

    ``choices`` (component -> its open fault types) narrows the question at the end of the
    prompt to the rules' close calls; every candidate's evidence is still shown.
    """
    system_text = static_system_prompt(catalogue, system=system)
    budget = max_tokens - approx_tokens(system_text)
    full_evidence = max((len(c.evidence) for c in candidates), default=0)
    evidence_per_candidate = min(full_evidence, 4)
    sop_chars = 350
    sop_list = list(sops)
    while True:
        user = case_prompt_text(
            uuid=uuid, window=window, candidates=candidates, sops=sop_list,
            evidence_per_candidate=evidence_per_candidate, sop_chars=sop_chars, missing=missing,
            runbook_matches=runbook_matches, reading=reading, choices=choices, distinctions=distinctions,
        )
        if approx_tokens(user) <= budget:
            break
        if sop_chars > 200 and sop_list:
            sop_chars -= 200
        elif sop_list:
            sop_list.pop()
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
    )


def decision_schema(candidates: Sequence[str], *, with_reason: bool = True,
                    extra: Mapping[str, dict[str, Any]] | None = None,
                    fault_types: Mapping[str, Sequence[str]] | None = None) -> dict[str, Any]:
    """JSON schema of the model's reply.

    One branch per candidate: ``component`` is exactly that candidate and ``fault_type``
    one of the types that can happen to it (no JVM faults outside Java services, node
    faults only on nodes), so the grammar-constrained decoder cannot emit an impossible pair.
    Without ``with_reason`` (a confirmation turn follows and writes it) the reply is shorter.
    ``extra`` adds required fields after those (e.g. the team judge's ``verdict``).
    ``fault_types`` narrows a candidate's types further (the open ones, ``diagnose.reading``).
    """
    reason = {"type": "string", "minLength": 5, "maxLength": 160}
    fields = ["component", "fault_type", "reason"] if with_reason else ["component", "fault_type"]
    fields += list(extra or {})
    branches = [
        {
            "type": "object",
            "properties": {
                "component": {"type": "string", "const": name},
                "fault_type": {"type": "string", "enum": list((fault_types or {}).get(name)
                                                                  or applicable_fault_types(name))},
                **({"reason": reason} if with_reason else {}),
                **(extra or {}),
            },
            "required": fields,
            "additionalProperties": False,
        }
        for name in candidates
    ]
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def fault_type_schema(component: str) -> dict[str, Any]:
    """JSON schema of the confirmation turn: the component's fault type and the reason."""
    return {
        "type": "object",
        "properties": {
            "fault_type": {"type": "string", "enum": applicable_fault_types(component)},
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
