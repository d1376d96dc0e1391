"""The benchmark report's figures, drawn with the case report's plotting code.

Every function takes plain data and a path and writes one PNG; the drawing itself is
``diagnose/report/plots.py`` (matplotlib, Agg, offline), the same code the case pages use.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from diagnose.report import plots
from rca.atomic import write_bytes_atomic


def _save(plot: plots.Plot, path: Path) -> Path:
    write_bytes_atomic(path, plot.png)
    return path


def accuracy_bars(*, tasks: list[str], agents: list[str], mean: dict[tuple[str, str], tuple[float, float, float]],
                  path: Path) -> Path:
    """Grouped bars: one group per task, one bar per agent, with the bootstrap interval."""
    nan = (np.nan, np.nan, np.nan)
    series = {a: [mean.get((t, a), nan)[0] for t in tasks] for a in agents}
    intervals = {a: [(mean.get((t, a), nan)[1], mean.get((t, a), nan)[2]) for t in tasks] for a in agents}
    return _save(plots.bar_plot(categories=tasks, series=series, intervals=intervals, title="accuracy per task",
                                value_label="accuracy (95% CI)", value_format="{:.2f}", value_limits=(0, 1.05)), path)


def heatmap(*, rows: list[str], cols: list[str], values: np.ndarray, path: Path, title: str,
            fmt: str = "{:.2f}", cmap: str = "viridis") -> Path:
    top = float(np.nanmax(values)) if values.size and np.isfinite(values).any() else 1.0
    return _save(plots.heatmap_plot(matrix=values, row_labels=rows, col_labels=cols, title=title,
                                    colour_label="value", cell_format=fmt, cmap=cmap, vmin=0.0,
                                    vmax=max(1.0, top)), path)


def cost_bars(*, agents: list[str], figures: dict[str, list[float]], path: Path) -> Path:
    """One panel per cost figure (tokens in/out, steps, seconds), one bar per agent."""
    return _save(plots.bar_panels(categories=agents, panels=figures, title="cost per agent"), path)
