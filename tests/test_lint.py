"""The code base stays clean under ruff and mypy (pyproject.toml [tool.ruff], [tool.mypy])."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    pytest.importorskip("ruff", reason="ruff comes with the dev extra: pip install -e '.[dev]'")
    from ruff.__main__ import find_ruff_bin

    result = subprocess.run([find_ruff_bin(), "check", "--no-cache", str(ROOT)], capture_output=True, text=True,
                            cwd=ROOT, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing() -> None:
    pytest.importorskip("mypy", reason="mypy comes with the dev extra: pip install -e '.[dev]'")
    from mypy import api

    stdout, stderr, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--no-incremental"])
    assert status == 0, stdout + stderr
