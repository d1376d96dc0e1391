"""``rca import prometheus --url URL --preset NAME``: named PromQL query sets, read from TOML files.

A preset is data, not code: a TOML file, shipped in ``preprocess/formats/presets/`` (``kubernetes``,
``istio``, ``spanmetrics``) or the user's own, of this shape::

    about = "what the preset pulls"

    [[series]]
    name = "pod_cpu_usage"          # the name every series of the answer takes (the canonical KPI)
    about = "CPU used by the pod's containers, percent of one core"   # what it measures, its unit
    query = 'sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{container!="", <match>}[<window>]))'

The answers of ``rate()``, ``sum()`` and the like carry no ``__name__``: the pull names each
series after its entry (``preprocess.formats.pull.PromQuery.name``), and ``metric_map`` reads the
name and the labels as it reads any Prometheus series (docs/formats/prometheus.md). Label renames
a preset needs (Istio's ``destination_workload`` as ``service``) are written in its PromQL with
``label_replace``, so every series reaches ``metric_map`` with the label spellings it already knows.

``<match>`` (``MATCH_PLACEHOLDER``) marks, as the last item of a selector's braces, where the
``--match`` label matchers go (``{container!="", <match>}`` -> ``{container!="", namespace="prod"}``;
none given: ``{container!="", }``, which PromQL reads as ``{container!=""}``). A query without it
is not scoped by ``--match`` (node_exporter's: a node serves every namespace).

``<window>`` (``WINDOW_PLACEHOLDER``) marks, alone inside a range's brackets, the range of a rate
(``rate``, ``increase``, ``irate``, ``*_over_time``): ``rate(x[<window>])`` -> ``rate(x[4m])`` with
``--rate-window 4m``, ``[1m]`` by default (``DEFAULT_RATE_WINDOW``). A rate needs two samples inside
its range, so the range must span two scrape intervals, four to be safe: Prometheus' default
``scrape_interval`` of 1m needs ``--rate-window 4m``. A query whose range is written out (``[1m]``, a
user's file) keeps it whatever ``--rate-window`` says. A count per minute is written
``60 * rate(x[<window>])``, not ``increase(x[<window>])``, so it stays per minute whatever the window
(``increase`` counts over the whole range); a wider window smooths: each value is the mean over it.
"""
from __future__ import annotations

import logging
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, NamedTuple

from preprocess.formats.metric_map import apm_kpi
from preprocess.schema import APM_KPIS
from rca.errors import InputError

log = logging.getLogger(__name__)

MATCH_PLACEHOLDER = "<match>"
WINDOW_PLACEHOLDER = "<window>"
# A [1m] rate is what the presets always pulled: a rerun with no --rate-window fetches the same queries.
DEFAULT_RATE_WINDOW = timedelta(minutes=1)
SHIPPED_DIR = "presets"  # under this package, shipped as package data (pyproject.toml)
_ENTRY_KEYS = frozenset({"name", "about", "query"})
_FILE_KEYS = frozenset({"about", "series"})
_METRIC_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
# The placeholder is the last item of a selector: after "{" or ",", before "}". Anywhere else its
# replacement (or its absence) would not be valid PromQL.
_PLACED = re.compile(r"[{,]\s*" + re.escape(MATCH_PLACEHOLDER) + r"\s*}")
# The window placeholder is a whole range: alone inside a range's brackets.
_WINDOWED = re.compile(r"\[\s*" + re.escape(WINDOW_PLACEHOLDER) + r"\s*\]")
# A range written out ([1m], [1h30m]; a subquery's [5m:30s] is no rate's range), read outside the query's
# string literals (a label value may hold anything): such a query keeps it whatever --rate-window says.
_FIXED_RANGE = re.compile(r"\[\s*(?:\d+(?:ms|[smhdwy]))+\s*\]")
_STRING = re.compile(r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`""")
# PromQL's duration units, largest first, to write a window in a single unit (1m, 90s, 1500ms).
_UNITS = (("d", timedelta(days=1)), ("h", timedelta(hours=1)), ("m", timedelta(minutes=1)),
          ("s", timedelta(seconds=1)), ("ms", timedelta(milliseconds=1)))
# LABEL OP "VALUE" (PromQL's operators; a value in double or single quotes, escapes kept as written).
_MATCHER = re.compile(r"""\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')\s*""")


class PresetError(InputError):
    """A preset that cannot be had: an unknown name, a file that is not one, an entry that is malformed."""


@dataclass(frozen=True)
class PresetQuery:
    """One entry of a preset, its ``<match>`` and ``<window>`` already replaced."""

    preset: str  # the shipped name, or the path of the user's file
    name: str  # the series' canonical name: an infra KPI, or apm_<kpi>
    about: str
    query: str  # the PromQL sent
    scoped: bool  # the entry holds <match>: the --match matchers are in its query
    window: timedelta | None = None  # the range put at <window>; None: the entry holds none
    fixed_range: str | None = None  # the first range written out ("[1m]") of an entry without <window>

    @property
    def if_empty(self) -> str:
        """Why the query may match no series though the exporter is scraped, and what to do; "" when no rate.

        The commonest empty rate: a range holding a single sample (a scrape interval of half the
        range or more; Prometheus' default interval is 1m, the default range too). Said after the
        note on an empty query, not checked against the server (its scrape interval is not asked).
        """
        if self.window is not None:
            window = promql_duration(self.window)
            return (f"a rate over [{window}] needs two samples inside {window}: if the scrape interval is "
                    f"{_spelled(self.window / 2)} or more, give --rate-window {promql_duration(4 * self.window)} "
                    f"(four scrape intervals of {window})")
        if self.fixed_range is not None:
            return (f"a rate over {self.fixed_range} needs two samples inside it: if the scrape interval is half "
                    f"of it or more, write the preset's ranges as [{WINDOW_PLACEHOLDER}] and give --rate-window "
                    "(four scrape intervals)")
        return ""


class PresetEntry(NamedTuple):
    """One ``[[series]]`` of a preset file, as written (its query still holds ``<match>`` and ``<window>``)."""

    name: str
    about: str
    query: str


@dataclass(frozen=True)
class Preset:
    name: str  # the shipped name, or the path of the user's file
    about: str
    entries: tuple[PresetEntry, ...]

    def queries(self, matchers: Sequence[str] = (), *, window: timedelta = DEFAULT_RATE_WINDOW) -> list[PresetQuery]:
        """Every entry's query with ``matchers`` (already checked by ``parse_matcher``) at ``<match>``, ``window`` at
        ``<window>``; ``PresetError`` naming ``--rate-window`` when PromQL cannot take ``window``."""
        text, range_text = ", ".join(matchers), promql_duration(window)
        out = []
        for entry in self.entries:
            windowed = WINDOW_PLACEHOLDER in entry.query
            fixed = None if windowed else _FIXED_RANGE.search(_STRING.sub('""', entry.query))
            out.append(PresetQuery(
                preset=self.name, name=entry.name, about=entry.about,
                query=entry.query.replace(MATCH_PLACEHOLDER, text).replace(WINDOW_PLACEHOLDER, range_text),
                scoped=MATCH_PLACEHOLDER in entry.query, window=window if windowed else None,
                fixed_range=" ".join(fixed.group().split()) if fixed else None))
        return out


def promql_duration(span: timedelta) -> str:
    """``span`` as PromQL writes a duration, in its largest whole unit (``1m``, ``90s``, ``4h``, ``1500ms``).

    One unit, not ``1m30s``: every PromQL version reads it. ``PresetError`` naming ``--rate-window`` when
    ``span`` is not a positive whole number of milliseconds (Prometheus' resolution).
    """
    if span <= timedelta(0) or span % timedelta(milliseconds=1):
        raise PresetError(f"--rate-window {span.total_seconds():g}s: must be a positive duration of whole "
                          "milliseconds, e.g. 4m")
    unit, size = next((unit, size) for unit, size in _UNITS if not span % size)
    return f"{span // size}{unit}"


def _spelled(span: timedelta) -> str:
    """A duration said in a note: as PromQL writes it, or in seconds where it is finer than a millisecond."""
    return promql_duration(span) if span >= timedelta(milliseconds=1) and not span % timedelta(milliseconds=1) \
        else f"{span.total_seconds():g}s"


def _shipped() -> Traversable:
    return resources.files("preprocess.formats").joinpath(SHIPPED_DIR)


def shipped_presets() -> list[str]:
    """The names of the presets shipped with the package, sorted."""
    return sorted(item.name.removesuffix(".toml") for item in _shipped().iterdir() if item.name.endswith(".toml"))


def load_preset(name_or_path: str) -> Preset:
    """A shipped preset by its name, or the user's TOML file by its path; ``PresetError`` when neither."""
    if name_or_path in shipped_presets():
        text = _shipped().joinpath(f"{name_or_path}.toml").read_text(encoding="utf-8")
        return parse_preset(text, source=name_or_path)
    path = Path(name_or_path)
    if not path.is_file():
        raise PresetError(f"--preset {name_or_path!r}: neither a shipped preset ({', '.join(shipped_presets())}) "
                          "nor a file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PresetError(f"{path}: cannot read the preset: {exc}") from None
    return parse_preset(text, source=str(path))


def parse_preset(text: str, *, source: str) -> Preset:
    """The preset in TOML ``text``; every error names ``source`` and, for an entry, its index and name."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PresetError(f"{source}: invalid TOML: {exc}") from None
    unknown = sorted(set(document) - _FILE_KEYS)
    if unknown:
        raise PresetError(f"{source}: unknown key(s) {', '.join(unknown)} (a preset has 'about' and [[series]])")
    series = document.get("series")
    if not isinstance(series, list) or not series:
        raise PresetError(f"{source}: no [[series]] entries")
    about = document.get("about", "")
    if not isinstance(about, str):
        raise PresetError(f"{source}: 'about' must be a string")
    entries = tuple(_entry(raw, source=source, index=i) for i, raw in enumerate(series))
    log.debug("preset %s: %d queries", source, len(entries))
    return Preset(name=source, about=about, entries=entries)


def _entry(raw: Any, *, source: str, index: int) -> PresetEntry:
    where = f"{source}: series[{index}]"
    if not isinstance(raw, dict):
        raise PresetError(f"{where}: not a table (write it as [[series]])")
    name = raw.get("name")
    if isinstance(name, str):
        where = f"{where} ({name})"
    unknown = sorted(set(raw) - _ENTRY_KEYS)
    if unknown:
        raise PresetError(f"{where}: unknown key(s) {', '.join(unknown)} (an entry has name, about, query)")
    for key in sorted(_ENTRY_KEYS):
        value = raw.get(key)
        if not isinstance(value, str) or not value.strip():
            raise PresetError(f"{where}: '{key}' must be a non-empty string")
    name, about, query = raw["name"].strip(), raw["about"].strip(), raw["query"].strip()
    if not _METRIC_NAME.fullmatch(name):
        raise PresetError(f"{where}: name {name!r} is not a metric name ([A-Za-z_:][A-Za-z0-9_:]*)")
    if name.startswith("apm_") and apm_kpi(name) is None:
        # Else it would import silently as an infra KPI of that name.
        raise PresetError(f"{where}: {name!r} is no APM column; apm_ names are apm_ + one of {', '.join(APM_KPIS)}")
    if "\n" in about:
        raise PresetError(f"{where}: 'about' must be one line")
    if query.count(MATCH_PLACEHOLDER) != len(_PLACED.findall(query)):
        raise PresetError(f"{where}: {MATCH_PLACEHOLDER} must be the last item inside a selector's braces, "
                          f"e.g. {{job=\"x\", {MATCH_PLACEHOLDER}}} or {{{MATCH_PLACEHOLDER}}}")
    if query.count(WINDOW_PLACEHOLDER) != len(_WINDOWED.findall(query)):
        raise PresetError(f"{where}: {WINDOW_PLACEHOLDER} must stand alone inside a range's brackets, "
                          f"e.g. rate(x[{WINDOW_PLACEHOLDER}])")
    return PresetEntry(name, about, query)


def parse_matcher(text: str) -> str:
    """``--match 'namespace="prod"'`` -> the matcher as PromQL reads it; ``PresetError`` when it is not one."""
    found = _MATCHER.fullmatch(text)
    if found is None:
        raise PresetError(f"--match {text!r}: expected LABEL=\"VALUE\" (or !=, =~, !~), e.g. 'namespace=\"prod\"'")
    label, op, value = found.groups()
    return f"{label}{op}{value}"


def preset_queries(presets: Sequence[str], *, matchers: Sequence[str] = (),
                   window: timedelta = DEFAULT_RATE_WINDOW) -> list[PresetQuery]:
    """Every query of every preset named (shipped names or file paths), in order, scoped by ``matchers``, their
    rates over ``window``."""
    checked = [parse_matcher(text) for text in matchers]
    promql_duration(window)  # a window PromQL cannot take is refused before any file is read
    return [query for name in presets for query in load_preset(name).queries(checked, window=window)]
