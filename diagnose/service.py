"""The composition root of the diagnoser: one object that owns the index, the knowledge base
and the model backend, built the same way by the CLI, the demo, the benchmarks and the tests.

    with Diagnoser.from_settings(settings) as diagnoser:
        prepared = diagnoser.prepare(case)          # what the model will see; no model call
        record = diagnoser.diagnose(case)           # one case -> RunRecord
        summary = diagnoser.run(cases, out=path)    # a resumable batch with run records

The backend is opened lazily, so ``prepare`` (``--print-prompt``) never loads a model.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from types import TracebackType

from diagnose.cases import Case
from diagnose.pipeline import (
    CaseFailed,
    EvidenceSource,
    KnowledgeSource,
    PreparedCase,
    case_failed,
    diagnose_case,
    prepare_case,
)
from diagnose.record import RunRecord
from diagnose.runner import RunSummary, finished_uuids, run_cases
from diagnose.tools import RawTelemetry, TelemetrySource
from rca.atomic import write_json_atomic
from rca.challenge import rule_version
from rca.errors import RcaError
from rca.llm.base import LLMBackend, LLMError
from rca.settings import DiagnoseMode, Settings
from rca.system import system_from_settings

log = logging.getLogger(__name__)


class Prefetcher:
    """Prepares the cases of a batch ahead of their model calls, on one thread of its own.

    Case preparation (index query, Chroma retrieval, SOP checks, the prompt) needs no model,
    so the next ``ahead`` cases are prepared while the current ones are in the model; preparing
    on one thread keeps the index and the knowledge base to one caller at a time. A case whose
    preparation failed is prepared again by ``diagnose_case`` itself, which fails it the usual
    way (with its run record).
    """

    def __init__(self, prepare: Callable[[Case], PreparedCase], cases: Sequence[Case], *, ahead: int) -> None:
        self._prepare = prepare
        self._cases = list(cases)
        self._position = {case.uuid: i for i, case in enumerate(self._cases)}
        self._ahead = max(1, ahead)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prepare")
        self._futures: dict[str, Future[tuple[PreparedCase, float]]] = {}
        self._lock = threading.Lock()
        self._submitted = 0

    def _timed(self, case: Case) -> tuple[PreparedCase, float]:
        started = time.perf_counter()
        prepared = self._prepare(case)
        return prepared, time.perf_counter() - started

    def _submit_through(self, index: int) -> None:
        with self._lock:
            while self._submitted <= min(index, len(self._cases) - 1):
                case = self._cases[self._submitted]
                self._futures[case.uuid] = self._pool.submit(self._timed, case)
                self._submitted += 1

    def take(self, case: Case) -> tuple[PreparedCase | None, dict[str, float]]:
        """The prepared case (None when its preparation failed) and how long it took and was waited for."""
        index = self._position.get(case.uuid)
        if index is None:
            return None, {}
        # Queue this case and the next ones: they prepare while this one is in the model.
        self._submit_through(index + self._ahead)
        with self._lock:
            future = self._futures.pop(case.uuid)
        started = time.perf_counter()
        try:
            prepared, seconds = future.result()
        except RcaError as exc:
            log.debug("%s: preparation ahead failed (%s); the case prepares again and fails with its record",
                      case.uuid, exc)
            return None, {}
        return prepared, {"prepare_s": round(seconds, 3), "prepare_wait_s": round(time.perf_counter() - started, 3)}

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class Diagnoser:
    """Diagnoses cases over one evidence source, one knowledge source and one model backend."""

    def __init__(
        self,
        *,
        settings: Settings,
        evidence: EvidenceSource,
        knowledge: KnowledgeSource,
        llm: LLMBackend | None = None,
        telemetry: TelemetrySource | None = None,
    ) -> None:
        self.settings = settings
        self.evidence = evidence
        self.knowledge = knowledge
        self.telemetry = telemetry  # raw telemetry for the agent modes' tools
        self._llm = llm
        self._stack = ExitStack()
        self._llm_lock = threading.Lock()  # batch workers ask for the model at once: open it once

    @classmethod
    def from_settings(cls, settings: Settings, *,
                      case_windows: Sequence[tuple[datetime, datetime]] | None = None) -> Diagnoser:
        """The production wiring: the on-disk index, the Chroma knowledge base, the configured backend.

        ``case_windows``: the incident windows the index leaves out of each other's baselines;
        None reads them from the configured input file (every case window it holds), when it exists.
        """
        from diagnose.sources import IndexEvidence
        from knowledge.base import KnowledgeBase

        evidence = IndexEvidence.from_settings(settings, case_windows=case_windows)
        knowledge = KnowledgeBase.from_settings(settings)
        diagnoser = cls(settings=settings, evidence=evidence, knowledge=knowledge,
                        telemetry=RawTelemetry(settings.paths.data_dir, naming=system_from_settings(settings).trace))
        diagnoser._stack.callback(knowledge.close)  # the diagnoser owns what it opened
        return diagnoser

    @property
    def llm(self) -> LLMBackend:
        """The model backend, opened on first use and closed with the diagnoser."""
        with self._llm_lock:
            if self._llm is None:
                from rca.llm.factory import open_backend

                self._llm = self._stack.enter_context(open_backend(self.settings))
            return self._llm

    def __enter__(self) -> Diagnoser:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._stack.close()

    def prepare(self, case: Case) -> PreparedCase:
        """Candidates, SOPs and the prompt for ``case``, without calling the model."""
        return prepare_case(case, settings=self.settings, evidence=self.evidence, knowledge=self.knowledge)

    def diagnose(self, case: Case, *, mode: DiagnoseMode | None = None, prepared: PreparedCase | None = None) -> RunRecord:
        """One case through the model, in ``mode`` (default: the configured ``diagnose.mode``).

        ``prepared``: the pipeline's preparation of ``case``, done ahead (``Prefetcher``).
        The server's timings of the model calls (prefill and decode seconds, prompt tokens
        evaluated and taken from the cache) are added to the record's ``timings_s``.
        """
        settings = self.settings
        mode = mode or settings.diagnose.mode
        if mode == "pipeline":
            return diagnose_case(case, settings=settings, llm=self.llm, evidence=self.evidence,
                                 knowledge=self.knowledge, prepared=prepared)
        if self.telemetry is None:
            raise ValueError(f"mode {mode!r} needs raw telemetry for its tools; this Diagnoser was built without it")
        from diagnose.agents import open_investigation

        system = system_from_settings(settings)
        toolbox, ranked = open_investigation(case, settings=settings, evidence=self.evidence, knowledge=self.knowledge,
                                             telemetry=self.telemetry, system=system)
        temperature = settings.llm.temperature
        if mode == "react":
            from diagnose.react import run_react

            return run_react(case, toolbox=toolbox, ranked=ranked, llm=self.llm, knowledge=self.knowledge,
                             max_steps=settings.diagnose.react_max_steps, temperature=temperature,
                             rules=rule_version(settings.challenge.rules), system=system)
        from diagnose.team import run_team

        return run_team(case, toolbox=toolbox, ranked=ranked, llm=self.llm, knowledge=self.knowledge,
                        max_rounds=settings.diagnose.team_max_rounds, temperature=temperature,
                        rules=rule_version(settings.challenge.rules), system=system)

    def diagnose_adhoc(self, case: Case) -> RunRecord:
        """One case outside a batch; its run record goes to ``<runs_dir>/adhoc/<uuid>.json``, failed or not."""
        path = self.settings.paths.runs_dir / "adhoc" / f"{case.uuid}.json"
        try:
            record = self.diagnose(case)
        except RcaError as exc:
            failure = case_failed(case, exc)  # the CaseFailed itself, or one wrapping an agent mode's error
            write_json_atomic(path, failure.record.model_dump(mode="json"))
            if failure is exc:
                raise
            raise failure from exc
        write_json_atomic(path, record.model_dump(mode="json"))
        return record

    def run_adhoc(self, cases: Sequence[Case]) -> tuple[list[RunRecord], dict[str, str]]:
        """Cases one by one outside a batch: a failed case is named and the others still run;
        a backend failure stops at once (raises ``LLMError``)."""
        records: list[RunRecord] = []
        failed: dict[str, str] = {}
        for case in cases:
            try:
                records.append(self.diagnose_adhoc(case))
            except CaseFailed as exc:
                record_path = self.settings.paths.runs_dir / "adhoc" / f"{case.uuid}.json"
                if exc.backend_failed:
                    raise LLMError(f"{exc} (run record: {record_path})") from exc
                log.error("case failed: %s (run record: %s)", exc, record_path)
                failed[case.uuid] = str(exc)
        return records, failed

    def run(self, cases: Sequence[Case], *, out: Path, show_progress: bool = True) -> RunSummary:
        """A resumable batch: answers appended to ``out`` in input order, run records under
        ``<runs_dir>/<out stem>/``.

        One model and one knowledge base serve the whole batch. In pipeline mode the next
        cases are prepared while the current ones are in the model (``Prefetcher``), and
        ``[llm] concurrency`` cases are in the model at once: the embedded server has as many
        slots (``rca.llm.factory``), a remote endpoint gets as many requests.
        """
        settings = self.settings
        concurrency = max(1, settings.llm.concurrency)
        diagnose_one: Callable[[Case], RunRecord] = self.diagnose
        prefetcher: Prefetcher | None = None
        if settings.diagnose.mode == "pipeline":
            done = finished_uuids(out)
            prefetcher = Prefetcher(self.prepare, [c for c in cases if c.uuid not in done], ahead=concurrency)

            def diagnose_one(case: Case) -> RunRecord:
                assert prefetcher is not None
                prepared, seconds = prefetcher.take(case)
                record = self.diagnose(case, prepared=prepared)
                record.timings_s.update(seconds)
                return record
        try:
            summary = run_cases(
                cases, diagnose_one=diagnose_one, out_path=out, runs_dir=settings.paths.runs_dir / out.stem,
                rules=rule_version(settings.challenge.rules), concurrency=concurrency, show_progress=show_progress,
            )
        finally:
            if prefetcher is not None:
                prefetcher.close()
        if summary.failed:  # each was named with its error already; this is the count
            log.error("%d case(s) failed and stay unanswered: %s", len(summary.failed), ", ".join(summary.failed))
        return summary
