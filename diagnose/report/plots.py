"""Figures for the case page and the benchmark report: matplotlib (Agg), PNG bytes, no network.

Every function takes plain typed inputs, keyword-only, and returns a :class:`Plot` (PNG
bytes plus alt text); ``plot.data_uri`` inlines it in an HTML ``<img>``. Figures are built
on :class:`matplotlib.figure.Figure` directly, never ``pyplot``, so nothing is global and
threads may draw at once. Sizes fit a laptop's width (about 800 px wide).

Case figures (``diagnose.report.case``):

* :func:`series_plot` -- one KPI over the baseline and the incident window: window shaded,
  baseline band (median ± k·σ) drawn, onset marked, y axis in the KPI's unit, x in UTC.
* :func:`call_graph_plot` -- the window's call graph (networkx layered positions), edges
  coloured by p95 latency change against the baseline, error increases drawn dashed and
  labelled, the root cause highlighted and victims marked.
* :func:`log_counts_plot` -- per-minute counts of log templates, window shaded.

Generic figures (``bench`` reports):

* :func:`bar_plot` -- grouped bars, vertical or horizontal, values printed on the bars, optional intervals.
* :func:`bar_panels` -- small multiples of bars, one panel (own scale) per metric.
* :func:`line_plot` -- lines over a numeric or datetime x axis.
* :func:`heatmap_plot` -- a labelled matrix with a colour bar, cells annotated.
* :func:`confusion_plot` -- truth × predicted counts, coloured by row share.

:func:`ink_fraction` measures how much of a PNG is not background (tests and checks).
"""
from __future__ import annotations

import base64
import io
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import matplotlib

matplotlib.use("Agg")  # offline raster backend; must precede any figure creation

import matplotlib.dates as mdates  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import colormaps  # noqa: E402
from matplotlib.colors import LinearSegmentedColormap, Normalize  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import EngFormatter, PercentFormatter  # noqa: E402

from rca.timeutil import UTC  # noqa: E402

DPI = 110
WIDE = 7.4  # inches: ~815 px at DPI, readable on a laptop without scaling down
WINDOW_COLOUR = "#f4a261"
BASELINE_COLOUR = "#2a9d8f"
ONSET_COLOUR = "#c1121f"
ROOT_COLOUR = "#c1121f"
VICTIM_COLOUR = "#f4a261"
CANDIDATE_COLOUR = "#ffd166"
NORMAL_COLOUR = "#dfe7ef"
# Latency change of a call edge: unchanged is quiet grey, slower runs through orange to dark red.
LATENCY_CMAP = LinearSegmentedColormap.from_list("latency", ["#aab4c0", "#f4a261", "#e63946", "#6a040f"])


@dataclass(frozen=True)
class Plot:
    """One rendered figure."""

    png: bytes
    alt: str
    width_px: int
    height_px: int

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    fig.patch.set_facecolor("white")
    return fig


def render(fig: Figure, *, alt: str) -> Plot:
    """PNG bytes of ``fig`` (white background) as a :class:`Plot`."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, facecolor="white")
    width, height = (int(round(v)) for v in fig.get_size_inches() * DPI)
    return Plot(png=buffer.getvalue(), alt=alt, width_px=width, height_px=height)


def ink_fraction(png: bytes, *, background: tuple[int, int, int] = (255, 255, 255), tolerance: int = 8) -> float:
    """Share of pixels of ``png`` that differ from ``background`` by more than ``tolerance`` (0..1)."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=np.int16)
    distance = np.abs(pixels - np.array(background, dtype=np.int16)).max(axis=2)
    return float((distance > tolerance).mean())


# --------------------------------------------------------------------------- units and axes

def value_formatter(unit: str) -> PercentFormatter | EngFormatter:
    """Tick labels: percentages as such, bytes and packets with SI prefixes (kB/s, MB), others plain numbers
    with SI prefixes (the unit goes in the axis label)."""
    if unit == "%":
        return PercentFormatter(xmax=100, decimals=None)
    if unit.startswith(("B", "packets")):
        return EngFormatter(unit=unit, places=None, sep=" ")
    return EngFormatter(unit="", places=None, sep="")


def _time_axis(ax, *, label: bool = True) -> None:
    locator = mdates.AutoDateLocator(tz=UTC, minticks=4, maxticks=8)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=UTC))
    if label:
        lo = mdates.num2date(ax.get_xlim()[0], tz=UTC)
        ax.set_xlabel(f"time (UTC, {lo:%Y-%m-%d})")


def _date(value: datetime) -> float:
    """The x position of ``value`` on a time axis (matplotlib's date number, days since its epoch).

    Why converted here: matplotlib's type stubs take only floats and arrays of numbers for x
    (matplotlib#27140), though its unit system would convert datetimes itself to the same
    numbers; every time axis here gets its date locator and formatter from ``_time_axis``.
    """
    return float(mdates.date2num(value))


def _dates(values: Sequence[datetime]) -> np.ndarray:
    return np.array([_date(v) for v in values], dtype=float)


def _shade_window(ax, window: tuple[datetime, datetime], *, label: str | None = "incident window") -> None:
    ax.axvspan(_date(window[0]), _date(window[1]), color=WINDOW_COLOUR, alpha=0.18, lw=0, label=label)


def _empty(ax, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, fontsize=11, color="#555")
    ax.set_xticks([])
    ax.set_yticks([])


# --------------------------------------------------------------------------- case figures

@dataclass(frozen=True)
class SeriesPanel:
    """One KPI of one component: what :func:`series_plot` draws."""

    component: str
    kpi: str
    unit: str
    times: Sequence[datetime]
    values: Sequence[float]
    band: tuple[float, float] | None = None  # baseline median ± k·σ
    baseline_median: float | None = None
    onset: datetime | None = None
    note: str = ""  # e.g. "up 4.1x (z=9.3)"


def series_plot(
    *,
    panel: SeriesPanel,
    window: tuple[datetime, datetime],
    baseline_start: datetime,
    width: float = 5.0,
    height: float = 2.9,
) -> Plot:
    """One KPI over [baseline_start, window end]: window shaded, baseline band, onset line."""
    fig = _new_figure(width, height)
    ax = fig.add_subplot()
    title = f"{panel.component} · {panel.kpi}"
    ax.set_title(title + (f"\n{panel.note}" if panel.note else ""), fontsize=9, loc="left")
    if not panel.times:
        _empty(ax, "no samples in the window or its baseline")
        return render(fig, alt=f"{title}: no data")
    ax.axvspan(_date(baseline_start), _date(window[0]), color=BASELINE_COLOUR, alpha=0.06, lw=0)
    _shade_window(ax, window)
    if panel.band is not None:
        lo, hi = panel.band
        ax.fill_between(_dates([baseline_start, window[1]]), [lo, lo], [hi, hi], color=BASELINE_COLOUR, alpha=0.22,
                        lw=0, label="baseline band")
    if panel.baseline_median is not None:
        ax.axhline(panel.baseline_median, color=BASELINE_COLOUR, lw=1, ls="--", label="baseline median")
    ax.plot(_dates(panel.times), list(panel.values), color="#1d3557", lw=1.4,
            marker="." if len(panel.times) < 40 else None, label=panel.kpi)
    if panel.onset is not None:
        ax.axvline(_date(panel.onset), color=ONSET_COLOUR, lw=1.3, label=f"onset {panel.onset:%H:%M}")
    ax.set_xlim(_date(baseline_start), _date(window[1]))
    ax.yaxis.set_major_formatter(value_formatter(panel.unit))
    ax.set_ylabel(panel.unit or "value", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    _time_axis(ax)
    ax.xaxis.label.set_fontsize(8)
    fig.legend(fontsize=6.5, loc="outside lower center", ncol=5, frameon=False, handlelength=1.5, columnspacing=1.0)
    return render(fig, alt=f"{title} from {baseline_start:%H:%M} to {window[1]:%H:%M} UTC ({panel.unit})")


@dataclass(frozen=True)
class GraphEdge:
    """One caller -> callee edge of the window with its change against the baseline."""

    caller: str
    callee: str
    calls: int
    latency_ratio: float | None = None  # window p95 / baseline p95 (None: no baseline or no window calls)
    error_rate: float = 0.0  # window error share 0..1
    baseline_error_rate: float = 0.0
    vanished: bool = False  # called in the baseline, not in the window


@dataclass(frozen=True)
class GraphNode:
    name: str
    role: Literal["root", "victim", "candidate", "normal"] = "normal"
    detail: str = ""  # second label line, e.g. the guilty pod


def _layers(graph: nx.DiGraph) -> dict[str, int]:
    """Column of each node: the longest call chain leading to it, so callees sit right of all callers.

    Cycles (rare in call graphs) are collapsed first, their members sharing a column.
    """
    condensed = nx.condensation(graph)
    column: dict[int, int] = {}
    for component in nx.topological_sort(condensed):
        column[component] = max((column[p] + 1 for p in condensed.predecessors(component)), default=0)
    return {node: column[condensed.graph["mapping"][node]] for node in graph}


def call_graph_plot(
    *,
    nodes: Sequence[GraphNode],
    edges: Sequence[GraphEdge],
    title: str,
    width: float = WIDE,
    height: float | None = None,
) -> Plot:
    """Layered call graph, edges coloured by log2 p95 latency change; errors dashed; roles coloured."""
    graph = nx.DiGraph()
    for spec in nodes:
        graph.add_node(spec.name)
    for edge in edges:
        graph.add_edge(edge.caller, edge.callee)
    layers = _layers(graph) if graph.number_of_nodes() else {}
    tallest = max(Counter(layers.values()).values(), default=1)
    fig = _new_figure(width, height if height is not None else max(3.8, 0.62 * tallest + 1.4))
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=10, loc="left")
    ax.set_axis_off()
    if graph.number_of_nodes() == 0:
        _empty(ax, "no calls recorded in the window")
        return render(fig, alt=f"{title}: no trace data")
    for node, layer in layers.items():
        graph.nodes[node]["layer"] = layer
    pos = nx.multipartite_layout(graph, subset_key="layer", align="vertical", scale=1.0)
    role = {n.name: n for n in nodes}

    cmap = LATENCY_CMAP
    norm = Normalize(vmin=0.0, vmax=3.0)  # log2 p95 ratio: unchanged (grey) .. 8x (dark red)
    by_pair = {(e.caller, e.callee): e for e in edges}
    for (u, v), edge in by_pair.items():
        change = math.log2(edge.latency_ratio) if edge.latency_ratio and edge.latency_ratio > 0 else 0.0
        colour = "#9aa5b1" if edge.vanished else cmap(norm(max(0.0, min(3.0, change))))
        error_rise = edge.error_rate - edge.baseline_error_rate
        style = "dashed" if edge.vanished or error_rise >= 0.05 else "solid"
        width_pt = 1.0 + 2.5 * min(1.0, math.log10(max(1, edge.calls)) / 4)
        nx.draw_networkx_edges(graph, pos, edgelist=[(u, v)], ax=ax, edge_color=[colour], width=width_pt, style=style,
                               arrows=True, arrowsize=11, node_size=1700, connectionstyle="arc3,rad=0.06")
        notes: list[str] = []
        if edge.latency_ratio and abs(change) >= 0.4:
            notes.append(f"p95 {edge.latency_ratio:.1f}x")
        if error_rise >= 0.05:
            notes.append(f"err {edge.error_rate:.0%}")
        if edge.vanished:
            notes.append("no calls")
        if notes:
            nx.draw_networkx_edge_labels(graph, pos, edge_labels={(u, v): ", ".join(notes)}, ax=ax, font_size=6,
                                         font_color="#7a0010", bbox={"alpha": 0.7, "color": "white", "lw": 0},
                                         connectionstyle="arc3,rad=0.06")
    fill: dict[str, str] = {"root": ROOT_COLOUR, "victim": VICTIM_COLOUR, "candidate": CANDIDATE_COLOUR, "normal": NORMAL_COLOUR}
    for kind in ("normal", "candidate", "victim", "root"):
        members = [name for name in graph if role.get(name, GraphNode(name)).role == kind]
        if members:
            nx.draw_networkx_nodes(graph, pos, nodelist=members, ax=ax, node_color=fill[kind], node_size=2100 if kind == "root" else 1100,
                                   edgecolors="#222" if kind == "root" else "#667", linewidths=2.2 if kind == "root" else 0.8,
                                   node_shape="s" if kind == "root" else "o")
    names: dict[str, str] = {}
    for n in graph:
        detail = role[n].detail if n in role else ""
        names[n] = n.replace("service", "\nservice") if len(n) > 12 else n
        if detail:
            names[n] += f"\n({detail})"
    for n, text in names.items():
        is_root = role.get(n, GraphNode(n)).role == "root"
        nx.draw_networkx_labels(graph, pos, labels={n: text}, ax=ax, font_size=6.5,
                                font_color="white" if is_root else "black", font_weight="bold" if is_root else "normal")
    for n in graph:
        if role.get(n, GraphNode(n)).role == "root":
            x, y = pos[n]
            ax.annotate("root cause", (x, y), xytext=(0, 26), textcoords="offset points", ha="center", fontsize=8,
                        fontweight="bold", color=ROOT_COLOUR)
    legend = [
        Patch(facecolor=ROOT_COLOUR, edgecolor="#222", label="root cause (answer)"),
        Patch(facecolor=VICTIM_COLOUR, label="victim (anomalous, not chosen)"),
        Patch(facecolor=CANDIDATE_COLOUR, label="other candidate"),
        Line2D([0], [0], color="#555", ls="dashed", label="errors up ≥5 pp / calls stopped"),
    ]
    ax.margins(x=0.08, y=0.14)  # room for the square root node and its label at the edges
    fig.legend(handles=legend, fontsize=6.5, loc="outside lower center", ncol=4, frameon=False)
    bar = fig.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, shrink=0.7, pad=0.01)
    bar.set_ticks([0, 1, 2, 3])
    bar.set_ticklabels(["≤1x", "2x", "4x", "≥8x"])
    bar.set_label("p95 latency, window / baseline", fontsize=7)
    bar.ax.tick_params(labelsize=7)
    roots = [n.name for n in nodes if n.role == "root"]
    return render(fig, alt=f"{title}: {graph.number_of_nodes()} components, {len(by_pair)} call edges"
                           + (f", root cause {roots[0]}" if roots else ""))


@dataclass(frozen=True)
class TemplateCounts:
    """Per-minute line counts of one log template on one pod."""

    label: str  # e.g. "frontend-0 · new · connection refused"
    times: Sequence[datetime]
    counts: Sequence[int]


def log_counts_plot(
    *,
    templates: Sequence[TemplateCounts],
    window: tuple[datetime, datetime],
    baseline_start: datetime,
    title: str = "log lines per minute",
    width: float = WIDE,
    height: float | None = None,
) -> Plot:
    """Lines per minute of each template, window shaded (step lines, one colour per template)."""
    fig = _new_figure(width, height if height is not None else 2.6 + 0.14 * (len(templates) + 1))
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=10, loc="left")
    if not templates:
        _empty(ax, "no bursting or new log templates")
        return render(fig, alt=f"{title}: none")
    _shade_window(ax, window)
    colours = colormaps["tab10"]
    for i, template in enumerate(templates):
        ax.step(_dates(template.times), list(template.counts), where="post", color=colours(i % 10), lw=1.4,
                label=template.label[:70])
    ax.set_xlim(_date(baseline_start), _date(window[1]))
    ax.set_ylim(bottom=0)
    ax.set_ylabel("lines / min", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    _time_axis(ax)
    ax.xaxis.label.set_fontsize(8)
    fig.legend(fontsize=6.5, loc="outside lower center", ncol=2, frameon=False)
    return render(fig, alt=f"{title}: {len(templates)} template(s)")


# --------------------------------------------------------------------------- generic figures

def bar_plot(
    *,
    categories: Sequence[str],
    series: Mapping[str, Sequence[float]],
    title: str,
    value_label: str,
    category_label: str = "",
    horizontal: bool = False,
    value_format: str = "{:.1f}",
    value_unit: str = "",
    intervals: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    value_limits: tuple[float, float] | None = None,
    width: float = WIDE,
    height: float | None = None,
) -> Plot:
    """Grouped bars: one group per category, one bar per series; values printed on the bars.

    ``intervals`` (per series, one ``(low, high)`` per category, e.g. a bootstrap 95% CI) are
    drawn as error bars; NaN values leave a gap. ``value_limits`` fixes the value axis.

    ``value_unit`` "%" formats the value axis as percent (values 0..100).
    Example: ``bar_plot(categories=["node", "pod"], series={"1.5B": [40, 55]}, title="score",
    value_label="final score (%)", value_unit="%")``.
    """
    n_series = max(1, len(series))
    if height is None:
        height = max(2.6, 0.32 * len(categories) * n_series + 1.2) if horizontal else 3.2
    fig = _new_figure(width, height)
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=10, loc="left")
    if not categories or not series:
        _empty(ax, "no data")
        return render(fig, alt=f"{title}: no data")
    positions = np.arange(len(categories))
    thickness = 0.8 / n_series
    colours = colormaps["tab10"]
    for i, (name, values) in enumerate(series.items()):
        offsets = positions - 0.4 + thickness * (i + 0.5)
        heights = np.asarray(values, dtype=float)
        error = None
        if intervals is not None and name in intervals:
            bounds = np.asarray(intervals[name], dtype=float).reshape(-1, 2)
            error = np.clip(np.nan_to_num(np.vstack([heights - bounds[:, 0], bounds[:, 1] - heights])), 0, None)
        if horizontal:
            bars = ax.barh(offsets, heights, height=thickness, color=colours(i % 10), label=name, xerr=error,
                           capsize=2 if error is not None else 0)
        else:
            bars = ax.bar(offsets, heights, width=thickness, color=colours(i % 10), label=name, yerr=error,
                          capsize=2 if error is not None else 0)
        ax.bar_label(bars, labels=["" if math.isnan(v) else value_format.format(v) for v in heights], fontsize=6.5,
                     padding=2)
    value_axis, category_axis = (ax.xaxis, ax.yaxis) if horizontal else (ax.yaxis, ax.xaxis)
    if horizontal:
        ax.set_yticks(positions, list(categories), fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(value_label, fontsize=8)
        ax.set_ylabel(category_label, fontsize=8)
        ax.margins(x=0.12)
    else:
        ax.set_xticks(positions, list(categories), fontsize=7, rotation=30 if len(categories) > 6 else 0,
                      ha="right" if len(categories) > 6 else "center")
        ax.set_ylabel(value_label, fontsize=8)
        ax.set_xlabel(category_label, fontsize=8)
        ax.margins(y=0.12)
    if value_unit:
        value_axis.set_major_formatter(value_formatter(value_unit))
    if value_limits is not None:
        (ax.set_xlim if horizontal else ax.set_ylim)(*value_limits)
    category_axis.set_tick_params(length=0)
    ax.tick_params(labelsize=7)
    ax.grid(axis="x" if horizontal else "y", alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=7, framealpha=0.85)
    return render(fig, alt=f"{title}: {len(categories)} categories × {len(series)} series")


def bar_panels(
    *,
    categories: Sequence[str],
    panels: Mapping[str, Sequence[float]],
    title: str = "",
    value_format: str = "{:,.4g}",
    width: float = WIDE,
    height: float = 3.0,
) -> Plot:
    """Small multiples: one panel per metric (its own scale, its name as title), one bar per category.

    Example: cost per agent, ``panels={"prompt tokens": [...], "seconds": [...]}``.
    """
    fig = _new_figure(width, height)
    if title:
        fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    if not categories or not panels:
        _empty(fig.add_subplot(), "no data")
        return render(fig, alt=f"{title or 'panels'}: no data")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    colours = colormaps["tab10"]
    for ax, (name, values) in zip(axes, panels.items()):
        bars = ax.bar(range(len(categories)), list(values), color=[colours(i % 10) for i in range(len(categories))])
        ax.bar_label(bars, labels=[value_format.format(v) for v in values], fontsize=6, padding=2)
        ax.set_xticks(range(len(categories)), list(categories), rotation=45, ha="right", fontsize=7)
        ax.set_title(name, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.margins(y=0.15)
        ax.grid(axis="y", alpha=0.3)
    return render(fig, alt=f"{title or 'panels'}: {', '.join(panels)} for {len(categories)} categories")


def line_plot(
    *,
    x: Sequence[float] | Sequence[datetime],
    series: Mapping[str, Sequence[float]],
    title: str,
    x_label: str,
    y_label: str,
    y_unit: str = "",
    window: tuple[datetime, datetime] | None = None,
    width: float = WIDE,
    height: float = 3.0,
) -> Plot:
    """Lines sharing one x axis (numbers, or UTC datetimes with an optional shaded window)."""
    fig = _new_figure(width, height)
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=10, loc="left")
    if not len(x) or not series:
        _empty(ax, "no data")
        return render(fig, alt=f"{title}: no data")
    colours = colormaps["tab10"]
    positions = [_date(v) if isinstance(v, datetime) else float(v) for v in x]
    for i, (name, values) in enumerate(series.items()):
        ax.plot(positions, list(values), color=colours(i % 10), lw=1.4, marker="o" if len(x) <= 20 else None, ms=3,
                label=name)
    is_time = isinstance(x[0], datetime)
    if window is not None and is_time:
        _shade_window(ax, window)
    if y_unit:
        ax.yaxis.set_major_formatter(value_formatter(y_unit))
    ax.set_ylabel(y_label, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    if is_time:
        _time_axis(ax, label=False)
    ax.set_xlabel(x_label, fontsize=8)
    if len(series) > 1 or window is not None:
        ax.legend(fontsize=7, framealpha=0.85)
    return render(fig, alt=f"{title}: {len(series)} series over {len(x)} points")


def heatmap_plot(
    *,
    matrix: Sequence[Sequence[float]],
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    title: str,
    colour_label: str,
    row_title: str = "",
    col_title: str = "",
    cell_format: str = "{:.0f}",
    cmap: str = "Blues",
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool = True,
    width: float = WIDE,
    height: float | None = None,
) -> Plot:
    """A labelled matrix with a colour bar; cells annotated with ``cell_format``; NaN cells left blank."""
    data = np.asarray(matrix, dtype=float).reshape(len(row_labels), len(col_labels))
    if height is None:
        height = max(2.6, 0.3 * len(row_labels) + 1.6)
    fig = _new_figure(width, height)
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=10, loc="left")
    if data.size == 0:
        _empty(ax, "no data")
        return render(fig, alt=f"{title}: no data")
    masked = np.ma.masked_invalid(data)
    finite = data[np.isfinite(data)]
    norm = Normalize(vmin=vmin if vmin is not None else (finite.min() if finite.size else 0.0),
                     vmax=vmax if vmax is not None else (finite.max() if finite.size else 1.0))
    image = ax.imshow(masked, cmap=cmap, norm=norm, aspect="auto")
    ax.set_xticks(range(len(col_labels)), list(col_labels), fontsize=7, rotation=40 if len(col_labels) > 5 else 0,
                  ha="right" if len(col_labels) > 5 else "center")
    ax.set_yticks(range(len(row_labels)), list(row_labels), fontsize=7)
    ax.set_xlabel(col_title, fontsize=8)
    ax.set_ylabel(row_title, fontsize=8)
    if annotate and data.size <= 600:
        colour_map = colormaps[cmap]
        for (r, c), value in np.ndenumerate(data):
            if not np.isfinite(value):
                continue
            red, green, blue, _ = colour_map(norm(value))
            dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
            ax.text(c, r, cell_format.format(value), ha="center", va="center", fontsize=6.5,
                    color="white" if dark else "black")
    bar = fig.colorbar(image, ax=ax, shrink=0.85, pad=0.01)
    bar.set_label(colour_label, fontsize=7)
    bar.ax.tick_params(labelsize=7)
    return render(fig, alt=f"{title}: {len(row_labels)} × {len(col_labels)}")


def confusion_plot(
    *,
    labels: Sequence[str],
    counts: Sequence[Sequence[int]],
    title: str,
    truth_label: str = "truth",
    predicted_label: str = "predicted",
    predicted_labels: Sequence[str] | None = None,
    width: float = WIDE,
    height: float | None = None,
) -> Plot:
    """Confusion matrix: rows are truth, columns predictions; cells show counts, colour the row share."""
    columns = list(predicted_labels) if predicted_labels is not None else list(labels)
    data = np.asarray(counts, dtype=float).reshape(len(labels), len(columns))
    totals = data.sum(axis=1, keepdims=True)
    share = np.divide(data, totals, out=np.zeros_like(data), where=totals > 0)
    fig = _new_figure(width, height if height is not None else max(2.6, 0.3 * len(labels) + 1.6))
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=10, loc="left")
    if data.size == 0:
        _empty(ax, "no cases")
        return render(fig, alt=f"{title}: no cases")
    norm = Normalize(vmin=0, vmax=100)
    image = ax.imshow(share * 100, cmap="Blues", norm=norm, aspect="auto")
    ax.set_xticks(range(len(columns)), columns, fontsize=7, rotation=40 if len(columns) > 5 else 0,
                  ha="right" if len(columns) > 5 else "center")
    ax.set_yticks(range(len(labels)), list(labels), fontsize=7)
    ax.set_xlabel(predicted_label, fontsize=8)
    ax.set_ylabel(truth_label, fontsize=8)
    for (r, c), value in np.ndenumerate(data):
        if value:
            ax.text(c, r, f"{value:.0f}", ha="center", va="center", fontsize=6.5,
                    color="white" if share[r, c] > 0.55 else "black")
    bar = fig.colorbar(image, ax=ax, shrink=0.85, pad=0.01)
    bar.set_label("share of the truth row (%)", fontsize=7)
    bar.ax.tick_params(labelsize=7)
    return render(fig, alt=f"{title}: {int(data.sum())} cases")


__all__ = [
    "Plot", "SeriesPanel", "GraphEdge", "GraphNode", "TemplateCounts",
    "series_plot", "call_graph_plot", "log_counts_plot", "bar_plot", "bar_panels", "line_plot", "heatmap_plot",
    "confusion_plot", "ink_fraction", "render", "value_formatter",
]
