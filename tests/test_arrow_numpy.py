"""preprocess.arrow_numpy: numpy views of arrow arrays and back, by their buffers."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from preprocess.arrow_numpy import arrow_of, numpy_view


@pytest.mark.parametrize("arrow_type", [pa.int8(), pa.int32(), pa.int64(), pa.uint32(), pa.float64()])
def test_numpy_view_of_a_slice_reads_its_own_values(arrow_type):
    array = pa.array([5, 1, 7, 3, 9, 2], type=arrow_type).slice(2, 3)  # an offset into the buffer
    view = numpy_view(array)
    assert view.dtype == np.dtype(arrow_type.to_pandas_dtype())
    assert view.tolist() == [7, 3, 9]
    assert not view.flags.writeable  # a view of arrow's memory


def test_numpy_view_refuses_nulls_and_strings():
    with pytest.raises(ValueError, match="null"):
        numpy_view(pa.array([1, None, 3], type=pa.int32()))
    with pytest.raises(TypeError, match="numbers"):
        numpy_view(pa.array(["a"]))


def test_numpy_view_of_an_empty_array():
    assert numpy_view(pa.array([], type=pa.int64())).tolist() == []


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_arrow_of_keeps_values_and_nulls(dtype):
    values = np.array([4, -1, 6, -1, 8, 1, 2, 3, 5], dtype=dtype)  # nine: the validity bitmap spans two bytes
    array = arrow_of(values, null=values < 0)
    array.validate(full=True)
    assert array.type == pa.from_numpy_dtype(np.dtype(dtype))
    assert array.null_count == 2
    assert array.to_pylist() == [None if v < 0 else v for v in values.tolist()]
    assert arrow_of(values).null_count == 0 and arrow_of(values).to_pylist() == values.tolist()


def test_arrow_of_a_strided_array_is_made_contiguous():
    values = np.arange(10, dtype=np.int64)[::2]
    assert arrow_of(values).to_pylist() == [0, 2, 4, 6, 8]
