"""Numpy views of arrow arrays, and arrow arrays of numpy ones, made from their buffers.

pyarrow's own ``Array.to_numpy`` and ``pa.array`` pass through its pandas bridge, which
imports pandas on first use: ~0.3 s of a nightly job that never needs pandas, taken with
the import lock held while the other partition's thread waits for it. These two functions
cover what the fast readers hand between arrow and numpy: primitive arrays, no copy on the
way out.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa


def numpy_view(array: pa.Array) -> np.ndarray:
    """A primitive arrow array without nulls as a read-only numpy array over its data buffer (no copy)."""
    if array.null_count:
        raise ValueError(f"{array.type} array with {array.null_count} null(s): fill them first")
    if not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
        raise TypeError(f"not an array of numbers: {array.type}")
    dtype = np.dtype(array.type.to_pandas_dtype())  # a numpy dtype; pandas is not involved
    data = array.buffers()[1]
    if data is None:
        return np.empty(0, dtype=dtype)
    view = np.frombuffer(data, dtype=dtype)[array.offset:array.offset + len(array)]
    view.flags.writeable = False  # arrow's memory: other arrays may share it
    return view


def arrow_of(values: np.ndarray, *, null: np.ndarray | None = None) -> pa.Array:
    """A 1-D numpy array of numbers as an arrow array, null where ``null`` is True."""
    values = np.ascontiguousarray(values)
    if values.ndim != 1 or values.dtype.kind not in "iuf":
        raise TypeError(f"not a 1-D array of numbers: {values.dtype}, {values.ndim} dimension(s)")
    validity = None
    null_count = 0
    if null is not None:
        null_count = int(np.count_nonzero(null))
        if null_count:
            validity = pa.py_buffer(np.packbits(~np.asarray(null, dtype=bool), bitorder="little"))
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [validity, pa.py_buffer(values)],
                                 null_count=null_count)
