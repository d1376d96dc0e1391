"""The benchmark report's figures (matplotlib, offline, Agg).

Kept in one small module so it can switch to the case-report plotting helpers
(``diagnose/report/plots.py``) once those land; every function takes plain data and a
path and writes one PNG.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def accuracy_bars(*, tasks: list[str], agents: list[str], mean: dict[tuple[str, str], tuple[float, float, float]],
                  path: Path) -> Path:
    """Grouped bars: one group per task, one bar per agent, with the bootstrap interval."""
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(tasks) + 2), 3.8))
    width = 0.8 / max(1, len(agents))
    x = np.arange(len(tasks))
    for k, agent in enumerate(agents):
        vals = [mean.get((t, agent), (np.nan, np.nan, np.nan)) for t in tasks]
        m = np.array([v[0] for v in vals])
        err = np.array([[v[0] - v[1] for v in vals], [v[2] - v[0] for v in vals]])
        ax.bar(x + k * width - 0.4 + width / 2, m, width, yerr=np.clip(np.nan_to_num(err), 0, None), capsize=2, label=agent)
    ax.set_xticks(x, tasks)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy (95% CI)")
    ax.legend(fontsize=8, ncol=min(5, len(agents)), loc="upper center", bbox_to_anchor=(0.5, -0.12))
    return _save(fig, path)


def heatmap(*, rows: list[str], cols: list[str], values: np.ndarray, path: Path, title: str,
            fmt: str = "{:.2f}", cmap: str = "viridis") -> Path:
    fig, ax = plt.subplots(figsize=(max(5, 0.55 * len(cols) + 2.5), max(2.5, 0.45 * len(rows) + 1.5)))
    im = ax.imshow(values, vmin=0, vmax=max(1.0, float(np.nanmax(values)) if values.size else 1.0), cmap=cmap,
                   aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    for i in range(len(rows)):
        for j in range(len(cols)):
            if not np.isnan(values[i, j]):
                ax.text(j, i, fmt.format(values[i, j]), ha="center", va="center", fontsize=7,
                        color="white" if values[i, j] < 0.6 * np.nanmax(values) else "black")
    ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.04)
    return _save(fig, path)


def cost_bars(*, agents: list[str], figures: dict[str, list[float]], path: Path) -> Path:
    """One panel per cost figure (tokens in/out, steps, seconds), one bar per agent."""
    fig, axes = plt.subplots(1, len(figures), figsize=(3.2 * len(figures), 3.2))
    for ax, (name, values) in zip(np.atleast_1d(axes), figures.items()):
        ax.bar(range(len(agents)), values, color="tab:blue")
        ax.set_xticks(range(len(agents)), agents, rotation=45, ha="right", fontsize=8)
        ax.set_title(name, fontsize=9)
    return _save(fig, path)
