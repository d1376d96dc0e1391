"""The agent-cloud observation tools: what an agent may look at for one incident window.

    toolbox = case_toolbox(case, evidence=..., knowledge=..., telemetry=RawTelemetry(data_dir, naming=spec.trace),
                           system=spec)
    toolbox.describe()                                  # tool docs for the agent's prompt
    toolbox.call("get_metrics", {"component": "cartservice"})   # -> observation text (never raises)
    toolbox.names                                       # ["get_metrics", "get_logs", ...]

Tools: ``get_metrics`` reads the metric events of the evidence index's one scoring of the
window (``index.query.ScoredWindow``: the configured ``IndexParams``, other incidents left
out of the baseline), the same events the ranking and the case report read; ``get_logs``
compares the same scoring's per-minute counts of the index's Drain templates (the templates
the ranking and the case report name) with its baseline; ``get_traces`` summarises the raw
telemetry of the case window against that baseline (read once per case through
``preprocess.readers``) with the trace detector's thresholds;
``get_candidates`` is the evidence index's ranking; ``search_sops`` the knowledge base. Every observation is bounded (``max_chars``) and its first line is the
strongest finding, led by the KPI, log keyword or call edge, so a trace step can quote it.

A bad call never raises: unknown tools, unknown or missing arguments and component names
that do not exist in the data come back as observations listing the valid choices, and a
tool's own exception becomes an observation too (the model reads it and tries again).
Other tools (mitigation actions, ``submit``) join with :meth:`Toolbox.add`.
"""
from __future__ import annotations

import difflib
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import polars as pl

from diagnose.cases import Case
from index.models import Candidate
from index.query import ScoredWindow
from preprocess.baseline import window_first_minute
from preprocess.detect_log import template_keyword
from preprocess.detect_metric import metric_series
from preprocess.detect_trace import call_edges
from preprocess.readers import read_apm, read_infra, read_logs, read_traces
from rca.errors import RcaError
from rca.system import SystemSpec, TraceNaming
from rca.timeutil import format_utc

log = logging.getLogger(__name__)

DEFAULT_MAX_CHARS = 1200
DEFAULT_LIMIT = 8
MAX_LIMIT = 20


class ToolError(RcaError, ValueError):
    """A tool cannot answer these arguments; the message becomes the observation."""


# --------------------------------------------------------------------------- contracts


@dataclass(frozen=True)
class Param:
    """One argument of a tool (the diagnoser's tools and the harness's cloud actions alike).
    ``component`` arguments are checked against the data, ``integer`` ones against their range."""

    name: str
    description: str
    kind: Literal["component", "string", "integer"] = "string"
    required: bool = False
    choices: tuple[str, ...] = ()
    minimum: int = 1  # integer range, both ends included
    maximum: int = MAX_LIMIT

    def json_schema(self, *, components: Sequence[str] = ()) -> dict[str, Any]:
        if self.kind == "integer":
            return {"type": "integer", "minimum": self.minimum, "maximum": self.maximum}
        if self.kind == "component" and components:
            return {"type": "string", "enum": list(components)}
        if self.choices:
            return {"type": "string", "enum": list(self.choices)}
        return {"type": "string"}  # no maxLength: llama.cpp turns a bound into nested rules (slow on CPU)


@dataclass(frozen=True)
class ToolSpec:
    """What a tool is called, what it does and its arguments: the one tool contract, shown to
    agents and checked by :class:`Toolbox` before the tool runs."""

    name: str
    description: str
    params: tuple[Param, ...] = ()

    def render(self) -> str:
        args = ", ".join(f"{p.name}{'' if p.required else '?'}" for p in self.params)
        return f"- {self.name}({args}): {self.description}"


@dataclass(frozen=True)
class Observation:
    """What a tool call returned: the text for the model and its lead line for the trace."""

    text: str
    lead: str
    ok: bool = True
    empty: bool = False  # the tool ran and found nothing abnormal


class Tool(Protocol):
    spec: ToolSpec

    def run(self, args: dict[str, Any]) -> Observation | str: ...


@dataclass
class FunctionTool:
    """A tool made of a spec and a function (how callers add their own, e.g. ``submit``)."""

    spec: ToolSpec
    fn: Callable[[dict[str, Any]], Observation | str]

    def run(self, args: dict[str, Any]) -> Observation | str:
        return self.fn(args)


def bound(text: str, max_chars: int) -> str:
    """Cut ``text`` at a line boundary within ``max_chars``, saying how much was left out."""
    if len(text) <= max_chars:
        return text
    kept: list[str] = []
    size = 0
    lines = text.splitlines()
    for line in lines:
        if size + len(line) + 1 > max_chars - 40:
            break
        kept.append(line)
        size += len(line) + 1
    if not kept:  # a single huge line
        return text[: max_chars - 20] + " …(cut)"
    return "\n".join(kept) + f"\n…({len(lines) - len(kept)} more lines cut)"


class Toolbox:
    """Named tools with argument checking; every call returns an observation string."""

    def __init__(self, tools: Sequence[Tool] = (), *, components: Callable[[], Sequence[str]] | Sequence[str] = (),
                 max_chars: int = DEFAULT_MAX_CHARS, system: SystemSpec) -> None:
        self._tools: dict[str, Tool] = {}
        self._components = components
        self.system = system  # names pods' services in the hints of a wrong component
        self._known: list[str] | None = None
        self.max_chars = max_chars
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.spec.name in self._tools:
            raise ValueError(f"tool {tool.spec.name!r} is already in the toolbox")
        self._tools[tool.spec.name] = tool

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def spec(self, name: str) -> ToolSpec:
        return self._tools[name].spec

    @property
    def components(self) -> list[str]:
        """Component names that exist in the data of this case (services, pods, nodes)."""
        if self._known is None:
            source = self._components
            try:
                found = source() if callable(source) else source
            except (RcaError, OSError, pl.exceptions.PolarsError) as exc:
                log.warning("cannot list the components of the data: %s", exc)
                found = []
            self._known = sorted(set(found))
        return self._known

    def describe(self) -> str:
        """One line per tool, then each argument name once (? = optional); short for small models."""
        lines = [tool.spec.render() for tool in self._tools.values()]
        params: dict[str, str] = {}
        for tool in self._tools.values():
            for param in tool.spec.params:
                params.setdefault(param.name, param.description)
        if params:
            lines.append("Arguments: " + "; ".join(f"{name} = {text}" for name, text in params.items()))
        return "\n".join(lines)

    def call(self, name: str, args: Mapping[str, Any] | None) -> str:
        return self.invoke(name, args).text

    def invoke(self, name: str, args: Mapping[str, Any] | None) -> Observation:
        """Run one call; any problem comes back as an observation with ``ok=False``."""
        tool = self._tools.get(name)
        if tool is None:
            return self._error(f"unknown tool {name!r}; valid tools: {', '.join(self.names)}")
        if args is None:
            args = {}
        if not isinstance(args, Mapping):
            return self._error(f"{name}: args must be a JSON object, got {type(args).__name__}")
        checked, problem = self._check_args(tool.spec, dict(args))
        if problem:
            return self._error(problem)
        try:
            result = tool.run(checked)
        # A tool failure is information for the agent, not a crash of the diagnosis
        # (HolmesGPT style): whatever a tool raises, the model reads it and can adapt.
        except Exception as exc:  # noqa: BLE001
            log.warning("tool %s(%s) failed: %s", name, checked, exc)
            return self._error(f"{name} failed: {type(exc).__name__}: {exc}")
        if isinstance(result, str):
            text = result.strip() or f"{name}: no result"
            result = Observation(text=text, lead=text.splitlines()[0])
        return Observation(text=bound(result.text, self.max_chars), lead=result.lead, ok=result.ok, empty=result.empty)

    def action_schema(self, *, finish: str | None = "final_answer", component_enum: bool = False) -> dict[str, Any]:
        """JSON schema of one agent turn ``{"thought", "tool", "args"}``.

        One flat object: ``tool`` is one of the tool names (or ``finish``) and ``args`` may hold
        any argument of any tool; :meth:`invoke` checks them per tool and answers a wrong one
        with the valid choices. A branch per tool (``anyOf``) would be exact, but llama.cpp's
        grammar sampler then follows every branch through the shared ``thought`` prefix and a
        CPU call slows from seconds to minutes; likewise component names are free strings
        unless ``component_enum`` (an enum of every pod, service and node).
        """
        components = self.components if component_enum else ()
        props: dict[str, Any] = {}
        for tool in self._tools.values():
            for param in tool.spec.params:
                props.setdefault(param.name, param.json_schema(components=components))
        return {
            "type": "object",
            "properties": {
                "thought": {"type": "string"},
                "tool": {"type": "string", "enum": self.names + ([finish] if finish else [])},
                "args": {"type": "object", "properties": props, "additionalProperties": False},
            },
            "required": ["thought", "tool", "args"],
            "additionalProperties": False,
        }

    def _error(self, message: str) -> Observation:
        text = bound(f"error: {message}", self.max_chars)
        return Observation(text=text, lead=text.splitlines()[0], ok=False)

    def _check_args(self, spec: ToolSpec, args: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        params = {p.name: p for p in spec.params}
        valid = ", ".join(f"{p.name}{'' if p.required else '?'}" for p in spec.params) or "none"
        unknown = sorted(set(args) - set(params))
        if unknown:
            return args, f"{spec.name}: unknown argument(s) {', '.join(unknown)}; valid arguments: {valid}"
        for param in spec.params:
            value = args.get(param.name)
            if value is None or value == "":
                if param.required:
                    return args, f"{spec.name}: missing argument {param.name!r} ({param.description}); valid arguments: {valid}"
                args.pop(param.name, None)
                continue
            if param.kind == "integer":
                if isinstance(value, bool) or not isinstance(value, int | float) or not param.minimum <= value <= param.maximum:
                    return args, (f"{spec.name}: {param.name} must be an integer from {param.minimum} to {param.maximum},"
                                  f" got {value!r}")
                args[param.name] = int(value)
                continue
            if not isinstance(value, str):
                return args, f"{spec.name}: {param.name} must be a string, got {value!r}"
            if param.choices and value not in param.choices:
                return args, f"{spec.name}: {param.name} {value!r} is not one of: {', '.join(param.choices)}"
            if param.kind == "component":
                problem = self._check_component(spec.name, param.name, value.strip())
                if problem:
                    return args, problem
                args[param.name] = value.strip()
        return args, None

    def _check_component(self, tool: str, param: str, value: str) -> str | None:
        known = self.components
        if not known or value in known:
            return None
        close = difflib.get_close_matches(value, known, n=5, cutoff=0.5)
        system = self.system
        services = sorted({system.service_of(c) for c in known if not system.is_node(c)})
        hint = f"closest: {', '.join(close)}" if close else f"services: {', '.join(services)}"
        return f"{tool}: {param} {value!r} does not exist in the data of this incident; {hint}"


# --------------------------------------------------------------------------- telemetry


class TelemetrySource(Protocol):
    """Canonical frames of the raw telemetry over ``[start, end]`` (UTC)."""

    def metric_series(self, *, start: datetime, end: datetime) -> pl.DataFrame: ...  # SERIES_SCHEMA

    def logs(self, *, start: datetime, end: datetime) -> pl.DataFrame: ...  # LOG_SCHEMA

    def spans(self, *, start: datetime, end: datetime) -> pl.DataFrame: ...  # SPAN_SCHEMA


class RawTelemetry:
    """The released parquet layout under ``data_dir``, read through ``preprocess.readers``.

    ``naming`` is the system's ``[traces]`` (``SystemSpec.trace``): how spans name services and peers.
    """

    def __init__(self, data_dir: Path, *, naming: TraceNaming) -> None:
        self.data_dir = Path(data_dir)
        self.naming = naming

    def _check(self) -> None:
        if not self.data_dir.is_dir():
            raise ToolError(f"raw telemetry directory {self.data_dir} does not exist (setting paths.data_dir)")

    def metric_series(self, *, start: datetime, end: datetime) -> pl.DataFrame:
        self._check()
        apm = read_apm(self.data_dir, start=start, end=end).frame
        infra = read_infra(self.data_dir, start=start, end=end).frame
        return metric_series(apm=apm, infra=infra)

    def logs(self, *, start: datetime, end: datetime) -> pl.DataFrame:
        self._check()
        return read_logs(self.data_dir, start=start, end=end, columns=["pod", "node", "message"]).frame

    def spans(self, *, start: datetime, end: datetime) -> pl.DataFrame:
        self._check()
        return read_traces(self.data_dir, start=start, end=end, naming=self.naming).frame


class EvidenceLike(Protocol):
    """The evidence index of a case: its one scoring of a window, and the ranking made from it."""

    def query(self, *, start: datetime, end: datetime, top_k: int) -> Any: ...

    def score(self, *, start: datetime, end: datetime) -> ScoredWindow: ...


@dataclass
class CaseWindow:
    """One incident window: the index's scoring of it, and its raw telemetry frames read once and cached.

    The baseline is the scoring's own (it reaches past other incidents' windows), so the raw
    summaries compare the same minutes the index did.
    """

    start: datetime
    end: datetime
    evidence: EvidenceLike
    telemetry: TelemetrySource
    system: SystemSpec  # names pods' services and nodes
    _cache: dict[str, pl.DataFrame] = field(default_factory=dict)
    _scored: ScoredWindow | None = None

    @classmethod
    def of(cls, case: Case, *, telemetry: TelemetrySource, evidence: EvidenceLike,
           system: SystemSpec) -> CaseWindow:
        return cls(start=case.start, end=case.end, evidence=evidence, telemetry=telemetry, system=system)

    @property
    def scored(self) -> ScoredWindow:
        if self._scored is None:
            self._scored = self.evidence.score(start=self.start, end=self.end)
        return self._scored

    @property
    def baseline_start(self) -> datetime:
        return self.scored.baseline_start

    def _frame(self, name: str, read: Callable[..., pl.DataFrame]) -> pl.DataFrame:
        if name not in self._cache:
            self._cache[name] = read(start=self.baseline_start, end=self.end)
        return self._cache[name]

    def series(self) -> pl.DataFrame:
        return self._frame("series", self.telemetry.metric_series)

    def logs(self) -> pl.DataFrame:
        return self._frame("logs", self.telemetry.logs)

    def spans(self) -> pl.DataFrame:
        return self._frame("spans", self.telemetry.spans)

    @property
    def label(self) -> str:
        return (f"window {format_utc(self.start)}..{format_utc(self.end)} vs baseline from "
                f"{format_utc(self.baseline_start)}")

    def components(self) -> list[str]:
        """Services, pods and nodes seen in any modality of the window and its baseline."""
        found: set[str] = set()
        series = self.series()
        found |= set(series.get_column("component").drop_nulls().unique())
        logs = self.logs()
        found |= set(logs.get_column("pod").drop_nulls().unique()) | set(logs.get_column("node").drop_nulls().unique())
        spans = self.spans()
        found |= set(spans.get_column("pod").drop_nulls().unique()) | set(spans.get_column("service").drop_nulls().unique())
        found |= {self.system.service_of(c) for c in found if not self.system.is_node(c)}
        return sorted(c for c in found if c)


def _belongs(column: str, component: str, *, system: SystemSpec) -> pl.Expr:
    """Rows of ``component``: itself, or its pods when it is a service (``SystemSpec.service_of``)."""
    col = pl.col(column)
    return (col == component) | (col.map_elements(system.service_of, return_dtype=pl.Utf8, skip_nulls=True) == component)


def _limit(args: dict[str, Any]) -> int:
    return int(args.get("limit") or DEFAULT_LIMIT)


def _fmt(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "?"
    return f"{value:.3g}"


COMPONENT = Param("component", "service, pod or node name; omit for all", kind="component")
LIMIT = Param("limit", f"lines to return (default {DEFAULT_LIMIT})", kind="integer")


def _nothing(text: str) -> Observation:
    return Observation(text=text, lead=text, empty=True)


def _findings(lines: list[str]) -> Observation:
    """Finding lines, the strongest first: the first leads (what a trace step quotes)."""
    return Observation(text="\n".join(lines), lead=lines[0])


class _WindowTool:
    """A tool over the case's window: the metric, log and trace tools each read the one
    ``CaseWindow`` that ``case_toolbox`` made, so the case's telemetry is read once."""

    def __init__(self, window: CaseWindow) -> None:
        self.window = window


class MetricsTool(_WindowTool):
    spec = ToolSpec("get_metrics", "KPIs that changed most in the incident window against the baseline",
                    (COMPONENT, LIMIT))

    def run(self, args: dict[str, Any]) -> Observation:
        w = self.window
        scored = w.scored
        series = scored.core["metric"]
        if series.height == 0:
            raise ToolError(f"no metric rows in the evidence index for {w.label}")
        events = scored.events["metric"]
        component = args.get("component")
        if component:
            series = series.filter(_belongs("component", component, system=w.system))
            if series.height == 0:
                return _nothing(f"{component}: no metric series in the data")
            events = events.filter(_belongs("component", component, system=w.system))
        checked = series.select("component", "kind", "kpi").unique().height
        if events.height == 0:
            return _nothing(f"{component or 'all components'}: no KPI deviates from the baseline "
                            f"({checked} series checked)")
        events = events.sort("z", descending=True)
        # Series that stop together are one finding: a component that stopped reporting.
        silent: dict[str, list[str]] = {}
        ranked: list[tuple[float, str]] = []
        for row in events.iter_rows(named=True):
            if row["direction"] == "silent":
                kpis = silent.setdefault(row["component"], [])
                if not kpis:
                    ranked.append((row["z"], row["component"]))
                kpis.append(row["kpi"])
                continue
            ratio = f" {row['ratio']:.1f}x" if row["ratio"] is not None and math.isfinite(row["ratio"]) else ""
            ranked.append((row["z"], f"{row['kpi']} {row['direction']}{ratio} on {row['component']}: "
                                     f"{_fmt(row['baseline'])} -> {_fmt(row['window_value'])} (z={row['z']:.1f})"))
        lines = []
        for _, text in ranked[: _limit(args)]:
            if text in silent:
                kpis = silent[text]
                text = f"{kpis[0]} went silent on {text}" + (f" with {', '.join(kpis[1:5])}" if kpis[1:] else "") + \
                    (f" and {len(kpis) - 5} more KPIs" if len(kpis) > 5 else "")
            lines.append(text)
        lines.append(f"({len(lines)} of {len(ranked)} findings; {events.height} changed series of {checked}; {w.label})")
        return _findings(lines)


class LogsTool(_WindowTool):
    spec = ToolSpec("get_logs", "log templates whose count rose or that are new in the window, and pods gone silent",
                    (COMPONENT, LIMIT))

    def run(self, args: dict[str, Any]) -> Observation:
        w = self.window
        scored = w.scored
        # The index's per-minute counts of its Drain templates over [baseline_start, scored_end]
        # and the templates' text: the templates the ranking and the case report show, rather
        # than others mined again here from the raw lines.
        minutes = scored.core["log"]
        component = args.get("component")
        if component:
            minutes = minutes.filter(_belongs("pod", component, system=w.system) | (pl.col("node") == component))
        minutes = minutes.filter(pl.col("count") > 0)
        if minutes.height == 0:
            return _nothing(f"{component or 'all components'}: no log lines in {w.label}")
        templates = scored.features.get("log_templates")
        if templates is not None:
            minutes = minutes.join(templates.select("template_id", "template"), on="template_id", how="left")
        else:
            minutes = minutes.with_columns(pl.lit(None, pl.Utf8).alias("template"))
        window_start = window_first_minute(w.start)  # the rows are whole minutes
        in_window = pl.col("time") >= pl.lit(window_start).dt.cast_time_unit("us")
        marked = minutes.with_columns(
            # A template the table lacks (an index mid-rebuild) shows its example line instead.
            pl.coalesce("template", "example").fill_null("").alias("template"),
            pl.col("pod").map_elements(w.system.service_of, return_dtype=pl.Utf8, skip_nulls=True).alias("service"),
            in_window.alias("in_window"),
        )
        window_minutes = (scored.scored_end - window_start).total_seconds() // 60 + 1
        scale = window_minutes / max(1.0, (window_start - w.baseline_start).total_seconds() / 60)
        counts = (
            marked.group_by("service", "template_id", "template")
            .agg(pl.col("count").filter(pl.col("in_window")).sum().alias("window"),
                 pl.col("count").filter(~pl.col("in_window")).sum().alias("baseline"),
                 pl.col("pod").filter(pl.col("in_window")).drop_nulls().unique().sort().alias("pods"))
            .with_columns((pl.col("baseline") * scale).alias("expected"))
            .with_columns(((pl.col("window") + 1) / (pl.col("expected") + 1)).alias("rise"))
            .filter((pl.col("window") > 0) & ((pl.col("baseline") == 0) | (pl.col("rise") >= 2.0)))
            # Ties broken by name: group_by's order varies from run to run.
            .sort(["rise", "window", "service", "template_id"], descending=[True, True, False, False], nulls_last=True)
        )
        lines = []
        for row in counts.head(_limit(args)).iter_rows(named=True):
            keyword = template_keyword(row["template"], max_chars=60)
            pods = ", ".join(row["pods"][:3]) or row["service"]
            if row["baseline"] == 0:
                lines.append(f"{keyword} x{row['window']} NEW in window on {pods}")
            else:
                lines.append(f"{keyword} x{row['window']} vs ~{row['expected']:.0f} expected on {pods}")
        pods_before = set(marked.filter(~pl.col("in_window")).get_column("pod").drop_nulls().unique())
        pods_now = set(marked.filter(pl.col("in_window")).get_column("pod").drop_nulls().unique())
        lines += [f"log stream silent on {pod} (logged in baseline, nothing in window)" for pod in sorted(pods_before - pods_now)]
        if not lines:
            return _nothing(f"{component or 'all components'}: no log template rose against the baseline "
                            f"({counts.height} templates checked)")
        lines.append(f"({counts.height} risen or new templates; {w.label})")
        return _findings(lines)


class TracesTool(_WindowTool):
    spec = ToolSpec("get_traces", "call edges caller->callee whose latency or error rate changed against the baseline",
                    (COMPONENT, LIMIT))

    def run(self, args: dict[str, Any]) -> Observation:
        w = self.window
        spans = w.spans()
        if spans.height == 0:
            raise ToolError(f"no trace spans for {w.label}")
        calls = call_edges(spans).with_columns(
            (pl.col("time") >= pl.lit(w.start).dt.cast_time_unit("us")).alias("in_window"))
        component = args.get("component")
        if component:
            calls = calls.filter(_belongs("caller", component, system=w.system) | _belongs("callee", component, system=w.system)
                                 | (pl.col("callee_pod") == component) | (pl.col("caller_pod") == component)
                                 | (pl.col("callee_node") == component))
            if calls.height == 0:
                return _nothing(f"{component}: no call edges in the traces")
        window_min = max(1.0, (w.end - w.start).total_seconds() / 60)
        base_min = max(1.0, (w.start - w.baseline_start).total_seconds() / 60)

        def side(flag: bool, prefix: str) -> list[pl.Expr]:
            chosen = pl.col("in_window") == flag
            return [
                chosen.sum().alias(f"{prefix}_calls"),
                pl.col("is_error").filter(chosen).sum().alias(f"{prefix}_errors"),
                pl.col("latency_us").filter(chosen).quantile(0.95, "nearest").alias(f"{prefix}_p95"),
            ]

        edges = calls.group_by("caller", "callee").agg(*side(True, "w"), *side(False, "b"))
        rows = []
        for row in edges.iter_rows(named=True):
            b_rate = row["b_errors"] / row["b_calls"] if row["b_calls"] else 0.0
            w_rate = row["w_errors"] / row["w_calls"] if row["w_calls"] else 0.0
            ratio = (row["w_p95"] / row["b_p95"]) if row["w_p95"] and row["b_p95"] else 1.0
            stopped = row["b_calls"] >= 3 and row["w_calls"] == 0
            score = max(math.log(max(ratio, 1e-9)), 0.0) + 5 * max(w_rate - b_rate, 0.0) + (3.0 if stopped else 0.0)
            rows.append((score, row, b_rate, w_rate, ratio, stopped))
        rows.sort(key=lambda r: -r[0])
        trace = w.scored.params.trace  # the detector's own thresholds: a change it would not call is not one here
        changed = [r for r in rows if r[0] >= math.log(trace.min_latency_ratio)
                   or r[3] - r[2] >= trace.min_error_rate_increase or r[5]]
        lines = []
        for _, row, b_rate, w_rate, ratio, stopped in changed[: _limit(args)]:
            edge = f"{row['caller']}->{row['callee']}"
            if stopped:
                lines.append(f"{edge} calls stopped: {row['b_calls'] / base_min:.1f}/min in baseline, none in window")
                continue
            lines.append(
                f"{edge} p95 {(row['b_p95'] or 0) / 1000:.0f}->{(row['w_p95'] or 0) / 1000:.0f} ms ({ratio:.1f}x), "
                f"errors {b_rate:.0%}->{w_rate:.0%}, calls {row['b_calls'] / base_min:.1f}->{row['w_calls'] / window_min:.1f}/min")
        if not lines:
            return _nothing(f"{component or 'all edges'}: no call edge changed latency or errors "
                            f"({len(rows)} edges checked)")
        lines.append(f"({len(changed)} of {len(rows)} edges changed; {w.label})")
        return _findings(lines)


class CandidatesTool:
    spec = ToolSpec("get_candidates", "components ranked by the evidence index (all modalities, call-graph aware), "
                    "with their strongest evidence", (LIMIT,))

    def __init__(self, window: CaseWindow, evidence: EvidenceLike, *, evidence_lines: int = 2,
                 ranked: Sequence[Candidate] | None = None) -> None:
        self.window = window
        self.evidence = evidence
        self.evidence_lines = evidence_lines
        self._ranked: list[Candidate] | None = list(ranked) if ranked is not None else None

    def ranked(self) -> list[Candidate]:
        if self._ranked is None:
            self._ranked = list(self.evidence.query(start=self.window.start, end=self.window.end, top_k=MAX_LIMIT).candidates)
        return self._ranked

    def run(self, args: dict[str, Any]) -> Observation:
        ranked = self.ranked()
        if not ranked:
            raise ToolError(f"the evidence index holds no candidates for {self.window.label}")
        limit = int(args.get("limit") or 5)
        lines = []
        for rank, cand in enumerate(ranked[:limit], start=1):
            evidence = "; ".join(item.text for item in cand.evidence[: self.evidence_lines]) or "no evidence lines"
            lines.append(f"{evidence} [#{rank} {cand.component} ({cand.level}) score {cand.score:.2f}]")
        return _findings(lines)


class KnowledgeLike(Protocol):
    def retrieve(self, summary: str, *, hints: Sequence[str], k: int) -> Sequence[Any]: ...

    def key_metrics(self, fault_type: str) -> list[str]: ...


class SopTool:
    # The example names no component: the prompt that lists the tools is the same for every system.
    spec = ToolSpec("search_sops", "runbook (SOP) excerpts for a symptom, e.g. 'pod_cpu_usage up' or a log keyword",
                    (Param("query", "symptom words: KPI, log keyword or fault type", required=True),))

    def __init__(self, knowledge: KnowledgeLike, *, k: int = 2, chars: int = 300) -> None:
        self.knowledge = knowledge
        self.k = k
        self.chars = chars

    def run(self, args: dict[str, Any]) -> Observation:
        query = args["query"]
        docs = self.knowledge.retrieve(query, hints=[], k=self.k)
        if not docs:
            return _nothing(f"no runbook matches {query!r}")
        lines = []
        for doc in docs:
            metrics = self.knowledge.key_metrics(doc.fault_type) if doc.fault_type else []
            head = f"{doc.title}" + (f" (key metrics: {', '.join(metrics[:4])})" if metrics else "")
            lines.append(f"{head}: {doc.excerpt[: self.chars]}")
        return _findings(lines)


def case_toolbox(
    case: Case,
    *,
    telemetry: TelemetrySource,
    evidence: EvidenceLike,
    knowledge: KnowledgeLike,
    max_chars: int = DEFAULT_MAX_CHARS,
    sop_k: int = 2,
    ranked: Sequence[Candidate] | None = None,
    system: SystemSpec,
) -> Toolbox:
    """The observation tools over one case's window (telemetry read lazily, once).

    ``ranked``: the index's candidates when the caller has queried them already. ``system``:
    the system under diagnosis, which names pods' services and nodes.
    """
    window = CaseWindow.of(case, telemetry=telemetry, evidence=evidence, system=system)
    candidates = CandidatesTool(window, evidence, ranked=ranked)

    def components() -> list[str]:
        try:
            found = window.components()
        except (RcaError, OSError, pl.exceptions.PolarsError) as exc:
            # Without raw telemetry the index's candidates are still components of the data.
            log.warning("%s: raw telemetry unavailable (%s); components from the index only", case.uuid, exc)
            found = []
        return sorted(set(found) | {c.component for c in candidates.ranked()})

    return Toolbox(
        [MetricsTool(window), LogsTool(window), TracesTool(window), candidates, SopTool(knowledge, k=sop_k)],
        components=components, max_chars=max_chars, system=system,
    )

