"""The benchmark report's figures, drawn with the case-report plotting helpers
(``diagnose/report/plots.py``: matplotlib, offline). Each function takes plain data and a
path and writes one PNG."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from diagnose.report.plots import Plot, bar_plot, confusion_plot, heatmap_plot
from rca.atomic import write_bytes_atomic


def _save(plot: Plot, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, plot.png)
    return path


def accuracy_bars(*, tasks: list[str], agents: list[str], mean: dict[tuple[str, str], tuple[float, float, float]],
                  path: Path) -> Path:
    """Grouped bars: one group per task, one bar per agent (intervals are in the table)."""
    series = {a: [100 * mean.get((t, a), (0.0, 0.0, 0.0))[0] for t in tasks] for a in agents}
    return _save(bar_plot(categories=tasks, series=series, title="accuracy per task and agent",
                          value_label="accuracy (%)", value_unit="%", value_format="{:.0f}"), path)


def heatmap(*, rows: list[str], cols: list[str], values: np.ndarray, path: Path, title: str) -> Path:
    return _save(heatmap_plot(matrix=values.tolist(), row_labels=rows, col_labels=cols, title=title,
                              colour_label="accuracy", cell_format="{:.2f}", cmap="viridis", vmin=0.0, vmax=1.0), path)


def confusion(*, truths: list[str], answers: list[str], counts: np.ndarray, path: Path, title: str) -> Path:
    return _save(confusion_plot(labels=truths, predicted_labels=answers, counts=counts.tolist(), title=title,
                                predicted_label="answered fault type", truth_label="true fault type"), path)


def cost_bars(*, agents: list[str], figures: dict[str, list[float]], path: Path, title: str, value_label: str) -> Path:
    return _save(bar_plot(categories=agents, series=figures, title=title, value_label=value_label,
                          value_format="{:.0f}"), path)
