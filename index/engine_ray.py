"""The Ray engine: one Ray task per partition, on an existing cluster or a local one.

* Without an address a local cluster of ``workers`` CPUs is started for the run and shut
  down after it; with one (``ray://host:10001`` or ``host:6379`` or ``auto``) the run joins
  that cluster and leaves it running. When Ray is already initialised in this process (a
  test, a notebook) that session is used as it is.
* Data are read where they lie: every node must see ``data_dir`` and ``index_dir`` at the
  same path (a shared file system) and run the same version of this package. Each task
  writes its own partition files atomically; only the driver writes the manifest, so the
  incremental skip and the resume after a killed driver are the local job's.
* A task whose worker process dies (killed, out of memory, node lost) is retried by Ray up
  to ``max_retries`` times; after that its partition is reported failed by name and the
  others go on. Data failures come back in the result and are never retried.
* Chained tasks (log partitions) are submitted one at a time, the next when the previous
  one has finished, so the Drain3 template ids are the local engine's.

Ray is the optional ``distributed`` extra and is imported only when this engine is built.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

from index.engines import PartitionResult, PartitionTask, PartitionWork, ordered_chains
from rca.errors import InputError

log = logging.getLogger(__name__)

DEFAULT_MAX_RETRIES = 3
# A local cluster's object store only carries small results: keep it small on a shared machine.
LOCAL_OBJECT_STORE_BYTES = 256 * 1024 * 1024


def import_ray() -> ModuleType:
    try:
        import ray
    except ImportError as exc:
        raise InputError("--engine ray needs Ray, which is not installed: pip install '.[distributed]'") from exc
    return ray


class RayEngine:
    name = "ray"

    def __init__(self, *, workers: int, address: str | None = None, max_retries: int = DEFAULT_MAX_RETRIES) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self.address = address
        self.max_retries = max_retries
        self._ray = import_ray()

    def _connect(self) -> bool:
        """Initialise Ray unless it already is; True when this run must shut it down."""
        ray = self._ray
        if ray.is_initialized():
            return False
        if self.address:
            log.info("joining the Ray cluster at %s", self.address)
            ray.init(address=self.address, log_to_driver=True)
        else:
            log.info("starting a local Ray cluster with %d CPU(s)", self.workers)
            ray.init(num_cpus=self.workers, include_dashboard=False,
                     object_store_memory=LOCAL_OBJECT_STORE_BYTES, log_to_driver=True)
        return True

    def run(self, tasks: Sequence[PartitionTask], *, work: PartitionWork) -> Iterator[PartitionResult]:
        if not tasks:
            return
        ray = self._ray
        shutdown = self._connect()
        try:
            yield from self._run(tasks, work=work)
        finally:
            if shutdown:
                ray.shutdown()

    def _run(self, tasks: Sequence[PartitionTask], *, work: PartitionWork) -> Iterator[PartitionResult]:
        ray = self._ray
        # retry_exceptions=False: only system failures (a dead worker) are retried; work()
        # reports data failures in its result and anything it raises is a bug.
        remote = ray.remote(work).options(num_cpus=1, max_retries=self.max_retries, retry_exceptions=False)
        free, chains = ordered_chains(tasks)
        queues = {name: list(chain) for name, chain in chains.items()}
        pending: dict[Any, PartitionTask] = {}

        def submit(task: PartitionTask) -> None:
            pending[remote.remote(task)] = task

        # Chain heads first: a chain is the run's critical path when it is long.
        for queue in queues.values():
            submit(queue.pop(0))
        for task in free:
            submit(task)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            ref = ready[0]
            task = pending.pop(ref)
            try:
                result = ray.get(ref)
            except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                    ray.exceptions.OutOfMemoryError) as exc:
                result = PartitionResult(task=task, failure=f"worker lost after {self.max_retries} retries: {exc}")
            except ray.exceptions.RayTaskError as exc:
                raise exc.as_instanceof_cause() from None  # a bug in work(): as the local engine would
            if task.chain is not None and queues[task.chain]:
                submit(queues[task.chain].pop(0))
            yield result
