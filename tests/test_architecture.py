"""The package tiers hold: every import in the tree points down (or stays inside its package).

    rca  <  preprocess, knowledge, simulate  <  index, judge  <  diagnose  <  bench  <  app, scripts

Every ``import`` and ``from ... import`` is read with ``ast`` (those inside functions too,
which is where lazy imports hide), so an upward import fails here rather than in a review.
Relative imports stay inside their package and need no check.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

TIERS: dict[str, int] = {
    "rca": 0,
    "preprocess": 1, "knowledge": 1, "simulate": 1,
    "index": 2, "judge": 2,
    "diagnose": 3,
    "bench": 4,
    "app": 5, "scripts": 5,
}

# (importer, imported) pairs that are forbidden even where the tiers would allow them.
FORBIDDEN: set[tuple[str, str]] = {
    # The judge scores answers independently of the diagnoser that writes them.
    ("judge", "diagnose"),
    # The simulator is test infrastructure: the diagnosis path must never read it (no answers leak in).
    *{(package, "simulate") for package in ("preprocess", "index", "knowledge", "diagnose")},
    # The application shell sits on top: only scripts and tests may import it.
    *{(package, "app") for package in TIERS if package not in ("app", "scripts")},
}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name.split(".")[0]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def _modules() -> list[Path]:
    return sorted(path for package in TIERS for path in (ROOT / package).rglob("*.py"))


def violations(paths: list[Path]) -> list[str]:
    problems: list[str] = []
    for path in paths:
        package = path.relative_to(ROOT).parts[0]
        for line, imported in _imports(path):
            if imported not in TIERS or imported == package:
                continue
            where = f"{path.relative_to(ROOT)}:{line}"
            if (package, imported) in FORBIDDEN:
                problems.append(f"{where}: {package} must never import {imported}")
            elif TIERS[imported] >= TIERS[package]:
                problems.append(f"{where}: {package} (tier {TIERS[package]}) imports {imported} "
                                f"(tier {TIERS[imported]}); imports must point down")
    return problems


def test_every_package_is_walked() -> None:
    present = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert present <= set(TIERS) | {"tests"}, f"packages without a tier: {sorted(present - set(TIERS) - {'tests'})}"
    assert len(_modules()) > 80


def test_imports_point_down_the_tiers() -> None:
    assert violations(_modules()) == []


@pytest.mark.parametrize(("package", "source", "expected"), [
    ("rca", "from diagnose.cli import run\n", "imports must point down"),
    ("knowledge", "def f():\n    import index.models\n", "imports must point down"),
    ("index", "from judge.rules import EARLY\n", "imports must point down"),
    ("judge", "from diagnose.answer import Answer\n", "judge must never import diagnose"),
    ("diagnose", "import simulate.topology\n", "diagnose must never import simulate"),
    ("bench", "from app.demo import demo\n", "bench must never import app"),
])
def test_the_walk_catches_bad_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      package: str, source: str, expected: str) -> None:
    # A planted module in a scratch tree: the check must fail it, including an import inside a function.
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    module = tmp_path / package / "planted.py"
    module.parent.mkdir()
    module.write_text(source, encoding="utf-8")
    problems = violations([module])
    assert len(problems) == 1 and expected in problems[0]


def test_downward_and_relative_imports_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    module = tmp_path / "diagnose" / "fine.py"
    module.parent.mkdir()
    module.write_text("import json\nfrom rca.settings import Settings\nfrom . import prompt\nfrom index.models import Candidate\n",
                      encoding="utf-8")
    assert violations([module]) == []
