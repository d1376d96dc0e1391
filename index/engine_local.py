"""The local engine: partitions built in this process, on threads, or in a pool of spawned processes.

With one worker every task runs in this process, ``threads`` at a time (default 2), started
in the order given. A partition's build leaves stretches of one busy core (Python between
the vectorised steps, a single-threaded sort, writing its files); a second partition built
beside it fills them. A chain's tasks (log partitions) still run one at a time, in order.

With ``workers > 1`` free tasks run in ``workers - 1`` spawned processes while chained
tasks run here, one after another, so the machine holds at most ``workers`` busy processes.

Workers die with this process (``rca.lifeline``): after a ``kill -9`` of the job none goes
on writing into the index. A worker that dies (killed, out of memory) breaks the pool: its
task and every task not yet finished come back as failures naming the cause; a rerun
builds them.
"""
from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from index.engines import DEFAULT_THREADS, PartitionResult, PartitionTask, PartitionWork, ordered_chains
from rca.lifeline import die_with_parent


def _outcome(future: Future[PartitionResult], task: PartitionTask) -> PartitionResult:
    try:
        return future.result()
    except BrokenProcessPool as exc:
        return PartitionResult(task=task, failure=f"worker process died before finishing ({exc}); killed or out of "
                                                  "memory? Rerun to build this partition")


class LocalEngine:
    name = "local"

    def __init__(self, *, workers: int, threads: int = DEFAULT_THREADS) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.workers = workers
        self.threads = threads

    def run(self, tasks: Sequence[PartitionTask], *, work: PartitionWork) -> Iterator[PartitionResult]:
        free, chains = ordered_chains(tasks)
        if self.workers == 1 or not free:
            yield from self._run_here(tasks, work=work)
            return
        # Spawned, not forked: polars' thread pool does not survive a fork.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=self.workers - 1, mp_context=context, initializer=die_with_parent,
                                 initargs=(os.getpid(),)) as pool:
            task_of: dict[Future[PartitionResult], PartitionTask] = {pool.submit(work, task): task for task in free}
            pending: set[Future[PartitionResult]] = set(task_of)
            for chain in chains.values():
                for task in chain:
                    yield work(task)
                    done = {f for f in pending if f.done()}
                    pending -= done
                    for future in done:
                        yield _outcome(future, task_of[future])
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield _outcome(future, task_of[future])

    def _run_here(self, tasks: Sequence[PartitionTask], *, work: PartitionWork) -> Iterator[PartitionResult]:
        """Every task in this process, ``threads`` at a time, started in the order given.

        A task of a chain waits while an earlier one of its chain runs (the tasks after it in
        the list may start meanwhile). A bug raised by ``work``, or Ctrl-C while this waits,
        starts no further task; the ones running finish and are yielded (their partitions are
        kept), then it propagates.
        """
        if self.threads == 1:
            # In the calling thread: a profiler sees the builds, and an error stops the run at once.
            for task in tasks:
                yield work(task)
            return
        waiting = list(tasks)
        running: dict[Future[PartitionResult], PartitionTask] = {}
        raised: BaseException | None = None
        with ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="partition") as pool:
            while running or (waiting and raised is None):
                busy_chains = {t.chain for t in running.values() if t.chain is not None}
                for task in list(waiting) if raised is None else []:
                    if len(running) == self.threads:
                        break
                    if task.chain is not None and task.chain in busy_chains:
                        continue  # and so are the chain's later tasks: they come after it in ``waiting``
                    waiting.remove(task)
                    running[pool.submit(work, task)] = task
                    if task.chain is not None:
                        busy_chains.add(task.chain)
                try:
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                except KeyboardInterrupt as exc:  # Ctrl-C: the running partitions finish and are kept
                    raised = raised or exc
                    done, _ = wait(running)  # a second Ctrl-C leaves them unrecorded (rebuilt on rerun)
                for future in sorted(done, key=lambda f: tasks.index(running[f])):
                    del running[future]
                    try:
                        result = future.result()
                    except BaseException as exc:  # re-raised below, once the running tasks are recorded
                        raised = raised or exc
                        continue
                    yield result
        if raised is not None:
            raise raised
