"""bench/real_sets.py and scripts/tuning_views.py: views named and read back, the protocol, what changed."""
from __future__ import annotations

import pytest

from bench.real_sets import View, is_tuning, prepared_set
from tests.script_modules import load_script

tuning_views = load_script("tuning_views")


@pytest.mark.parametrize("view, name, label", [
    (View(), "full", "full"),
    (View(without=("traces",)), "without-traces", "without traces"),
    (View(without=("mesh", "traces")), "without-mesh-without-traces", "without mesh, without traces"),
    (View(without=("metrics",), keep_traces=0.2), "without-metrics-traces-0.2",
     "without metrics, with 0.2 of its traces"),
    (View(keep_traces=0.2), "traces-0.2", "with 0.2 of its traces"),
    (View(more_traces=True), "more-traces", "with TraStrainer's trace minutes"),
    (View(without=("mesh",), more_traces=True, keep_traces=0.1), "without-mesh-more-traces-traces-0.1",
     "without mesh, with TraStrainer's trace minutes, with 0.1 of its traces"),
])
def test_a_view_is_named_and_read_back(view: View, name: str, label: str) -> None:
    assert view.name == name
    assert view.label == label
    assert View.parse(name) == view


def test_every_default_view_of_the_tuning_script_parses() -> None:
    assert [View.parse(name).name for name in tuning_views.VIEWS] == list(tuning_views.VIEWS)


@pytest.mark.parametrize("name", ["bogus", "without-logs", "traces-many", "without-traces-extra", "traces-1.5",
                                  "traces-0"])
def test_a_bad_view_name_is_a_clear_error(name: str) -> None:
    with pytest.raises(ValueError, match="view"):
        View.parse(name)


def test_the_more_traces_view_parses_and_needs_trastrainer(tmp_path) -> None:
    assert View.parse(tuning_views.MORE_TRACES_VIEW).more_traces
    with pytest.raises(ValueError, match="TraStrainer"):
        prepared_set(source=tmp_path, system="onlineboutique", days=["2022-08-22"], work_dir=tmp_path,
                     view=View(more_traces=True))


def test_only_the_tuning_day_is_a_tuning_set() -> None:
    assert is_tuning(system="onlineboutique", days=["2022-08-22"])
    assert not is_tuning(system="onlineboutique", days=["2022-08-23"])
    assert not is_tuning(system="onlineboutique", days=["2022-08-22", "2022-08-23"])
    assert not is_tuning(system="onlineboutique", days=[])  # every day: the evaluation day included
    assert not is_tuning(system="trainticket", days=["2022-08-22"])


def test_changes_name_the_cases_won_and_lost_per_view() -> None:
    before = {"full": {"misses": ["a", "b"]}, "without-traces": {"misses": ["a"]}, "gone": {"misses": ["z"]}}
    after = {"full": {"misses": ["b", "c"]}, "without-traces": {"misses": ["a"]}, "new": {"misses": ["y"]}}
    assert tuning_views.changes(before, after) == {"full": {"won": ["a"], "lost": ["c"]},
                                                  "without-traces": {"won": [], "lost": []}}


def test_compare_names_the_right_answers_whose_lead_moved() -> None:
    before = {"full": {"leads": {"a": 0.50, "b": 0.30, "c": 0.20}}, "old": {}}
    after = {"full": {"leads": {"a": 0.52, "b": 0.10, "d": 0.90}}, "traces-0.2": {"leads": {"a": 0.5}}}
    assert tuning_views.lead_moves(before, after) == {"full": {"b": (0.30, 0.10)}, "traces-0.2": {}}
