"""The local engine: partitions built in this process or in a pool of spawned processes.

With one worker every task runs here, in the order given. With ``workers > 1`` free tasks
run in ``workers - 1`` spawned processes while chained tasks (log partitions) run here,
one after another, so the machine holds at most ``workers`` busy processes.
"""
from __future__ import annotations

import multiprocessing
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

from index.engines import PartitionResult, PartitionTask, PartitionWork, ordered_chains


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
        with ProcessPoolExecutor(max_workers=self.workers - 1, mp_context=context) as pool:
            pending: set[Future[PartitionResult]] = {pool.submit(work, task) for task in free}
            for chain in chains.values():
                for task in chain:
                    yield work(task)
                    done = {f for f in pending if f.done()}
                    pending -= done
                    for future in done:
                        yield future.result()
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()
