"""One case, end to end: window -> candidates -> SOPs -> prompt -> LLM -> answer + run record."""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import TypeAdapter

from diagnose.answer import Answer, no_anomaly_answer
from diagnose.cases import Case
from diagnose.decide import DecisionOutcome, decide
from diagnose.prompt import Prompt, RunbookMatches, build_prompt, fault_type_turn_text
from diagnose.reading import (
    ReadingParams,
    RulesReading,
    contenders,
    open_fault_types,
    reading_text,
    rules_reading,
)
from diagnose.record import AgentCallRecord, PromptRecord, RunRecord, SopRecord, Usage
from diagnose.trace import build_trace
from index.models import Candidate, Confidence, ModalityStatus, WindowQueryResult
from index.query import ScoredWindow
from knowledge.retrieval import CatalogueEntry, RetrievedDoc
from knowledge.signatures import Observation, SignatureMatch
from rca.challenge import RuleVersion, rule_version
from rca.errors import BackendError, NoCandidates, RcaError
from rca.llm.base import LLMBackend, ServerTimings
from rca.settings import Settings
from rca.system import SystemSpec, system_from_settings
from rca.taxonomy import fault_types_named
from rca.timeutil import format_utc

log = logging.getLogger(__name__)


class EvidenceSource(Protocol):
    """Where candidates come from (the evidence index in production): one scoring of a window
    (``score``), read by the ranking, the agent tools and the case report alike."""

    def query(self, *, start: datetime, end: datetime, top_k: int) -> WindowQueryResult: ...

    def score(self, *, start: datetime, end: datetime) -> ScoredWindow: ...


class KnowledgeSource(Protocol):
    """Where SOPs come from (the Chroma knowledge base in production)."""

    def catalogue(self) -> list[CatalogueEntry]: ...

    def key_metrics(self, fault_type: str) -> list[str]: ...

    def retrieve(self, summary: str, *, hints: Sequence[str] = (), k: int = 3) -> list[RetrievedDoc]: ...

    def signature_matches(self, observations: Sequence[Observation], *, fault_types: Sequence[str]) -> list[SignatureMatch]: ...

    def distinctions(self, fault_types: Sequence[str]) -> list[str]: ...


def evidence_summary(candidates: Sequence[Candidate], *, per_candidate: int = 3, top: int = 2) -> tuple[str, list[str]]:
    """Text for SOP retrieval (strongest evidence of the leading candidates) and its keys as hints."""
    lines: list[str] = []
    hints: list[str] = []
    for candidate in candidates[:top]:
        for item in candidate.evidence[:per_candidate]:
            lines.append(f"{item.modality}: {item.text}")
            hints.append(item.key)
    return "\n".join(lines), list(dict.fromkeys(hints))


def one_level_per_service(candidates: Sequence[Candidate], *, system: SystemSpec) -> list[Candidate]:
    """Keep, for each service, only its best-ranked entry (the service or one of its pods);
    ``system`` names pods' services."""
    seen: set[str] = set()
    kept: list[Candidate] = []
    for candidate in candidates:
        family = system.service_of(candidate.component)
        if family not in seen:
            seen.add(family)
            kept.append(candidate)
    return kept


def runbook_matches(candidates: Sequence[Candidate], knowledge: KnowledgeSource, *,
                    per_candidate: int | None = 2, system: SystemSpec) -> RunbookMatches:
    """For each candidate, the fault types whose SOP signals its own evidence fits best
    (the best ``per_candidate`` of them; None: every type with a signal seen).

    Only fault types that can happen to the candidate (in ``system``) are checked. The check reports
    which signals were seen and which contradict; the model weighs them.
    """
    return {
        candidate.component: knowledge.signature_matches(
            candidate.evidence, fault_types=system.applicable_fault_types(candidate.component))[:per_candidate]
        for candidate in candidates
    }


def _answer_time(case: Case, chosen: Candidate | None) -> str:
    onsets = [i.onset for i in (chosen.evidence if chosen else []) if i.onset and case.start <= i.onset <= case.end]
    moment = min(onsets) if onsets else case.start
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _reason(decision_reason: str, fault_type: str, component: str, metrics: Sequence[str]) -> str:
    """Lead with fault type and key metrics so the first 20 words carry them; keep the model's words after."""
    head = f"{fault_type} on {component}"
    if metrics:
        head += f" ({', '.join(metrics)})"
    body = " ".join(decision_reason.split())
    if body.lower().startswith(fault_type):  # the model often restates the type; say it once
        body = body[len(fault_type):].lstrip(" :-,")
    if names_other_fault_types(body, fault_type):
        # A small model sometimes copies the prompt's list of open choices into its reason; a
        # reason that names faults other than the one answered explains nothing (and would
        # collect keywords it did not earn), so only the code-built head is kept.
        body = ""
    return f"{head}: {body}" if body else head


def names_other_fault_types(text: str, fault_type: str) -> list[str]:
    """Fault types other than ``fault_type`` that ``text`` names."""
    return [name for name in fault_types_named(text) if name != fault_type]


def _reason_metrics(fault_type: str, chosen: Candidate | None, knowledge: KnowledgeSource, limit: int = 4) -> list[str]:
    """Key names for the reason: the fault type's SOP key metrics that the chosen component's
    evidence shows (as a KPI, or quoted in a log or trace line, e.g. a JVM agent rule name),
    then its other anomalous KPIs; the SOP's lead metric when none show."""
    sop_metrics = knowledge.key_metrics(fault_type)
    evidence = chosen.evidence if chosen else []
    observed = list(dict.fromkeys(i.key for i in evidence if i.modality == "metric"))
    # A log item's text is cut in the middle to fit its pod and counts; its example line is whole.
    quoted = " ".join(i.example or i.text for i in evidence if i.modality != "metric").lower()
    shown = [m for m in sop_metrics if m in observed or m.lower() in quoted]
    ordered = shown + [m for m in observed if m not in sop_metrics]
    if not shown:
        ordered = sop_metrics[:1] + ordered
    return ordered[:limit]


class CaseFailed(RcaError):
    """One case could not be diagnosed; ``record`` is its run record as far as it got.

    The record keeps the prompt, the raw replies and the repair turn, which are exactly
    what is needed to see why the case failed.
    """

    def __init__(self, message: str, *, record: RunRecord, backend_failed: bool) -> None:
        super().__init__(message)
        self.record = record
        self.backend_failed = backend_failed  # the model backend itself failed: later cases would too


def _named(case: Case, exc: Exception) -> str:
    """The error's message, led by the case's uuid once (most messages already name it)."""
    text = str(exc)
    return text if text.startswith(f"{case.uuid}:") else f"{case.uuid}: {text}"


def case_failed(case: Case, exc: RcaError) -> CaseFailed:
    """A failure from outside the pipeline's own steps (an agent mode) as a ``CaseFailed`` with a minimal record."""
    if isinstance(exc, CaseFailed):
        return exc
    return CaseFailed(_named(case, exc), backend_failed=isinstance(exc, BackendError),
                      record=run_record(case, prepared=None, outcome=None, timings={}, error=exc))


def run_record(case: Case, *, prepared: PreparedCase | None, outcome: DecisionOutcome | None,
               timings: dict[str, float], answer: Answer | None = None, rules_answer: Answer | None = None,
               error: Exception | None = None, mode: Literal["pipeline", "react", "team"] = "pipeline",
               agent_calls: Sequence[AgentCallRecord] = ()) -> RunRecord:
    """The run record of ``case`` from what its diagnosis got to: the prepared case (candidates,
    SOPs, prompt, rules reading), the model's outcome, and the ``answer`` or the ``error``.

    The one mapping from the diagnosis to its record, for answered and failed cases and every mode;
    ``timings_s`` gets the server's timings of the model calls (prefill and decode seconds, prompt
    tokens evaluated and cached) beside ``timings``.
    """
    replies = outcome.replies if outcome is not None else []
    candidates = prepared.candidates if prepared else []
    reading = prepared.reading if prepared else None
    agreed = answer.component == candidates[0].component if answer and candidates else None
    return RunRecord(
        uuid=case.uuid, mode=mode, agent_calls=list(agent_calls),
        status="failed" if error is not None else "answered",
        error=f"{type(error).__name__}: {error}" if error is not None else None,
        window={"start": format_utc(case.start), "end": format_utc(case.end)},
        answer=answer,
        agreed_with_index=agreed,
        # An answer away from the index's first candidate has less evidence than the first's.
        confidence=None if agreed is None or prepared is None else prepared.confidence if agreed else "low",
        index_top=candidates[0].component if candidates else None,
        candidates=candidates,
        missing=prepared.missing if prepared else [],
        data_status=prepared.data_status if prepared else [],
        sops=[SopRecord(id=s.id, title=s.title, score=s.score) for s in prepared.sops] if prepared else [],
        signature_matches={name: [m.render() for m in found] for name, found in prepared.signature_matches.items()}
        if prepared else {},
        prompt=PromptRecord(messages=prepared.prompt.messages, approx_tokens=prepared.prompt.approx_tokens,
                            dropped_evidence=prepared.prompt.dropped_evidence,
                            dropped_sops=prepared.prompt.dropped_sops) if prepared else None,
        choices=prepared.choices if prepared else None,
        parameters=prepared.parameters if prepared else {},
        rules_answer=rules_answer,
        rules_fault_type=reading.fault_type if reading and rules_answer else None,
        rules_reading=TypeAdapter(RulesReading).dump_python(reading, mode="json") if reading and rules_answer else None,
        decision=outcome.decision if outcome else None,
        repaired=outcome.repaired if outcome else False,
        votes=outcome.votes if outcome else {},
        first_fault_type=outcome.first_fault_type if outcome else None,
        confirm_turn=outcome.confirm_turn if outcome else None,
        raw_responses=outcome.raw_responses if outcome else [],
        usage=Usage(calls=len(replies), prompt_tokens=sum(r.prompt_tokens for r in replies),
                    completion_tokens=sum(r.completion_tokens for r in replies),
                    llm_seconds=round(sum(r.latency_s for r in replies), 3),
                    model=replies[0].model if replies else None),
        timings_s={**timings, **ServerTimings.total(r.server_timings for r in replies)},
    )


def compose_answer(case: Case, *, candidates: Sequence[Candidate], component: str, fault_type: str,
                   model_reason: str, knowledge: KnowledgeSource, rules: RuleVersion) -> Answer:
    """The challenge answer for a chosen component and fault type: reason led by the fault type and
    the key metrics the evidence shows, onset time, and the trace of analyses behind it."""
    chosen = next(c for c in candidates if c.component == component)
    metrics = _reason_metrics(fault_type, chosen, knowledge)
    signature = next(iter(knowledge.signature_matches(chosen.evidence, fault_types=[fault_type])), None)
    return Answer(
        uuid=case.uuid,
        component=component,
        reason=_reason(model_reason, fault_type, component, metrics),
        time=_answer_time(case, chosen),
        reasoning_trace=build_trace(chosen=component, fault_type=fault_type, reason_metrics=metrics,
                                    candidates=candidates, signature=signature, rules=rules),
    )


def reading_of(candidates: Sequence[Candidate], matches: RunbookMatches, settings: Settings, *,
               system: SystemSpec) -> RulesReading:
    """What the rules alone would answer (the index's first candidate and its best SOP fit) and how sure.

    Recorded beside every model answer so benchmarks can measure the model's share of the decision.
    """
    return rules_reading(candidates, matches.get(candidates[0].component) or [], params=_reading_params(settings),
                         system=system)


def _reading_params(settings: Settings) -> ReadingParams:
    return ReadingParams(close_score_ratio=settings.diagnose.close_score_ratio,
                         close_fit_gap=settings.diagnose.close_fit_gap,
                         min_contenders=settings.diagnose.min_contenders)


def open_choices(candidates: Sequence[Candidate], fits: RunbookMatches, settings: Settings, *,
                 system: SystemSpec) -> dict[str, list[str]]:
    """The contenders and, for each, its open fault types (from all its SOP ``fits``, best first):
    the part of the decision the rules leave open."""
    params = _reading_params(settings)
    return {c.component: open_fault_types(c.component, fits[c.component], params=params, system=system)
            for c in contenders(candidates, params=params)}


def open_distinctions(choices: Mapping[str, Sequence[str]], knowledge: KnowledgeSource, *, limit: int) -> list[str]:
    """What the runbooks say separates the open fault types of each contender (look-alike notes),
    best-fitting types first, at most ``limit`` lines: the knowledge the model needs exactly
    where the SOP signal counts could not decide."""
    lines: list[str] = []
    for types in choices.values():
        lines += [line for line in knowledge.distinctions(list(types)[:3]) if line not in lines]
    return lines[:limit]


@dataclass
class PreparedCase:
    """Everything the model will see for a case, before any LLM call."""

    case: Case
    candidates: list[Candidate]
    missing: list[str]
    data_status: list[ModalityStatus]
    sops: list[RetrievedDoc]
    signature_matches: RunbookMatches
    prompt: Prompt
    timings_s: dict[str, float]
    reading: RulesReading
    parameters: dict[str, Any] = field(default_factory=dict)
    choices: dict[str, list[str]] | None = None  # decide_among = "contenders": component -> open fault types
    confidence: Confidence | None = None  # the index's, in its first candidate (index.confidence)


def prepare_case(case: Case, *, settings: Settings, evidence: EvidenceSource, knowledge: KnowledgeSource,
                 system: SystemSpec | None = None) -> PreparedCase:
    """Window -> ranked candidates -> SOPs for their evidence -> a prompt within budget.

    ``system``: the system under diagnosis (None: the one ``[system] file`` names); it decides
    pods' services, what each candidate can suffer and the prompt's system paragraph.
    """
    system = system_from_settings(settings) if system is None else system
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    wanted = settings.diagnose.top_candidates
    result = evidence.query(start=case.start, end=case.end, top_k=wanted * 4)
    ranked = (one_level_per_service(result.candidates, system=system) if settings.diagnose.one_level_per_service
              else result.candidates)
    candidates = ranked[:wanted]
    timings["index_s"] = round(time.perf_counter() - t0, 3)
    if not candidates:
        why = "; ".join(([result.empty_reason] if result.empty_reason else []) + result.data_gaps())
        raise NoCandidates(f"{case.uuid}: the index holds no candidates for {format_utc(case.start)}..{format_utc(case.end)}"
                           + (f" ({why})" if why else ""))

    t1 = time.perf_counter()
    summary, hints = evidence_summary(candidates)
    sops = knowledge.retrieve(summary, hints=hints, k=settings.knowledge.top_k)
    fits = runbook_matches(candidates, knowledge, per_candidate=None, system=system)  # checked once, for the prompt and the choices
    matches = {name: found[:2] for name, found in fits.items()}
    timings["retrieve_s"] = round(time.perf_counter() - t1, 3)

    window = f"{format_utc(case.start)} to {format_utc(case.end)}"
    reading = reading_of(candidates, matches, settings, system=system)
    choices = (open_choices(candidates, fits, settings, system=system) if settings.diagnose.decide_among == "contenders"
               else None)
    prompt = build_prompt(
        catalogue=knowledge.catalogue(), uuid=case.uuid, window=window, candidates=candidates,
        sops=sops, max_tokens=settings.diagnose.max_prompt_tokens, missing=result.data_gaps(brief=True),
        runbook_matches=matches, reading=reading_text(reading) if settings.diagnose.show_rules_reading else None,
        choices=choices,
        distinctions=open_distinctions(choices, knowledge, limit=settings.diagnose.max_distinctions) if choices else (),
        system=system,
    )
    return PreparedCase(case=case, candidates=candidates, missing=result.data_gaps(), data_status=result.data_status,
                        sops=sops, signature_matches=matches, prompt=prompt, timings_s=timings, reading=reading,
                        choices=choices, parameters={"index": result.parameters} if result.parameters else {},
                        confidence=result.confidence)


def rules_only_answer(prepared: PreparedCase, *, knowledge: KnowledgeSource, rules: RuleVersion) -> Answer:
    """The answer of the rules alone (index top-1 + its best SOP fit): the ablation beside every model answer."""
    reading = prepared.reading
    return compose_answer(prepared.case, candidates=prepared.candidates, component=reading.component,
                          fault_type=reading.fault_type, model_reason="", knowledge=knowledge, rules=rules)


def diagnose_case(
    case: Case,
    *,
    settings: Settings,
    llm: LLMBackend,
    evidence: EvidenceSource,
    knowledge: KnowledgeSource,
    prepared: PreparedCase | None = None,
    system: SystemSpec | None = None,
) -> RunRecord:
    """``prepared``: the case already prepared (a batch prepares the next case during this one's model call);
    ``system``: the system under diagnosis (None: the one ``[system] file`` names)."""
    system = system_from_settings(settings) if system is None else system
    t0 = time.perf_counter()
    try:
        if prepared is None:
            prepared = prepare_case(case, settings=settings, evidence=evidence, knowledge=knowledge, system=system)
    except NoCandidates as exc:
        # Nothing moved even against relaxed thresholds: that is the finding, and the case still gets its line.
        quiet = no_anomaly_answer(uuid=case.uuid, start=case.start, why=str(exc),
                                  rules=rule_version(settings.challenge.rules))
        return run_record(case, prepared=None, outcome=None, timings={"total_s": round(time.perf_counter() - t0, 3), "llm_s": 0.0},
                          answer=quiet)
    except RcaError as exc:
        raise CaseFailed(_named(case, exc), backend_failed=isinstance(exc, BackendError),
                         record=run_record(case, prepared=None, outcome=None, timings={}, error=exc)) from exc
    candidates, timings = prepared.candidates, prepared.timings_s
    t2 = time.perf_counter()
    choices = prepared.choices
    names = list(choices) if choices else [c.component for c in candidates]
    confirm = None
    if settings.diagnose.confirm_fault_type:
        def confirm(component: str) -> str:
            candidate = next(c for c in candidates if c.component == component)
            matches = knowledge.signature_matches(candidate.evidence,
                                                  fault_types=system.applicable_fault_types(component))
            return fault_type_turn_text(candidate, matches[:4])
    outcome = DecisionOutcome()
    try:
        decide(llm, prepared.prompt, names, samples=settings.diagnose.self_consistency,
               temperature=settings.llm.temperature, confirm=confirm, outcome=outcome, fault_types=choices,
               numbers=prepared.prompt.numbers, system=system)
    except RcaError as exc:
        timings["llm_s"] = round(time.perf_counter() - t2, 3)
        raise CaseFailed(_named(case, exc), backend_failed=isinstance(exc, BackendError),
                         record=run_record(case, prepared=prepared, outcome=outcome, timings=timings, error=exc)) from exc
    timings["llm_s"] = round(time.perf_counter() - t2, 3)

    decision = outcome.decision
    assert decision is not None  # decide() sets it or raises
    challenge = rule_version(settings.challenge.rules)
    answer = compose_answer(case, candidates=candidates, component=decision.component,
                            fault_type=decision.fault_type, model_reason=decision.reason, knowledge=knowledge,
                            rules=challenge)
    rules_answer = rules_only_answer(prepared, knowledge=knowledge, rules=challenge)
    timings["total_s"] = round(time.perf_counter() - t0, 3)
    agreed = decision.component == candidates[0].component
    log.info("%s -> %s (%s); index top %s; %s", case.uuid, decision.component, decision.fault_type, candidates[0].component, "agree" if agreed else "DISAGREE")
    return run_record(case, prepared=prepared, outcome=outcome, timings=timings, answer=answer,
                      rules_answer=rules_answer)
