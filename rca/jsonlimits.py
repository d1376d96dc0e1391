"""Bounds a server puts on a JSON body it parsed: how deeply it nests.

The judge server's submissions and the diagnose receiver's alert payloads are both bounded by
depth; one rule for both.
"""
from __future__ import annotations

from typing import Any


def json_depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value: a scalar 0, ``{}`` or ``[]`` 1, and one more per level.

    Iterative, not recursive: the value may be deeper than the interpreter's recursion limit.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in item)
    return deepest
