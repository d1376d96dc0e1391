"""How long ``rca --help`` and ``diagnose --help`` take (wall clock, fresh interpreter each run).

    python scripts/bench_cli_startup.py [--runs 5]

Prints the median and the slowest run per command. A figure, not a test: timings depend on
the machine and its load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = {
    "rca --help": [sys.executable, "-m", "app.cli", "--help"],
    "diagnose --help": [sys.executable, "-m", "diagnose.cli", "--help"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"{'command':<18} {'median s':>9} {'max s':>7}")
    for label, command in COMMANDS.items():
        times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)})
            times.append(time.perf_counter() - started)
        print(f"{label:<18} {statistics.median(times):>9.2f} {max(times):>7.2f}")


if __name__ == "__main__":
    main()
