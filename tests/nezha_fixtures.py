"""The vendored slice of Nezha (tests/data/nezha_slice, README there) as a clone and as a bare git snapshot.

``bare_snapshot`` commits the slice into a bare repository, the way the public snapshot
reaches these machines: optionally with files the tree names whose blobs are not in the
object store (``git ls-tree -l`` shows their size as ``-``; the real snapshot's large blobs).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

SLICE = Path(__file__).resolve().parent / "data" / "nezha_slice"
OB_DAY, TT_DAY = "2022-08-22", "2023-01-29"
# A blob id that no object store holds: the snapshot's "named in the tree, content absent".
ABSENT_BLOB = "0123456789abcdef0123456789abcdef01234567"
_GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z",
            "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z"}


def _git(git_dir: Path, *args: str, work_tree: Path | None = None, index: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | _GIT_ENV
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    command = ["git", f"--git-dir={git_dir}", *([f"--work-tree={work_tree}"] if work_tree else []), *args]
    return subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout.strip()


def clone(tmp_path: Path, name: str = "nezha") -> Path:
    """A writable copy of the slice laid out like a clone's work tree."""
    target = tmp_path / name
    shutil.copytree(SLICE, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def bare_snapshot(tmp_path: Path, *, source: Path = SLICE, absent: Iterable[str] = (), name: str = "nezha.git") -> Path:
    """A bare repository whose HEAD commits ``source``; each path in ``absent`` is named but has no blob."""
    git_dir = tmp_path / name
    subprocess.run(["git", "init", "--bare", "--quiet", str(git_dir)], check=True, capture_output=True)
    index = tmp_path / f"{name}.index"
    _git(git_dir, "add", "--all", ".", work_tree=source, index=index)
    for path in absent:
        _git(git_dir, "update-index", "--add", "--info-only", "--cacheinfo", f"100644,{ABSENT_BLOB},{path}",
             index=index)
    tree = _git(git_dir, "write-tree", "--missing-ok", index=index)
    commit = _git(git_dir, "commit-tree", tree, "-m", "Nezha slice")
    _git(git_dir, "update-ref", "refs/heads/main", commit)
    _git(git_dir, "symbolic-ref", "HEAD", "refs/heads/main")
    index.unlink()
    return git_dir


def set_faults(root: Path, day: str, faults: list[dict[str, str]]) -> None:
    """Replace a day's fault list (grouped by hour, as the source groups it)."""
    grouped: dict[str, list[dict[str, str]]] = {}
    for fault in faults:
        grouped.setdefault(fault["inject_time"][11:13], []).append(fault)
    (root / "rca_data" / day / f"{day}-fault_list.json").write_text(json.dumps(grouped, indent=4), encoding="utf-8")
