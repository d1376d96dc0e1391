"""Iterating ahead: the next items of an iterator produced on a thread while the caller works on the current one.

A full-scale hour of spans takes about as long to read (pyarrow, numpy) as to turn into call
edges (polars joins and groups, mostly on one core); both leave the GIL, so reading the next
hour while this one is grouped keeps the second core busy.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar, cast

T = TypeVar("T")


def read_ahead(items: Iterable[T], *, ahead: int = 1, name: str = "read-ahead") -> Iterator[T]:
    """``items`` in order, up to ``ahead`` of them produced on one thread before the caller asks for them.

    The iterator is advanced by one thread only, one step at a time (a generator may not run
    twice at once); its exceptions reach the caller at the item they stand for. A caller that
    stops early waits for the steps already started.
    """
    iterator = iter(items)
    end = object()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix=name) as pool:
        pending: deque[Future[object]] = deque(pool.submit(next, iterator, end) for _ in range(max(ahead, 1)))
        while (item := pending.popleft().result()) is not end:
            pending.append(pool.submit(next, iterator, end))
            yield cast(T, item)  # every item but ``end`` came from ``items``
