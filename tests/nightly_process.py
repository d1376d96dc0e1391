"""``rca preprocess`` run as a real process, for the tests that kill it mid-run."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from index import store


def preprocess_past_first_partition(*flags: str, data_dir: Path, index_dir: Path,
                                    timeout_s: float) -> subprocess.Popen[bytes]:
    """``rca preprocess --all`` (and ``flags``) started in a subprocess, returned still running once the
    manifest lists a finished partition (or when it ended, or after ``timeout_s``): the moment a kill
    tests what survives."""
    command = [sys.executable, "-m", "app.cli", "-q", "preprocess", "--data-dir", str(data_dir),
               "--index-dir", str(index_dir), "--all", *flags]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        if (index_dir / store.MANIFEST_NAME).exists() and store.load_manifest(index_dir).partitions:
            break
        time.sleep(0.05)
    return process
