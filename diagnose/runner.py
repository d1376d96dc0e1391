"""Batch runs: many cases, resumable, with atomic appends and one run record per case.

- Answers go to a JSONL file, one line per finished case, appended with a single
  write + fsync; a torn last line (killed mid-write) is dropped on the next start, but
  only once every complete line has proved to be an answer line: a file that is not
  ours (``-o input.json`` for ``-i``) is refused untouched.
- Finished uuids are skipped, so a killed run resumes where it stopped.
- Each case also gets ``<runs_dir>/<uuid>.json`` (evidence, prompt, raw response,
  parsed answer, usage, timings, agreement flag), written atomically; a failed case
  gets one too (``status: failed``, with the replies and the repair turn it got).
- A failure of the model backend stops the batch at once: no further case starts
  (cases already in flight with ``concurrency > 1`` finish their current call).
- With ``concurrency > 1`` answers still go to the file in input order (a finished case
  waits for the earlier ones in flight), so a concurrent run writes the same file as a
  serial one.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from diagnose.cases import Case
from diagnose.pipeline import CaseFailed, case_failed
from diagnose.record import RunRecord
from rca.atomic import write_json_atomic
from rca.challenge import RuleVersion
from rca.errors import InputError, RcaError
from rca.llm.base import LLMError

log = logging.getLogger(__name__)


@dataclass
class RunSummary:
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    records: list[RunRecord] = field(default_factory=list)


class NotAnAnswerFile(InputError):
    """``--out`` names a file that does not hold answer lines; it is left untouched."""


# Every answer line starts so (Answer.to_submission puts uuid first): how a torn line of ours looks.
_ANSWER_PREFIX = b'{"uuid"'


def finished_uuids(out_path: Path) -> set[str]:
    """Uuids already answered in ``out_path``; a torn final line of ours is cut off the file.

    Every complete line is checked first: the file is modified only when it is an answer
    file, so a typo such as ``-o input.json`` costs nothing.
    """
    if not out_path.exists():
        return set()
    raw = out_path.read_bytes()
    complete, _, torn = raw.rpartition(b"\n") if b"\n" in raw else (b"", b"", raw)
    done: set[str] = set()
    for number, line in enumerate(complete.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            uuid = json.loads(line)["uuid"]
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise NotAnAnswerFile(f"{out_path}:{number}: not an answer line ({exc}); the file was left untouched: "
                                  "is --out the right file?") from exc
        done.add(uuid)
    if torn:
        if not torn.startswith(_ANSWER_PREFIX):
            raise NotAnAnswerFile(f"{out_path}: the last line is not an answer line ({torn[:40]!r}); "
                                  "the file was left untouched: is --out the right file?")
        keep = len(raw) - len(torn)
        log.warning("%s: dropping an incomplete last line (%d bytes) left by an interrupted run", out_path, len(torn))
        with open(out_path, "r+b") as handle:
            handle.truncate(keep)
    return done


class AnswerFile:
    """Append-only JSONL answers, safe to share between worker threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, record: dict) -> None:
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)


class OrderedAnswers:
    """Appends answers in the order of ``uuids`` whatever order the cases finish in: an answer
    waits until every earlier case has been answered or given up (``skip``)."""

    def __init__(self, file: AnswerFile, uuids: Sequence[str]) -> None:
        self._file = file
        self._order = list(uuids)
        self._next = 0
        self._held: dict[str, dict | None] = {}  # None: the case failed, nothing to write
        self._lock = threading.Lock()

    def append(self, uuid: str, answer: dict) -> None:
        self._settle(uuid, answer)

    def skip(self, uuid: str) -> None:
        self._settle(uuid, None)

    def _settle(self, uuid: str, answer: dict | None) -> None:
        with self._lock:
            self._held[uuid] = answer
            while self._next < len(self._order) and self._order[self._next] in self._held:
                ready = self._held.pop(self._order[self._next])
                self._next += 1
                if ready is not None:
                    self._file.append(ready)

    def flush(self) -> None:
        """Write what is still held (cases after one that never finished), in order."""
        with self._lock:
            for uuid in self._order[self._next:]:
                ready = self._held.pop(uuid, None)
                if ready is not None:
                    self._file.append(ready)
            self._next = len(self._order)


def run_cases(
    cases: Sequence[Case],
    *,
    diagnose_one: Callable[[Case], RunRecord],
    out_path: Path,
    runs_dir: Path,
    rules: RuleVersion,
    concurrency: int = 1,
    show_progress: bool = True,
) -> RunSummary:
    """Diagnose ``cases`` not yet answered in ``out_path``.

    A failed case is logged by uuid, keeps its run record and stays unanswered (retried next
    run). A backend failure stops the batch: it raises ``LLMError`` after the finished work
    is safe, naming the case and how many did not start.
    """
    summary = RunSummary()
    done = finished_uuids(out_path)
    todo = [c for c in cases if c.uuid not in done]
    summary.skipped = [c.uuid for c in cases if c.uuid in done]
    if summary.skipped:
        log.info("resuming: %d of %d cases already answered in %s", len(summary.skipped), len(cases), out_path)
    answers = OrderedAnswers(AnswerFile(out_path), [c.uuid for c in todo])
    stop = threading.Event()  # set by the first backend failure; checked before a case starts

    def finish(case: Case) -> RunRecord | None:
        if stop.is_set():
            return None
        try:
            record = diagnose_one(case)
        except RcaError as exc:
            failure = case_failed(case, exc)  # the CaseFailed itself, or one wrapping an agent mode's error
            write_json_atomic(runs_dir / f"{case.uuid}.json", failure.record.model_dump(mode="json"))
            if failure.backend_failed:
                stop.set()  # in the worker itself, before the next queued case can start
            answers.skip(case.uuid)
            if failure is exc:
                raise
            raise failure from exc
        write_json_atomic(runs_dir / f"{case.uuid}.json", record.model_dump(mode="json"))
        answers.append(case.uuid, record.final_answer().to_submission(rules=rules))
        return record

    backend_failure: tuple[str, CaseFailed] | None = None
    columns = (TextColumn("diagnose"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}"))
    try:
        with Progress(*columns, disable=not show_progress, transient=False) as progress:
            task = progress.add_task("", total=len(todo))
            with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
                futures = {pool.submit(finish, case): case for case in todo}
                for future in as_completed(futures):
                    case = futures[future]
                    if future.cancelled():
                        continue  # never started: the batch stopped
                    try:
                        record = future.result()
                    except CaseFailed as exc:
                        summary.failed[case.uuid] = str(exc)
                        if not exc.backend_failed:
                            log.error("case failed: %s (run record: %s)", exc, runs_dir / f"{case.uuid}.json")
                        elif backend_failure is None:  # said once, by the error that stops the batch
                            backend_failure = (case.uuid, exc)
                            pool.shutdown(wait=False, cancel_futures=True)
                    except RcaError as exc:
                        # One bad case must not lose the others; it stays unanswered and is retried next run.
                        log.error("%s failed: %s", case.uuid, exc)
                        summary.failed[case.uuid] = str(exc)
                    else:
                        if record is not None:
                            summary.done.append(case.uuid)
                            summary.records.append(record)
                    progress.update(task, advance=1, description=case.uuid)
    finally:
        answers.flush()  # answers held behind a case that never started (a stopped batch) or a bug
    if backend_failure is not None:
        stopped_at, stop_error = backend_failure
        unstarted = len(todo) - len(summary.done) - len(summary.failed)
        raise LLMError(f"batch stopped at case {stopped_at}: {stop_error.__cause__ or stop_error}; "
                       f"{len(summary.done)} answered this run (kept in {out_path}), {unstarted} not started; "
                       f"run record: {runs_dir / f'{stopped_at}.json'}; rerun to resume") from stop_error
    return summary
