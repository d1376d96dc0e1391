"""The digest of the source code a partition's tables are computed by.

A partition's fingerprint covers its input files and the detector's knobs; without the code
that turns them into tables, an upgraded package would keep serving tables the old code built
(the query side, new, reads them as if its own build half had). So the fingerprint also holds a
hash of every module the detector's and the raw readers' modules import, transitively, from the
project packages that compute tables. The walk is static (``ast``) and imports nothing: a
package is found by the import system's own search (``importlib.util.find_spec`` of its top-level
name, which imports nothing), its modules by their files under it, so the digest is that of the
files this process would run.

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
    """The ``.py`` file of ``module``, or None when it is no module (an attribute) or has no source.

    Only the top-level package is looked up with ``find_spec``; the rest of the name is followed
    through the package's directories. ``find_spec`` of a dotted name would import its parents (and
    of ``package.module.ATTRIBUTE``, the module), which a digest has no business doing.
    """
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin is not None and spec.origin.endswith(".py") else None
    directories = [Path(location) for location in spec.submodule_search_locations or ()]
    for i, part in enumerate(rest):
        last = i == len(rest) - 1
        package = next((d / part for d in directories if (d / part / "__init__.py").is_file()), None)
        if package is not None:
            if last:
                return package / "__init__.py"
            directories = [package]
            continue
        file = next((d / f"{part}.py" for d in directories if (d / f"{part}.py").is_file()), None)
        return file if last else None  # a name below a plain module is an attribute of it
    return None


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
