"""The engine seam of the nightly job: "run these partition tasks, yield outcomes as they finish".

``index.build.run_nightly`` decides *what* to build (stale partitions, manifest, resume);
an engine decides *where* each partition is built. Two implementations:

* ``index.engine_local.LocalEngine``: this process, or a pool of spawned processes;
* ``index.engine_ray.RayEngine``: one Ray task per partition, on an existing cluster or a
  local one started for the run (Ray is the optional ``distributed`` extra, imported lazily).

The contract every engine keeps:

* ``work`` is a module-level function (picklable by reference) that builds one partition
  where it runs and writes its files atomically; it returns a ``PartitionResult`` and
  reports data failures in it rather than raising (an exception is a bug and propagates);
* tasks that share a ``chain`` run one at a time, in the order given, each starting after
  the previous one finished (log partitions: the Drain3 miner state passes from one day to
  the next through the index directory, so template ids do not depend on the engine);
* only the caller (the driver) touches the manifest, after a result arrives.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from index.models import LostFile
from rca.errors import InputError
from rca.system import TraceNaming

EngineName = Literal["local", "ray"]
# Partitions the local engine builds at once in its process with one worker
# (``[preprocess] threads``, whose default the settings repeat; a test holds them equal).
DEFAULT_THREADS = 2
ENGINE_NAMES: tuple[str, ...] = ("local", "ray")


@dataclass(frozen=True)
class PartitionTask:
    """One partition to build; paths must be readable and writable where the task runs."""

    day: str
    family: str
    data_dir: Path
    index_dir: Path
    naming: TraceNaming  # the system's [traces]: how the spans read name services and peers
    chain: str | None = None  # tasks of one chain run one at a time, in order
    params: Mapping[str, object] = field(default_factory=dict)  # picklable detector params, by family

    @property
    def name(self) -> str:
        return f"{self.day}/{self.family}"


@dataclass(frozen=True)
class PartitionResult:
    """What building one partition gave: table rows and per-file errors, or a failure."""

    task: PartitionTask
    rows: dict[str, int] = field(default_factory=dict)
    errors: tuple[str, ...] = ()  # inputs skipped by name; the partition is still written
    failure: str | None = None  # the partition was not written, and why
    seconds: float = 0.0  # build time where it ran (queueing not included)
    lost_files: tuple[LostFile, ...] = ()  # unreadable inputs, for the manifest and the data status
    notes: tuple[str, ...] = ()  # repairs that lost no file (undecodable strings)


PartitionWork = Callable[[PartitionTask], PartitionResult]


class PartitionEngine(Protocol):
    name: str

    def run(self, tasks: Sequence[PartitionTask], *, work: PartitionWork) -> Iterator[PartitionResult]:
        """Build every task with ``work``; yield each result as soon as it is known."""


def ordered_chains(tasks: Sequence[PartitionTask]) -> tuple[list[PartitionTask], dict[str, list[PartitionTask]]]:
    """Split tasks into free ones and chains (each chain keeps the order given)."""
    free: list[PartitionTask] = []
    chains: dict[str, list[PartitionTask]] = {}
    for task in tasks:
        if task.chain is None:
            free.append(task)
        else:
            chains.setdefault(task.chain, []).append(task)
    return free, chains


def make_engine(name: str, *, workers: int, threads: int = DEFAULT_THREADS, ray_address: str | None = None) -> PartitionEngine:
    """The engine ``name`` with ``workers`` processes (Ray: CPUs of a local cluster).

    ``threads``: partitions built at once in this process by the local engine with one worker.
    """
    if name == "local":
        if ray_address:
            raise InputError("--ray-address is only used with --engine ray")
        from index.engine_local import LocalEngine

        return LocalEngine(workers=workers, threads=threads)
    if name == "ray":
        from index.engine_ray import RayEngine

        return RayEngine(workers=workers, address=ray_address or None)
    raise InputError(f"unknown preprocess engine {name!r}; expected one of {', '.join(ENGINE_NAMES)}")
