"""Batch runs: many cases, resumable, with atomic appends and one run record per case.

- Answers go to a JSONL file, one line per finished case, appended with a single
  write + fsync; a torn last line (killed mid-write) is dropped on the next start.
- Finished uuids are skipped, so a killed run resumes where it stopped.
- Each case also gets ``<runs_dir>/<uuid>.json`` (evidence, prompt, raw response,
  parsed answer, usage, timings, agreement flag), written atomically.
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
from diagnose.pipeline import CaseRecord
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
    records: list[CaseRecord] = field(default_factory=list)


def finished_uuids(out_path: Path) -> set[str]:
    """Uuids already answered in ``out_path``; a torn final line is cut off the file."""
    if not out_path.exists():
        return set()
    raw = out_path.read_bytes()
    if raw and not raw.endswith(b"\n"):
        keep = raw.rfind(b"\n") + 1
        log.warning("%s: dropping an incomplete last line (%d bytes) left by an interrupted run", out_path, len(raw) - keep)
        with open(out_path, "r+b") as handle:
            handle.truncate(keep)
        raw = raw[:keep]
    done: set[str] = set()
    for number, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            done.add(json.loads(line)["uuid"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise InputError(f"{out_path}:{number}: not an answer line ({exc}); fix or move the file") from exc
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


def run_cases(
    cases: Sequence[Case],
    *,
    diagnose_one: Callable[[Case], CaseRecord],
    out_path: Path,
    runs_dir: Path,
    rules: RuleVersion,
    concurrency: int = 1,
    show_progress: bool = True,
) -> RunSummary:
    summary = RunSummary()
    done = finished_uuids(out_path)
    todo = [c for c in cases if c.uuid not in done]
    summary.skipped = [c.uuid for c in cases if c.uuid in done]
    if summary.skipped:
        log.info("resuming: %d of %d cases already answered in %s", len(summary.skipped), len(cases), out_path)
    answers = AnswerFile(out_path)

    def finish(case: Case) -> CaseRecord:
        record = diagnose_one(case)
        write_json_atomic(runs_dir / f"{case.uuid}.json", record.to_json())
        answers.append(record.answer.to_submission(rules=rules))
        return record

    columns = (TextColumn("diagnose"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}"))
    with Progress(*columns, disable=not show_progress, transient=False) as progress:
        task = progress.add_task("", total=len(todo))
        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            futures = {pool.submit(finish, case): case for case in todo}
            for future in as_completed(futures):
                case = futures[future]
                try:
                    record = future.result()
                except LLMError:
                    # The backend itself is broken (unreachable, misconfigured): every
                    # further case would fail the same way, so stop; finished work is kept.
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
                except RcaError as exc:
                    # One bad case must not lose the others; it stays unanswered and is retried next run.
                    log.error("%s failed: %s", case.uuid, exc)
                    summary.failed[case.uuid] = str(exc)
                else:
                    summary.done.append(case.uuid)
                    summary.records.append(record)
                progress.update(task, advance=1, description=case.uuid)
    return summary
