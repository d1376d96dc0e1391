"""scripts/bench_preprocess.py runs end to end on a small simulated day and prints its figures (no timing asserted)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from simulate.simulator import SimulationOptions, simulate
from tests.script_modules import load_script


@pytest.mark.parametrize("by_family", [False, True], ids=["one-job", "by-family"])
def test_the_benchmark_prints_every_family_and_the_median_of_repeated_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], by_family: bool) -> None:
    simulate(SimulationOptions(out_dir=tmp_path / "data", cases=1, seed=2, scale="small"))
    day = next(p.name for p in (tmp_path / "data").iterdir() if p.is_dir())
    bench = load_script("bench_preprocess")
    monkeypatch.setattr(sys, "argv", ["bench_preprocess.py", "--data-dir", str(tmp_path / "data"), "--day", day,
                                      "--index-dir", str(tmp_path / "index"), "--repeat", "2",
                                      *(["--by-family"] if by_family else [])])
    assert bench.main() == 0
    out = capsys.readouterr().out
    # A family's CPU seconds are its own only when it ran alone.
    cpu = r"([\d.]+)" if by_family else "(-)"
    for family in ("metric", "log", "trace"):
        row = re.search(rf"^{family}\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+{cpu}\s+(\d+)", out, re.M)
        assert row is not None, out
        assert int(row.group(1)) > 0 and int(row.group(7)) > 0  # files read, input rows built
        assert float(row.group(4)) > 0  # build seconds
    total = re.search(r"^total\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", out, re.M)
    assert total is not None and float(total.group(5)) > 0, out  # the job's CPU seconds
    runs = re.search(r"ratio over 2 runs .*: median ([\d.]+), ([\d.]+)-([\d.]+) \(([\d.]+), ([\d.]+)\)", out)
    assert runs is not None, out
    low, high = float(runs.group(2)), float(runs.group(3))
    assert low <= float(runs.group(1)) <= high and {float(runs.group(4)), float(runs.group(5))} == {low, high}
    # The looser floor, as issue 27 words it: every column of every file, read whole.
    whole = re.search(r"against the whole files \(every column of every file; before / after the job ([\d.]+) s / "
                      r"([\d.]+) s\): ratio ([\d.]+)", out)
    assert whole is not None and float(whole.group(1)) > 0 and float(whole.group(3)) > 0, out
    whole_runs = re.search(r"\.\.\. against the whole files: median ([\d.]+), ([\d.]+)-([\d.]+)", out)
    assert whole_runs is not None and float(whole_runs.group(2)) <= float(whole_runs.group(1)), out
