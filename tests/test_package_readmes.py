"""Each package's README says what it owns: every module and subpackage of it is named there."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p.parent for p in ROOT.glob("*/__init__.py") if p.parent.name != "tests")


def _parts(package: Path) -> list[str]:
    modules = [p.name for p in package.glob("*.py") if p.name != "__init__.py"]
    subpackages = [p.parent.name for p in package.glob("*/__init__.py")]
    return sorted(modules + subpackages)


def test_the_packages_are_found():
    assert {"app", "bench", "diagnose", "index", "judge", "knowledge", "preprocess", "rca", "simulate"} <= {
        p.name for p in PACKAGES}


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_a_packages_readme_names_each_of_its_parts(package):
    readme = package / "README.md"
    assert readme.is_file(), f"{package.name}/ has no README.md saying what it owns"
    text = readme.read_text(encoding="utf-8")
    missing = [part for part in _parts(package) if part.removesuffix(".py") not in text]
    assert not missing, f"{package.name}/README.md does not name {missing}"
