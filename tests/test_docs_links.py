"""Every relative link in the README, docs/ and the packages' READMEs points at a file that exists."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_LINK = re.compile(r"\]\(([^)#\s]+)")
_SKIPPED_DIRS = {".venv", "work", "data", "node_modules", ".git"}


def _documents() -> list[Path]:
    readmes = [p for p in ROOT.glob("*/README.md") if p.parent.name not in _SKIPPED_DIRS]
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted(readmes)]


def test_relative_links_resolve():
    broken = []
    for document in _documents():
        for match in _LINK.finditer(document.read_text(encoding="utf-8")):
            target = match.group(1)
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            if not (document.parent / target).exists():
                broken.append(f"{document.relative_to(ROOT)}: {target}")
    assert not broken, broken
