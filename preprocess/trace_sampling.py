"""Whole traces kept by their id, as a sampling tracer keeps them: ``sampled_traces``.

Many deployments keep a share of their traces (head sampling by trace id). An importer's
``--keep-traces SHARE`` writes a dataset as such a deployment would have recorded it, for
ablations: every span of a kept trace stays, every span of another goes. The choice is
CRC-32 of the trace id against the share, so the same share keeps the same traces on every
run and machine, and a larger share keeps a superset of a smaller one's traces.
"""
from __future__ import annotations

import zlib

import polars as pl

from rca.errors import InputError

_BUCKETS = 1_000_000


def sampled_traces(spans: pl.DataFrame, *, share: float) -> pl.DataFrame:
    """The spans of the traces kept at ``share`` (0 < share <= 1) of canonical span rows."""
    if not 0.0 < share <= 1.0:
        raise InputError(f"--keep-traces {share}: expected a share in (0, 1]")
    if share == 1.0 or spans.height == 0:
        return spans
    ids = spans.get_column("trace_id").unique().drop_nulls()
    kept = [i for i in ids.to_list() if zlib.crc32(i.encode()) % _BUCKETS < share * _BUCKETS]
    return spans.filter(pl.col("trace_id").is_in(kept))
