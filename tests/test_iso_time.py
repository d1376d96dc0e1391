"""The log reader's numpy time parser gives what polars' general parser gives, or declines."""
from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from preprocess.iso_time import parse_fixed_iso_utc
from preprocess.readers import _parsed_utc, _parsed_utc_series


def _general(strings: list[str | None]) -> pl.Series:
    return pl.Series("t", strings, dtype=pl.Utf8).to_frame().select(_parsed_utc(pl.col("t"))).to_series()


def _random_times(rng: random.Random, count: int) -> list[datetime]:
    start = datetime(1900, 1, 1, tzinfo=UTC)
    span = int((datetime(2999, 12, 31, tzinfo=UTC) - start).total_seconds())
    return [start + timedelta(seconds=rng.randrange(span), microseconds=rng.randrange(10**6)) for _ in range(count)]


@pytest.mark.parametrize("layout", [
    "%Y-%m-%dT%H:%M:%S.{ms}Z", "%Y-%m-%dT%H:%M:%S.{us}Z", "%Y-%m-%d %H:%M:%S.{us}", "%Y-%m-%dT%H:%M:%SZ",
    "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S.{ds}Z",
])
def test_fixed_layouts_parse_as_the_general_parser_does(layout: str) -> None:
    rng = random.Random(3)
    times = _random_times(rng, 2000) + [datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
                                        datetime(2000, 2, 29, tzinfo=UTC), datetime(1970, 1, 1, tzinfo=UTC),
                                        datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)]
    strings = [t.strftime(layout).format(ms=f"{t.microsecond // 1000:03d}", us=f"{t.microsecond:06d}",
                                         ds=str(t.microsecond // 100_000)) for t in times]
    fast = parse_fixed_iso_utc(pl.Series("t", strings))
    assert fast is not None
    assert fast.dtype == pl.Datetime("us", "UTC")
    assert fast.to_list() == _general(strings).to_list()


@pytest.mark.parametrize("strings", [
    [],
    ["2025-06-05T16:00:00.123Z", None],
    ["2025-06-05T16:00:00.123Z", "2025-06-05T16:00:00.12Z"],  # two layouts
    ["2025-06-05T16:00:00.123Z", "2025-06-05T16:00:00.1234"],
    ["2025-13-05T16:00:00.123Z"], ["2025-02-29T16:00:00.123Z"], ["2025-04-31T16:00:00Z"],
    ["2025-06-05T24:00:00Z"], ["2025-06-05T16:60:00Z"], ["2016-12-31T23:59:60Z"],  # a leap second
    ["2025-06-05T16:00:00.1234567Z"], ["2025-06-05T16:00:00.Z"], ["2025-06-05T16:00:00."],
    ["2025-06-05T16:00:00+00:00"], [" 2025-06-05T16:00:00Z"], ["2025-06-05X16:00:00Z"], ["2025/06/05T16:00:00Z"],
    ["1899-12-31T23:59:59Z"], ["yesterday"], ["2025-06-05T16:00:0aZ"],
])
def test_other_values_are_left_to_the_general_parser(strings: list[str | None]) -> None:
    assert parse_fixed_iso_utc(pl.Series("t", strings, dtype=pl.Utf8)) is None


@pytest.mark.parametrize("strings", [
    ["2025-06-05T16:00:00.123Z", None, " 2025-06-05 16:00:00+00:00 ", "2025-06-05T16:00:00.1234567Z"],
    ["2016-12-31T23:59:59Z", "2025-06-05T16:00:00+0000"],
])
def test_the_reader_parses_any_released_encoding_as_before(strings: list[str | None]) -> None:
    assert _parsed_utc_series(pl.Series("t", strings, dtype=pl.Utf8)).to_list() == _general(strings).to_list()


@pytest.mark.parametrize("bad", ["2025-02-29T16:00:00.123Z", "2025-06-05T16:00:00+02:00", "yesterday"])
def test_the_reader_refuses_what_it_refused(bad: str) -> None:
    strings = pl.Series("t", ["2025-06-05T16:00:00.123Z", bad], dtype=pl.Utf8)
    with pytest.raises(pl.exceptions.InvalidOperationError):
        _general(strings.to_list())
    with pytest.raises(pl.exceptions.InvalidOperationError):
        _parsed_utc_series(strings)
