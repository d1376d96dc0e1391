"""The code base stays clean under the project's ruff rules (pyproject.toml [tool.ruff])."""
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
