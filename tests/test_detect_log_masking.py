"""The nightly job's masking (on distinct lines, on line classes) equals extract_and_mask line by line."""
from __future__ import annotations

import json
import random

import numpy as np
import polars as pl
import pytest

from preprocess.detect_log import extract_and_mask, masked_codes, masked_messages

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


# Lines whose classes (digits 2-9 as 1, UUID-shaped spans as one UUID) hold lines that parse
# or serialise differently: each must still mask exactly as it does alone.
UUID_A, UUID_B = "5b8e1d3c-a4f0-4c4b-9e6a-0d2f3c1e7a90", "fb8e1d3c-c4f0-4c4b-9e6a-0d2f3c1e7a9d"
CLASS_LINES = [
    f'{{"message":"id {UUID_A} took 12ms","severity":"info","time":"2025-06-05T16:00:00.429Z"}}',
    f'{{"message":"id {UUID_B} took 97ms","severity":"info","time":"2025-06-05T16:59:38.999Z"}}',
    '{"message":"failed","error":"code 503 at 10.0.0.1:8080"}',
    '{"message":"failed","error":"code 404 at 10.9.8.7:9090"}',
    '{"message":"a\\bcdef012-3456-7890-abcd-ef0123456789 x"}',  # \b escape, then hex
    '{"message":"a\\bcdef013-3456-7890-abcd-ef0123456789 x"}',
    '{"message":"\\u0031 escaped digit"}',
    '{"message":"\\u0032 escaped digit"}',
    '{"message":"x","n":9e999}',  # out of range: not valid JSON for the parser
    '{"message":"x","n":1e111}',
    '{"message":"x","n":1.5E-7}',
    '{"message":"x","n":' + "2" * 309 + "}",  # 2.2e308: out of range, 1.1e308 is not
    '{"message":"x","n":' + "1" * 309 + "}",
    '{"message":"x","n":05}',  # a leading zero: invalid
    '{"message":"x","n":15}',
    '{"message":"x","n":10}',
    '{"message":"x","n":20}',
    '{"message":12345}',
    '{"message":99999}',
    '{"message":9999999999999999.9}',
    '{"message":1111111111111111.1}',
    '{"message":-0.000009}',
    '{"message":-0.000001}',
    f'{{"message":{{"b":1,"{UUID_A}":2}}}}',  # an object: re-serialised with its keys in order
    f'{{"message":{{"b":1,"{UUID_B}":2}}}}',
    f'{{"message":{{"{UUID_A}":1,"{UUID_B}":2}}}}',
    f'{{"message":{{"{UUID_B}":1,"{UUID_A}":2}}}}',
    f'{{"{UUID_A}":"key","message":"y 7"}}',
    f'{{"{UUID_B}":"key","message":"y 3"}}',
    '{"message":"m","error":null}',
    '{"message":"m","error":[1,2]}',
    '{"message" : "spaced 42" , "error" : "e 7"}',
    '{"message":"quote \\" 12 and \\\\ 34 \\/ 5 \\n 6 \\t 7"}',
    '{"message":"quote \\" 92 and \\\\ 84 \\/ 3 \\n 2 \\t 9"}',
    '{"message":"café 42 naïve 7"}',
    '{"message":"x"} trailing 12',
    '{"message":"x"} trailing 99',
    '{"message":"x",}',
    f"plain {UUID_A} 12 10.2.3.4:8080 4bf92f3577b34da6a3ce929d0e0e4736 done",
    f"plain {UUID_B} 98 10.9.9.9:9999 4bf99f9999b99da9a9ce999d0e0e9999 done",
    f"abc{UUID_A}ff-{UUID_B}",
    f"abc{UUID_B}ff-{UUID_A}",
    "word7 0x1f 3.14 -2 +5 1e9 " + "9" * 20,
    "word2 0x9f 9.99 -9 +9 9e9 " + "1" * 20,
    "17:20:54.004 INFO  o.s.OrderServiceImpl#365 TraceID: 4bf92f3577b34da6a3ce929d0e0e4736 SpanID: 18fab717fd [x 12]",
    "19:29:59.999 INFO  o.s.OrderServiceImpl#999 TraceID: 9bf99f9999b99da9a9ce999d0e0e9999 SpanID: 99fab999fd [x 99]",
    f"2025-06-06 02:00:00.285 ERROR t.s.X#1 trace_id={UUID_A}G span-id=x.73.171 done 7",
    f"2025-06-06 09:59:59.999 ERROR t.s.X#9 trace_id={UUID_B}G span-id=x.99.999 done 2",
    "digits near the cut " + "x" * 215 + " 12345 tail",
    "digits near the cut " + "x" * 215 + " 99999 tail",
    "",
    None,
]


def _per_line(messages: pl.Series) -> list[str]:
    frame = messages.to_frame("message").with_columns(extract_and_mask(pl.col("message")).alias("masked"))
    return frame.get_column("masked").fill_null("").to_list()


def _by_class(messages: pl.Series) -> list[str]:
    distinct, codes = masked_codes(messages)
    assert distinct.n_unique() == len(distinct)
    return distinct.gather(codes).to_list()


def test_line_classes_mask_as_each_line_does() -> None:
    messages = pl.Series("message", CLASS_LINES + LINES, dtype=pl.Utf8)
    assert _by_class(messages) == _per_line(messages)


def test_line_classes_on_random_lines() -> None:
    rng = random.Random(7)
    pieces = ["1", "0", "9", "5", "-", "e", "E", ".", ":", ",", "[", "]", "{", "}", '"', "\\", "a", "f", "b", "u",
              " ", "message", "error", UUID_A, UUID_B, "10.1.2.3", "1e999", "x"]
    lines = []
    for _ in range(3000):
        if rng.random() < 0.5:
            value = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
            lines.append(json.dumps({"message": value, "n": rng.choice([1, 25, 3.5, 1e300, -7]),
                                     "error": rng.choice([None, "e " + value, 42])}))
        else:
            lines.append("".join(rng.choice(pieces) for _ in range(rng.randint(0, 20))))
    # Each line again with its digits redrawn, so that classes hold several lines.
    lines += ["".join(rng.choice("123456789") if ch in "23456789" else ch for ch in line) for line in lines]
    messages = pl.Series("message", lines, dtype=pl.Utf8)
    assert _by_class(messages) == _per_line(messages)


def test_hash_collisions_fall_back_to_grouping_by_value(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = pl.Series("message", CLASS_LINES + LINES, dtype=pl.Utf8)
    expected = _per_line(messages)
    monkeypatch.setattr(pl.Series, "hash", lambda self, *args, **kwargs: pl.Series(np.zeros(len(self), np.uint64)))
    assert _by_class(messages) == expected
