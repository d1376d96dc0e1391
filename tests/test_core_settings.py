from datetime import UTC, datetime
from pathlib import Path

import pytest

from rca.settings import SettingsError, load_settings
from rca.system import bundled_system
from rca.taxonomy import FAULT_TYPES, canonical_fault_type
from rca.timeutil import cst_day_and_hour, cst_hours_between, parse_utc


def test_precedence_file_then_env_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[llm]\nllm_model = "from-file"\nmax_retries = 7\ntimeout_s = 11\n')
    env = {"RCA_LLM__LLM_MODEL": "from-env", "RCA_LLM__TIMEOUT_S": "22"}
    settings = load_settings(config_path=config, environ=env, overrides={"llm": {"llm_model": "from-flag", "timeout_s": None}})
    assert settings.llm.llm_model == "from-flag"
    assert settings.llm.timeout_s == 22.0
    assert settings.llm.max_retries == 7


def test_bad_value_names_source_and_field(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[llm]\nbackend = "dummy"\n')
    with pytest.raises(SettingsError, match=r"c\.toml.*llm\.backend"):
        load_settings(config_path=config, environ={})


def test_unknown_key_rejected(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[judge]\nthreshhold = 0.5\n")
    with pytest.raises(SettingsError, match="judge.threshhold"):
        load_settings(config_path=config, environ={})


def test_missing_explicit_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="not found"):
        load_settings(config_path=tmp_path / "nope.toml", environ={})


@pytest.mark.parametrize(
    ("utc", "day", "hour"),
    [("2025-06-05T16:10:02Z", "2025-06-06", 0), ("2025-06-05T15:59:59Z", "2025-06-05", 23), ("2025-06-06T03:00:00Z", "2025-06-06", 11)],
)
def test_cst_file_slot(utc: str, day: str, hour: int) -> None:
    assert cst_day_and_hour(parse_utc(utc)) == (day, hour)


def test_window_across_cst_day_boundary() -> None:
    slots = cst_hours_between(parse_utc("2025-06-05T15:50:00Z"), parse_utc("2025-06-05T16:05:00Z"))
    assert slots == [("2025-06-05", 23), ("2025-06-06", 0)]


def test_parse_utc_variants_agree() -> None:
    expected = datetime(2025, 6, 5, 16, 0, tzinfo=UTC)
    for text in ("2025-06-05T16:00:00Z", "2025-06-05 16:00:00+00:00", "2025-06-05 16:00:00"):
        assert parse_utc(text) == expected


def test_taxonomy_names() -> None:
    assert len(FAULT_TYPES) == 18
    assert canonical_fault_type("Node CPU") == "node cpu stress"
    system = bundled_system()
    assert system.service_of("redis-cart-0") == "redis-cart"
    assert system.service_of("tidb-tikv") == "tidb-tikv"
    assert [system.level_of(x) for x in ("cartservice", "cartservice-1", "aiops-k8s-03")] == ["service", "pod", "node"]
