"""Fixed-layout ISO 8601 UTC times parsed with numpy: the log reader's fast path.

A full-scale log hour holds ~200 k distinct ``@timestamp`` strings; polars' ``to_datetime``
costs ~0.5 µs each, more than reading the file. Filebeat writes them all in one layout
(``2025-06-06T02:00:00.251Z``), so their digits sit at fixed byte positions and numpy turns
them into microseconds in a few array operations. Anything else (another layout, a null, an
impossible date, a leap second) is left to the caller's general parser, which then gives the
same values or raises the same error as before.
"""
from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

_DATE_TIME_CHARS = 19  # YYYY-MM-DDTHH:MM:SS
_MAX_FRACTION_DIGITS = 6  # microseconds; more digits are left to the general parser
_DAYS_IN_MONTH = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)


def parse_fixed_iso_utc(strings: pl.Series) -> pl.Series | None:
    """``strings`` as ``Datetime("us", "UTC")`` when all are ``YYYY-MM-DD[T ]HH:MM:SS[.f{1,6}][Z]``
    of one length (UTC); None when any is not (a null, another layout, a value out of range)."""
    if len(strings) == 0 or strings.null_count():
        return None
    array = strings.to_arrow()
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not (pa.types.is_large_string(array.type) or pa.types.is_string(array.type)):
        return None
    offset_type = np.int64 if pa.types.is_large_string(array.type) else np.int32
    offsets = np.frombuffer(array.buffers()[1], dtype=offset_type)[array.offset:array.offset + len(array) + 1]
    width = int(offsets[1] - offsets[0])
    if width < _DATE_TIME_CHARS or not (np.diff(offsets) == width).all():
        return None
    text = np.frombuffer(array.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]].reshape(len(array), width)
    zulu = bool(text[0, -1] == ord("Z"))  # the layout is the first value's; every value is checked against it
    body = width - int(zulu)
    fraction_digits = 0 if body == _DATE_TIME_CHARS else body - _DATE_TIME_CHARS - 1  # after the "."
    if not 0 <= fraction_digits <= _MAX_FRACTION_DIGITS or body == _DATE_TIME_CHARS + 1:
        return None
    return _parsed(text, strings.name, fraction_digits=fraction_digits, zulu=zulu)


def _parsed(text: np.ndarray, name: str, *, fraction_digits: int, zulu: bool) -> pl.Series | None:
    fraction_start = _DATE_TIME_CHARS + 1
    digit_columns = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18,
                     *range(fraction_start, fraction_start + fraction_digits)]
    separators = {4: "-", 7: "-", 10: "T ", 13: ":", 16: ":"}
    if fraction_digits:
        separators[_DATE_TIME_CHARS] = "."
    if zulu:
        separators[text.shape[1] - 1] = "Z"
    digits = text[:, digit_columns] - np.uint8(ord("0"))  # uint8: anything below "0" wraps above 9
    if (digits > 9).any():
        return None
    for column, allowed in separators.items():
        found = text[:, column]
        if not np.logical_or.reduce([found == ord(char) for char in allowed]).all():
            return None

    rows = np.ascontiguousarray(digits.T).astype(np.int32)  # one contiguous row per digit position

    def number(first: int, count: int) -> np.ndarray:
        value = rows[first].copy()
        for i in range(first + 1, first + count):
            value *= 10
            value += rows[i]
        return value

    # Dates are few (one or two a file): they are checked and converted once each.
    date = number(0, 8)  # YYYYMMDD
    if (date == date[0]).all():
        dates, date_index = date[:1], np.zeros(len(date), dtype=np.int64)
    else:
        dates, date_index = np.unique(date, return_inverse=True)
    dates = dates.astype(np.int64)
    year, month, day = dates // 10_000, dates // 100 % 100, dates % 100
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    if ((year < 1900) | (year > 2999) | (month < 1) | (month > 12) | (day < 1)).any():
        return None  # out of range: the general parser decides
    if (day > _DAYS_IN_MONTH[month] + (leap & (month == 2))).any():
        return None
    hour, minute, second = number(8, 2), number(10, 2), number(12, 2)
    if (hour > 23).any() or (minute > 59).any() or (second > 59).any():
        return None  # a leap second, or no time at all
    second += hour * 3600 + minute * 60  # of the day
    micros = (_days_from_civil(year, month, day)[date_index] * 86_400 + second) * 1_000_000
    if fraction_digits:
        micros += number(14, fraction_digits) * 10 ** (_MAX_FRACTION_DIGITS - fraction_digits)
    return pl.Series(name, micros, dtype=pl.Int64).cast(pl.Datetime("us", "UTC"))


def _days_from_civil(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's ``days_from_civil``)."""
    year = year - (month <= 2)
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146_097 + day_of_era - 719_468
