"""Issue 28: each fact, record, contract and scoring path is written once.

Facts about the system come from ``rca.taxonomy`` / ``simulate.topology``; every exception
of the harness and the simulator is an ``RcaError``; the knowledge base owns and closes its
store, and the embedding model is loaded once per process.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import logging
import pkgutil
from pathlib import Path

import pytest

import bench
import simulate
from rca import taxonomy
from rca.errors import RcaError
from rca.system import bundled_system

ROOT = Path(__file__).resolve().parent.parent


def _modules(package) -> list:  # noqa: ANN001 - a package module
    return [importlib.import_module(f"{package.__name__}.{info.name}")
            for info in pkgutil.iter_modules(package.__path__)]


@pytest.mark.parametrize("package", [bench, simulate], ids=lambda p: p.__name__)
def test_every_exception_is_under_the_rca_root(package) -> None:  # noqa: ANN001
    outside = [f"{module.__name__}.{name}" for module in _modules(package)
               for name, value in vars(module).items()
               if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module.__name__
               and not issubclass(value, RcaError)]
    assert outside == []


def test_the_pod_rule_is_only_service_of() -> None:
    """No ``rsplit("-", 1)`` or ``startswith("tidb-")`` re-derives a service from a pod name in bench/."""
    found = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("rsplit", "startswith") and node.args
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value in ("-", "tidb-")):
                found.append(f"{path.name}:{node.lineno}")
    assert found == []


def test_system_facts_come_from_one_place() -> None:
    from bench.agents import ALL_COMPONENTS
    from bench.cloud import TIDB_COMPONENTS
    from bench.problems import ANSWER_LEVELS, answer_level
    from simulate.topology import WORKER_NODES

    assert [c for c in ALL_COMPONENTS if bundled_system().is_node(c)] == list(WORKER_NODES)
    assert set(TIDB_COMPONENTS) == set(taxonomy.TIDB_COMPONENTS.values())
    assert ANSWER_LEVELS[: len(taxonomy.LEVELS)] == tuple(taxonomy.LEVELS)
    assert {answer_level(c) for c in TIDB_COMPONENTS} == {"tidb"}
    assert not hasattr(importlib.import_module("bench.agents"), "WORKER_NODES") or \
        importlib.import_module("bench.agents").WORKER_NODES is WORKER_NODES


def test_knowledge_base_closes_and_loads_the_model_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from knowledge.base import KnowledgeBase
    from rca.settings import PathSettings, Settings

    settings = Settings(paths=PathSettings(kb_dir=tmp_path / "kb"))
    caplog.set_level(logging.INFO, logger="knowledge.embedding")
    with KnowledgeBase.from_settings(settings) as first:
        assert first.retrieve("pod_cpu_usage up on cartservice", k=1)
    with KnowledgeBase.from_settings(settings) as second:
        assert second.embedder is first.embedder
    loads = [r for r in caplog.records if "loading embedding model" in r.getMessage()]
    assert len(loads) <= 1  # none when an earlier test of this process loaded it already
    assert first._client is None and second._client is None
    first.close()  # idempotent


def test_one_clipping_helper_for_observations() -> None:
    from bench import interface
    from diagnose.tools import bound

    assert not hasattr(interface, "_clip") and interface.bound is bound
    long = "\n".join(f"line {k}" for k in range(2000))
    assert len(interface.SessionTools([], submit_doc="").call("x", {})) < interface.MAX_OBSERVATION_CHARS
    assert bound(long, interface.MAX_OBSERVATION_CHARS).endswith("more lines cut)")
