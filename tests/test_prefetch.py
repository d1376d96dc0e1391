"""preprocess.prefetch.read_ahead: the same items in the same order, produced ahead on one thread."""
from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from preprocess.prefetch import read_ahead


def _counted(n: int, produced: list[int], *, fail_at: int | None = None) -> Iterator[int]:
    for i in range(n):
        if i == fail_at:
            raise ValueError(f"item {i}")
        produced.append(i)
        yield i


@pytest.mark.parametrize("ahead", [1, 3])
def test_items_in_order(ahead: int) -> None:
    produced: list[int] = []
    assert list(read_ahead(_counted(10, produced), ahead=ahead)) == list(range(10))
    assert list(read_ahead(iter([]), ahead=ahead)) == []


def test_the_next_item_is_produced_while_the_caller_works() -> None:
    produced: list[int] = []
    seen = []
    for item in read_ahead(_counted(4, produced), ahead=1):
        seen.append(item)
        if item == 0:
            # The thread produces item 1 without the caller asking for it.
            for _ in range(200):
                if len(produced) == 2:
                    break
                threading.Event().wait(0.01)
            assert produced == [0, 1]
    assert seen == [0, 1, 2, 3]


def test_an_error_reaches_the_caller_at_its_item() -> None:
    produced: list[int] = []
    seen = []
    with pytest.raises(ValueError, match="item 2"):
        for item in read_ahead(_counted(5, produced, fail_at=2)):
            seen.append(item)
    assert seen == [0, 1]


def test_a_caller_that_stops_early_stops_the_reading() -> None:
    produced: list[int] = []
    for item in read_ahead(_counted(100, produced), ahead=2):
        if item == 1:
            break
    assert len(produced) <= 4
