"""The diagnosis path never reads answers: the importers write a ground truth beside the cases (for the
judge and the benchmarks), and nothing the diagnoser or the index runs may open it or import them."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("groundtruth", "ground_truth", "load_truth", "preprocess.nezha", "preprocess.importers", "nofault.jsonl")


# preprocess/ holds the importers, which write the truth of a labelled dataset (a conversion, like the
# simulator's); every other module of it is the nightly job or a format reader, and must not name it.
IMPORTERS = ("preprocess/importers.py", "preprocess/nezha.py")


@pytest.mark.parametrize("package", ["diagnose", "index", "preprocess"])
def test_the_diagnosis_path_names_no_ground_truth(package: str) -> None:
    offenders = [f"{path.relative_to(ROOT)}: {word}" for path in sorted((ROOT / package).rglob("*.py"))
                 if path.relative_to(ROOT).as_posix() not in IMPORTERS
                 for word in FORBIDDEN if word in path.read_text(encoding="utf-8").lower()]
    assert offenders == []
