"""The [index] settings section -> IndexParams: overrides, field errors, the moved baseline key."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from index.params import IndexParams, RankWeights
from preprocess.detect import LogParams, MetricParams
from rca.settings import SettingsError, load_settings
from rca.system import bundled_system, load_system


def _settings(tmp_path, text: str, environ: dict[str, str] | None = None):
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return load_settings(config_path=path, environ=environ or {})


def test_defaults_are_the_code_defaults(tmp_path):
    assert IndexParams.from_settings(_settings(tmp_path, "").index, system=bundled_system()) == IndexParams()


def test_overrides_reach_the_params_and_the_record(tmp_path):
    settings = _settings(tmp_path, "[index]\nbaseline_minutes = 45\n[index.rank]\nlate_onset_weight = 1.0\n"
                                   "[index.metric]\nmin_z = 5\n[index.log]\ndepth = 5\n",
                         environ={"RCA_INDEX__MAX_EVIDENCE": "8"})
    params = IndexParams.from_settings(settings.index, system=bundled_system())
    assert params.baseline_minutes == 45 and params.max_evidence == 8
    assert params.rank == RankWeights(late_onset_weight=1.0)
    assert params.metric == MetricParams(min_z=5.0) and params.log == LogParams(depth=5)
    assert params.as_dict()["rank"]["late_onset_weight"] == 1.0
    assert params.detector_params()["metric"] is params.metric


def test_the_params_carry_the_system_the_settings_name(tmp_path):
    """The ranker names components by it (tests/test_rank_names.py); the record names it, no more."""
    trainticket = load_system(Path(__file__).parent / "data" / "trainticket_system.toml")
    params = IndexParams.from_settings(_settings(tmp_path, "").index, system=trainticket)
    assert params.system is trainticket and params.system.is_node("10.0.0.11")
    assert params.as_dict()["system"] == "TrainTicket"
    json.dumps(params.as_dict())  # a run record's parameters stay plain data


def test_unknown_or_ill_typed_knob_names_its_field(tmp_path):
    with pytest.raises(SettingsError, match=r"index\.rank\.late_onset"):
        IndexParams.from_settings(_settings(tmp_path, "[index.rank]\nlate_onset = 1.0\n").index, system=bundled_system())
    with pytest.raises(SettingsError, match=r"index\.rank\.max_per_service"):
        IndexParams.from_settings(_settings(tmp_path, "[index.rank]\nmax_per_service = 1.5\n").index, system=bundled_system())


def test_old_preprocess_baseline_key_is_still_read_with_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="rca.settings"):
        settings = _settings(tmp_path, "[preprocess]\nbaseline_minutes = 20\nworkers = 2\n")
    assert settings.index.baseline_minutes == 20 and settings.preprocess.workers == 2
    assert "moved to 'index.baseline_minutes'" in caplog.text
    both = _settings(tmp_path, "[preprocess]\nbaseline_minutes = 20\n[index]\nbaseline_minutes = 40\n")
    assert both.index.baseline_minutes == 40  # the new key wins
