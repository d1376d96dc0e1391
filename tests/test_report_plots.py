"""The plotting API: every figure is a real PNG with ink on it, empty inputs say so instead of failing."""
import io
from datetime import datetime, timedelta

import pytest
from PIL import Image

from diagnose.report import plots
from diagnose.report.units import display_unit, kpi_unit
from rca.timeutil import UTC

T0 = datetime(2025, 6, 5, 16, 0, tzinfo=UTC)
TIMES = [T0 + timedelta(minutes=i) for i in range(50)]
WINDOW = (TIMES[30], TIMES[-1])


def _check(plot: plots.Plot, *, min_ink: float = 0.03) -> None:
    assert plot.png.startswith(b"\x89PNG")
    assert plot.data_uri.startswith("data:image/png;base64,")
    with Image.open(io.BytesIO(plot.png)) as image:
        assert image.size == (plot.width_px, plot.height_px)
        assert 300 <= image.size[0] <= 900  # readable at a laptop's width without scaling down
    assert plots.ink_fraction(plot.png) > min_ink, plot.alt
    assert plot.alt


def test_series_plot_draws_window_band_and_onset() -> None:
    values = [8.0] * 31 + [30.0] * 19
    plot = plots.series_plot(
        panel=plots.SeriesPanel(component="cartservice-1", kpi="pod_cpu_usage", unit="%", times=TIMES, values=values,
                                band=(7.0, 9.0), baseline_median=8.0, onset=TIMES[31], note="up 3.7x"),
        window=WINDOW, baseline_start=TIMES[0])
    _check(plot, min_ink=0.2)
    assert "pod_cpu_usage" in plot.alt and "%" in plot.alt


def test_call_graph_marks_root_and_victims() -> None:
    plot = plots.call_graph_plot(
        nodes=[plots.GraphNode("cartservice", "root", "cartservice-1"), plots.GraphNode("frontend", "victim")],
        edges=[plots.GraphEdge("frontend", "cartservice", 1000, latency_ratio=4.0, error_rate=0.3),
               plots.GraphEdge("cartservice", "redis-cart", 900, latency_ratio=1.0),
               plots.GraphEdge("frontend", "adservice", 0, vanished=True)],
        title="calls")
    _check(plot)
    assert "root cause cartservice" in plot.alt


def test_generic_figures_for_the_benchmark_report() -> None:
    _check(plots.bar_plot(categories=["service", "pod", "node"], series={"1.5B": [55, 40, 20], "0.5B": [30, 22, 5]},
                          title="score by level", value_label="score (%)", value_unit="%"))
    _check(plots.bar_plot(categories=["cpu stress", "pod kill"], series={"cases": [3, 4]}, title="by type",
                          value_label="cases", horizontal=True))
    _check(plots.line_plot(x=[1, 2, 4, 8], series={"s/case": [20, 11, 6, 4]}, title="throughput",
                           x_label="workers", y_label="seconds per case", y_unit="s"), min_ink=0.02)
    _check(plots.line_plot(x=TIMES, series={"calls": list(range(50))}, title="calls", x_label="time (UTC)",
                           y_label="calls/min", window=WINDOW))
    _check(plots.heatmap_plot(matrix=[[1, 2], [3, float("nan")]], row_labels=["a", "b"], col_labels=["x", "y"],
                              title="heat", colour_label="cases"))
    _check(plots.confusion_plot(labels=["cpu", "mem", "net"], counts=[[5, 1, 0], [0, 3, 2], [1, 0, 4]],
                                title="fault types"))


@pytest.mark.parametrize("plot", [
    lambda: plots.series_plot(panel=plots.SeriesPanel(component="x", kpi="y", unit="", times=[], values=[]),
                              window=WINDOW, baseline_start=TIMES[0]),
    lambda: plots.call_graph_plot(nodes=[], edges=[], title="calls"),
    lambda: plots.log_counts_plot(templates=[], window=WINDOW, baseline_start=TIMES[0]),
    lambda: plots.bar_plot(categories=[], series={}, title="none", value_label="n"),
])
def test_empty_inputs_render_a_note(plot) -> None:
    rendered = plot()
    assert rendered.png.startswith(b"\x89PNG")
    assert "no " in rendered.alt or "none" in rendered.alt


def test_units_follow_the_data_contract() -> None:
    assert kpi_unit("rrt") == "µs" and display_unit("µs") == ("ms", 1e-3)
    assert kpi_unit("error_ratio") == "%" and kpi_unit("node_cpu_usage_rate") == "%"
    assert kpi_unit("pod_network_receive_bytes") == "B/s" and kpi_unit("pod_memory_working_set_bytes") == "B"
    assert kpi_unit("node_disk_read_time_seconds_total") == "s/s"


def test_bars_with_intervals_and_panels() -> None:
    _check(plots.bar_plot(categories=["detection", "analysis"], series={"rules": [0.9, float("nan")], "llm": [0.8, 0.6]},
                          intervals={"rules": [(0.8, 1.0), (float("nan"), float("nan"))], "llm": [(0.7, 0.9), (0.4, 0.8)]},
                          title="accuracy", value_label="accuracy (95% CI)", value_limits=(0, 1.05)))
    _check(plots.bar_panels(categories=["rules", "llm"], panels={"tokens in": [0, 2400], "seconds": [0.1, 21.0]},
                            title="cost per agent"))
