"""The code digest in a partition's fingerprint: which modules it covers, and when it changes."""
from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

from index.code_digest import build_modules, code_digest


@pytest.fixture
def package(tmp_path, monkeypatch, request):
    """A package ``name`` on sys.path: ``a`` imports ``b`` (and an attribute of it) and ``c``; ``d`` is apart."""
    name = f"digestpkg_{request.node.name.split('[')[0][-20:]}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text(textwrap.dedent(f"""\
        import json
        from {name} import c
        from {name}.b import THING

        def f():
            import {name}.nested  # an import inside a function counts too
            return THING
        """))
    (root / "b.py").write_text("THING = 1\n")
    (root / "c.py").write_text("VALUE = 2\n")
    (root / "d.py").write_text("OTHER = 3\n")
    (root / "nested.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield name, root
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]
    code_digest.cache_clear()


def test_the_modules_a_root_imports_transitively_and_nothing_else(package):
    name, _ = package
    found = build_modules((f"{name}.a",), packages=(name,))
    assert sorted(found) == [name, f"{name}.a", f"{name}.b", f"{name}.c", f"{name}.nested"]
    assert found[f"{name}.b"].name == "b.py" and found[name].name == "__init__.py"
    assert not [m for m in sys.modules if m == name or m.startswith(f"{name}.")]  # read, not imported


@pytest.mark.parametrize(("edited", "changes"), [("c.py", True), ("b.py", True), ("d.py", False)])
def test_the_digest_changes_with_an_imported_module_only(package, edited, changes):
    name, root = package
    before = code_digest((f"{name}.a",), packages=(name,))
    (root / edited).write_text("# edited: another version of the package\n" + (root / edited).read_text())
    code_digest.cache_clear()
    after = code_digest((f"{name}.a",), packages=(name,))
    assert (before != after) is changes


def test_the_trace_partition_digest_covers_readers_detector_and_naming_rules_not_the_query_side():
    found = build_modules(("preprocess.detect_trace", "preprocess.readers"))
    assert {"preprocess.detect_trace", "preprocess.readers", "preprocess.schema", "rca.system"} <= set(found)
    assert not [m for m in found if m.split(".")[0] not in ("preprocess", "rca")]
    assert "preprocess.detect_log" not in found  # another family's detector: its edits leave traces alone
