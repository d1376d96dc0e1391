"""preprocess.trace_sampling: whole traces kept by their id, as a sampling tracer keeps them."""
from __future__ import annotations

import polars as pl
import pytest

from preprocess.trace_sampling import sampled_traces
from rca.errors import InputError


def _spans(traces: int, per_trace: int = 3) -> pl.DataFrame:
    return pl.DataFrame({"trace_id": [f"{t:032x}" for t in range(traces) for _ in range(per_trace)],
                         "span_id": [f"{t:08x}{s:08x}" for t in range(traces) for s in range(per_trace)]})


@pytest.mark.parametrize("share", [0.1, 0.5, 0.9])
def test_a_share_keeps_about_that_share_of_whole_traces(share):
    spans = _spans(4000)
    kept = sampled_traces(spans, share=share)
    traces = kept.get_column("trace_id").n_unique()
    assert abs(traces / 4000 - share) < 0.05
    assert kept.height == 3 * traces  # every span of a kept trace
    assert sampled_traces(spans, share=share).equals(kept)  # the same traces on every run


def test_a_larger_share_keeps_a_superset():
    spans = _spans(2000)
    small = set(sampled_traces(spans, share=0.2).get_column("trace_id"))
    large = set(sampled_traces(spans, share=0.6).get_column("trace_id"))
    assert small < large


def test_everything_at_one_and_no_share_outside_the_range():
    spans = _spans(10)
    assert sampled_traces(spans, share=1.0).equals(spans)
    for share in (0.0, -0.1, 1.5):
        with pytest.raises(InputError, match="--keep-traces"):
            sampled_traces(spans, share=share)
