"""The local engine: partitions built in this process or in a pool of spawned processes.

With one worker every task runs here, in the order given. With ``workers > 1`` free tasks
run in ``workers - 1`` spawned processes while chained tasks (log partitions) run here,
one after another, so the machine holds at most ``workers`` busy processes.

Workers die with this process (``rca.lifeline``): after a ``kill -9`` of the job none goes
on writing into the index. A worker that dies (killed, out of memory) breaks the pool: its
task and every task not yet finished come back as failures naming the cause; a rerun
builds them.
"""
from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from index.engines import PartitionResult, PartitionTask, PartitionWork, ordered_chains
from rca.lifeline import die_with_parent


def _outcome(future: Future[PartitionResult], task: PartitionTask) -> PartitionResult:
    try:
        return future.result()
    except BrokenProcessPool as exc:
        return PartitionResult(task=task, failure=f"worker process died before finishing ({exc}); killed or out of "
                                                  "memory? Rerun to build this partition")


class LocalEngine:
    name = "local"

    def __init__(self, *, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers

    def run(self, tasks: Sequence[PartitionTask], *, work: PartitionWork) -> Iterator[PartitionResult]:
        free, chains = ordered_chains(tasks)
        if self.workers == 1 or not free:
            for task in tasks:
                yield work(task)
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
