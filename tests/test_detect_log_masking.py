"""masked_messages (the nightly job's masking, on distinct lines) equals extract_and_mask line by line."""
from __future__ import annotations

import polars as pl

from preprocess.detect_log import extract_and_mask, masked_messages

LINES = [
    '{"severity":"info","time":"2025-06-05T16:00:00.429Z","message":"conversion request successful"}',
    '{"severity":"info","time":"2025-06-05T16:00:01.001Z","message":"conversion request successful"}',
    '{"error":"rpc error: code = Unavailable desc = 10.233.1.2:8080","message":"failed to get ads"}',
    '{"message":"charge ok","err\\u006fr":"escaped key 42"}',  # the key "error", written with an escape
    '{"message":"quote \\" and id 5b8e1d3c-a4f0-4c4b-9e6a-0d2f3c1e7a90"}',
    '{"message":{"nested":"object"},"error":"x"}',
    '{"msg":"no message key","error":"only error"}',
    '{"message":12345}',
    '{not json at all "error"',
    "GetCartAsync called with userId=5b8e1d3c-a4f0-4c4b-9e6a-0d2f3c1e7a90",
    "2025-06-06 02:00:00.285 INFO  [grpc-default-executor-2] received ad request",
    "   padded    line   7  ",
    "",
    "null",
    None,
]


def test_masked_messages_equals_extract_and_mask_per_line() -> None:
    messages = pl.Series("message", LINES * 3, dtype=pl.Utf8)
    expected = messages.to_frame().with_columns(extract_and_mask(pl.col("message")).alias("masked"))
    mapping = masked_messages(messages)
    assert mapping.height == messages.n_unique()
    got = messages.to_frame().join(mapping, on="message", how="left", nulls_equal=True, maintain_order="left")
    assert got.get_column("masked").to_list() == expected.get_column("masked").to_list()
