"""``rca import prometheus --url URL --preset NAME``: named PromQL query sets, read from TOML files.

A preset is data, not code: a TOML file, shipped in ``preprocess/formats/presets/`` (``kubernetes``,
``istio``, ``spanmetrics``) or the user's own, of this shape::

    about = "what the preset pulls"

    [[series]]
    name = "pod_cpu_usage"          # the name every series of the answer takes (the canonical KPI)
    about = "CPU used by the pod's containers, percent of one core"   # what it measures, its unit
    query = 'sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{container!="", <match>}[1m]))'

The answers of ``rate()``, ``sum()`` and the like carry no ``__name__``: the pull names each
series after its entry (``preprocess.formats.pull.PromQuery.name``), and ``metric_map`` reads the
name and the labels as it reads any Prometheus series (docs/formats/prometheus.md). Label renames
a preset needs (Istio's ``destination_workload`` as ``service``) are written in its PromQL with
``label_replace``, so every series reaches ``metric_map`` with the label spellings it already knows.

``<match>`` (``MATCH_PLACEHOLDER``) marks, as the last item of a selector's braces, where the
``--match`` label matchers go (``{container!="", <match>}`` -> ``{container!="", namespace="prod"}``;
none given: ``{container!="", }``, which PromQL reads as ``{container!=""}``). A query without it
is not scoped by ``--match`` (node_exporter's: a node serves every namespace).
"""
from __future__ import annotations

import logging
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, NamedTuple

from preprocess.formats.metric_map import apm_kpi
from preprocess.schema import APM_KPIS
from rca.errors import InputError

log = logging.getLogger(__name__)

MATCH_PLACEHOLDER = "<match>"
SHIPPED_DIR = "presets"  # under this package, shipped as package data (pyproject.toml)
_ENTRY_KEYS = frozenset({"name", "about", "query"})
_FILE_KEYS = frozenset({"about", "series"})
_METRIC_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
# The placeholder is the last item of a selector: after "{" or ",", before "}". Anywhere else its
# replacement (or its absence) would not be valid PromQL.
_PLACED = re.compile(r"[{,]\s*" + re.escape(MATCH_PLACEHOLDER) + r"\s*}")
# LABEL OP "VALUE" (PromQL's operators; a value in double or single quotes, escapes kept as written).
_MATCHER = re.compile(r"""\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')\s*""")


class PresetError(InputError):
    """A preset that cannot be had: an unknown name, a file that is not one, an entry that is malformed."""


@dataclass(frozen=True)
class PresetQuery:
    """One entry of a preset, its ``<match>`` already replaced."""

    preset: str  # the shipped name, or the path of the user's file
    name: str  # the series' canonical name: an infra KPI, or apm_<kpi>
    about: str
    query: str  # the PromQL sent
    scoped: bool  # the entry holds <match>: the --match matchers are in its query


class PresetEntry(NamedTuple):
    """One ``[[series]]`` of a preset file, as written (its query still holds ``<match>``)."""

    name: str
    about: str
    query: str


@dataclass(frozen=True)
class Preset:
    name: str  # the shipped name, or the path of the user's file
    about: str
    entries: tuple[PresetEntry, ...]

    def queries(self, matchers: Sequence[str] = ()) -> list[PresetQuery]:
        """Every entry's query with ``matchers`` (already checked by ``parse_matcher``) at ``<match>``."""
        text = ", ".join(matchers)
        return [PresetQuery(preset=self.name, name=entry.name, about=entry.about,
                            query=entry.query.replace(MATCH_PLACEHOLDER, text), scoped=MATCH_PLACEHOLDER in entry.query)
                for entry in self.entries]


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
    return PresetEntry(name, about, query)


def parse_matcher(text: str) -> str:
    """``--match 'namespace="prod"'`` -> the matcher as PromQL reads it; ``PresetError`` when it is not one."""
    found = _MATCHER.fullmatch(text)
    if found is None:
        raise PresetError(f"--match {text!r}: expected LABEL=\"VALUE\" (or !=, =~, !~), e.g. 'namespace=\"prod\"'")
    label, op, value = found.groups()
    return f"{label}{op}{value}"


def preset_queries(presets: Sequence[str], *, matchers: Sequence[str] = ()) -> list[PresetQuery]:
    """Every query of every preset named (shipped names or file paths), in order, scoped by ``matchers``."""
    checked = [parse_matcher(text) for text in matchers]
    return [query for name in presets for query in load_preset(name).queries(checked)]
