"""The diagnosis path never reads answers: the importers write a ground truth beside the cases (for the
judge and the benchmarks), and nothing the diagnoser or the index runs may open it or import them."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("groundtruth", "ground_truth", "load_truth", "preprocess.nezha", "preprocess.importers", "nofault.jsonl")


@pytest.mark.parametrize("package", ["diagnose", "index"])
def test_the_diagnosis_path_names_no_ground_truth(package: str) -> None:
    offenders = [f"{path.relative_to(ROOT)}: {word}" for path in sorted((ROOT / package).rglob("*.py"))
                 for word in FORBIDDEN if word in path.read_text(encoding="utf-8").lower()]
    assert offenders == []
