"""The scoring worker: a thread that takes queued submissions from the database and scores them.

The database is the queue, so nothing accepted lives only in memory: a submission is ``queued``
until a worker claims it (``scoring``, with the claim time) and ``done`` / ``error`` once its
result is written in the same transaction that ends the claim. A worker that dies mid-scoring
leaves the row in ``scoring``; at start the server queues every such row again (one server per
database), and while running it queues again any claim older than ``scoring_lease_s``.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

from sqlalchemy import Engine

from judge.embedding import TextEmbedder
from judge.server import store
from judge.server.quota import Clock
from judge.server.scoring import ContestSpec, contest_spec, score_answers
from rca.errors import RcaError
from rca.settings import JudgeServerSettings, JudgeSettings

log = logging.getLogger(__name__)

EmbedderFactory = Callable[[], TextEmbedder]


class ScoringWorker:
    def __init__(self, engine: Engine, *, server: JudgeServerSettings, judge: JudgeSettings, clock: Clock,
                 embedder_factory: EmbedderFactory | None) -> None:
        self._engine = engine
        self._server = server
        self._judge = judge
        self._clock = clock
        self._embedder_factory = embedder_factory
        self._embedder: TextEmbedder | None = None
        self._specs: dict[int, ContestSpec] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def recover(self) -> int:
        """Queue again what a previous process left half scored."""
        count = store.requeue_claimed(self._engine, older_than=None)
        if count:
            log.warning("queued again %d submission(s) left in scoring by a previous run", count)
        return count

    def start(self) -> None:
        self.recover()
        self._thread = threading.Thread(target=self._loop, name="judge-scoring-worker", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def notify(self) -> None:
        """A submission was queued: look now instead of at the next poll."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                worked = self.run_once()
                if not worked:
                    stale = store.requeue_claimed(
                        self._engine, older_than=store.lease_cutoff(self._clock(), self._server.scoring_lease_s))
                    if stale:
                        log.warning("queued again %d submission(s) whose scoring lease expired", stale)
            except Exception:  # the worker must outlive a database hiccup; the row stays queued
                log.exception("scoring worker: unexpected error; retrying after the poll interval")
                worked = False
            if not worked:
                self._wake.wait(self._server.worker_poll_s)
                self._wake.clear()

    def _spec(self, contest_id: int) -> ContestSpec:
        if contest_id not in self._specs:
            self._specs[contest_id] = contest_spec(store.load_contest(self._engine, contest_id))
        return self._specs[contest_id]

    def _embedder_for(self, spec: ContestSpec) -> TextEmbedder | None:
        if spec.kind == "rca" and not self._server.semantic:
            return None
        if self._embedder is None and self._embedder_factory is not None:
            self._embedder = self._embedder_factory()
        return self._embedder

    def run_once(self) -> bool:
        """Claim and score one submission; False when the queue was empty."""
        claimed = store.claim_next(self._engine, now=self._clock())
        if claimed is None:
            return False
        score: float | None = None
        summary = None
        error = None
        try:
            spec = self._spec(claimed.contest_id)
            outcome = score_answers(
                spec, json.loads(claimed.payload), embedder=self._embedder_for(spec),
                semantic_threshold=self._judge.semantic_threshold, keyword_weight=self._judge.keyword_weight,
                similarity_weight=self._judge.similarity_weight,
            )
            score, summary = outcome.score, outcome.summary
        except RcaError as exc:
            log.error("submission %s could not be scored: %s", claimed.submission_id, exc)
            error = str(exc)
        if store.finish(self._engine, claimed=claimed, now=self._clock(), score=score, summary=summary, error=error):
            log.info("submission %s scored: %s", claimed.submission_id, score if error is None else error)
        else:
            log.warning("submission %s: claim was taken back while scoring; result dropped", claimed.submission_id)
        return True
