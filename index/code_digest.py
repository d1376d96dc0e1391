"""The digest of the source code a partition's tables are computed by.

A partition's fingerprint covers its input files and the detector's knobs; without the code
that turns them into tables, an upgraded package would keep serving tables the old code built
(the query side, new, reads them as if its own build half had). So the fingerprint also holds a
hash of every module the detector's and the raw readers' modules import, transitively, from the
project packages that compute tables. The walk is static (``ast``): no module is run but the
packages' ``__init__`` (which ``importlib.util.find_spec`` imports to search a package), and each
module is found by the import system's own search, so the digest is that of the files this
process would run.

Any edit to one of those files (a comment too) makes the partitions stale: one rebuild after an
upgrade is the price of never reading tables another version built. Where a change alters the
index's layout rather than its contents, ``index.store.SCHEMA_VERSION`` says so instead.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
from collections.abc import Iterable
from functools import cache
from pathlib import Path

# The packages whose code decides what a partition holds: the readers and detectors
# (preprocess) and the contracts they apply (rca: the system's naming rules, the taxonomy).
BUILD_PACKAGES = ("preprocess", "rca")


def _source_file(module: str) -> Path | None:
    """The ``.py`` file of ``module``, or None when it is no module (an attribute) or has no source."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a parent that is no package: ``x.y`` where x is a module
        return None
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _imported(tree: ast.Module, *, packages: tuple[str, ...]) -> set[str]:
    """Absolute module names ``tree`` imports from ``packages`` (for ``from p import x``: ``p`` and ``p.x``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            # ``from preprocess import layout`` imports a module; ``from x import name`` an
            # attribute, which _source_file tells apart by finding no module of that name.
            names.update(f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*")
    return {name for name in names if name.split(".")[0] in packages}


def build_modules(roots: Iterable[str], *, packages: tuple[str, ...] = BUILD_PACKAGES) -> dict[str, Path]:
    """``{module: file}`` of ``roots`` and of every module of ``packages`` they import, transitively."""
    found: dict[str, Path] = {}
    pending = list(roots)
    while pending:
        module = pending.pop()
        if module in found:
            continue
        path = _source_file(module)
        if path is None:
            continue
        found[module] = path
        tree = ast.parse(path.read_bytes(), filename=str(path))
        # A module's parent packages run first (their __init__), so they count too.
        parents = [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]
        pending.extend(name for name in [*_imported(tree, packages=packages), *parents] if name not in found)
    return found


@cache
def code_digest(roots: tuple[str, ...], *, packages: tuple[str, ...] = BUILD_PACKAGES) -> str:
    """sha256 over (module name, source bytes) of ``build_modules(roots)``, in name order.

    Cached per process: the files do not change under a running job, and a nightly run asks once
    per partition.
    """
    digest = hashlib.sha256()
    for module, path in sorted(build_modules(roots, packages=packages).items()):
        digest.update(module.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
