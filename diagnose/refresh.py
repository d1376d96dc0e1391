"""Bring the telemetry of a received case into the index: pull ``[sources]``, then build what changed.

An alert fires minutes before anyone has imported its telemetry. With ``[sources]`` configured,
``rca diagnose --listen`` does that import itself, for each case before it waits for the index
(``diagnose/receiver.py``): ``SourceRefresh`` pulls every configured server over the minutes the case
is scored against (its baseline, ``[index] baseline_minutes`` before its first minute, to its end; the
metrics also the two hours of older history the metric detector checks that baseline against) into
the data directory (``preprocess.formats.pull_sources``: pages already pulled are reused, so a case
close to the last one fetches little), then runs the nightly job for the CST days that range touches
(``index.build.run_nightly``: incremental, so only the partitions whose files changed are rebuilt). The
build waits for the index's writer lock: a timer's ``rca preprocess`` and the receiver take turns.

With no source and ``[diagnose] listen_index`` (telemetry that reaches the data directory by itself,
``rca import otlp --listen``), the same refresh pulls nothing and runs the build alone.

Nothing here stops a case: a source that fails, or a build that cannot run, is said in a WARNING and in
the returned ``Refreshed``, and the case goes on with what the index holds.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol

from index.build import run_nightly
from index.store import days_for_window
from preprocess import layout
from preprocess.baseline import window_first_minute
from preprocess.formats.pull_sources import Source, pull_sources
from rca.errors import RcaError
from rca.system import TraceNaming

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Refreshed:
    """What one refresh did: the range pulled, per source what came or why not, the index days built."""

    start: datetime
    end: datetime
    pulled: list[str] = field(default_factory=list)  # the formats imported
    failures: dict[str, str] = field(default_factory=dict)  # a source (or "index") that failed -> the reason
    losses: list[str] = field(default_factory=list)  # what a pull or an import could not have in full
    days: list[str] = field(default_factory=list)  # CST days the nightly job was run for
    written: int = 0  # partitions (re)built; 0 when the files had not changed

    @property
    def ok(self) -> bool:
        return not self.failures


class Refresh(Protocol):
    """What the receiver's worker asks before a case waits for the index: bring in ``[start, end]``, a case's
    window (the refresh reaches back its baseline itself)."""

    def __call__(self, *, start: datetime, end: datetime) -> Refreshed: ...


class MakeSources(Protocol):
    """The sources to pull over ``[start, end]``, the metrics' from ``metrics_start``
    (``preprocess.formats.pull_sources.configured_sources``)."""

    def __call__(self, *, start: datetime, end: datetime, metrics_start: datetime) -> list[Source]: ...


@dataclass(frozen=True)
class SourceRefresh:
    """Pull ``sources(...)`` into ``data_dir``, then build ``index_dir`` for the days of the range.

    ``baseline`` is how far before a window's first minute its scoring reads (``[index] baseline_minutes``):
    those minutes are pulled too; the metrics' also ``metric_history`` more (the metric detector's
    ``history_minutes``, the older minutes it checks that baseline against). Logs and traces are read that
    far back only where their baseline is thin, which a server that records all the time never leaves
    them: their hours of history are not pulled for each case. ``naming`` and ``detector_params`` are the index's
    own (the system's ``[traces]``, ``IndexParams.detector_params()``), so the partitions built here are the
    ones ``rca preprocess`` would build; ``workers``/``threads`` as ``[preprocess]``.
    """

    sources: MakeSources
    data_dir: Path
    index_dir: Path
    naming: TraceNaming
    baseline: timedelta
    metric_history: timedelta = timedelta(0)
    detector_params: Mapping[str, object] = field(default_factory=dict)
    workers: int = 1
    threads: int = 1

    def range_of(self, *, start: datetime, end: datetime) -> tuple[datetime, datetime]:
        """The minutes a window is scored against: its baseline, then the window (as ``index.query`` reads it)."""
        return window_first_minute(start) - self.baseline, end

    def __call__(self, *, start: datetime, end: datetime) -> Refreshed:
        first, last = self.range_of(start=start, end=end)
        # The range said, and indexed, is the widest one pulled, the metrics': the days it touches are built.
        widest = first - self.metric_history
        shown = f"{widest.isoformat()}..{last.isoformat()}"
        try:
            sources = self.sources(start=first, end=last, metrics_start=widest)
        except RcaError as exc:  # a preset that cannot be read: said, and nothing pulled
            log.warning("refresh %s: the sources cannot be pulled: %s", shown, exc)
            return Refreshed(widest, last, failures={"sources": str(exc)})
        pulled = pull_sources(sources, out=self.data_dir)
        for name, reason in pulled.failures.items():
            log.warning("refresh %s: %s not pulled: %s", shown, name, reason)
        for loss in pulled.losses:
            log.warning("refresh %s: LOST %s", shown, loss)
        done = Refreshed(widest, last, pulled=[imported.fmt for imported in pulled.imports],
                         failures=dict(pulled.failures), losses=pulled.losses)
        return self._build(done)

    def _build(self, done: Refreshed) -> Refreshed:
        """The nightly job for the range's days that have a day directory (none: no telemetry to index yet)."""
        available = set(layout.list_days(self.data_dir)) if self.data_dir.is_dir() else set()
        days = [day for day in days_for_window(done.start, done.end) if day in available]
        if not days:
            log.info("refresh %s..%s: no day directory under %s: nothing to index", done.start.isoformat(),
                     done.end.isoformat(), self.data_dir)
            return done
        try:
            outcomes = run_nightly(data_dir=self.data_dir, index_dir=self.index_dir, naming=self.naming, days=days,
                                   detector_params=self.detector_params, workers=self.workers, threads=self.threads,
                                   wait_for_lock=True)
        # An index of another version, a day directory gone, a disk full. Not ValueError: run_nightly raises it
        # for an unknown family, a bug here, which the worker logs with its traceback.
        except (RcaError, OSError) as exc:
            log.warning("refresh: the index %s was not built for %s: %s", self.index_dir, ", ".join(days), exc)
            return Refreshed(done.start, done.end, pulled=done.pulled, losses=done.losses, days=days,
                             failures={**done.failures, "index": str(exc)})
        failed = [f"{o.day} {o.family}: {'; '.join(o.errors)}" for o in outcomes if o.status == "failed"]
        for failure in failed:
            log.warning("refresh: partition not built: %s", failure)
        written = sum(o.status == "written" for o in outcomes)
        log.info("refresh %s..%s: pulled %s; index %s: %d partition(s) rebuilt", done.start.isoformat(),
                 done.end.isoformat(), ", ".join(done.pulled) or "nothing", ", ".join(days), written)
        failures = {**done.failures, **({"index": "; ".join(failed)} if failed else {})}
        return Refreshed(done.start, done.end, pulled=done.pulled, failures=failures, losses=done.losses, days=days,
                         written=written)
