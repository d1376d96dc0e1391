"""Agents from outside the package: ``rca bench run --agent my_package.module:MyAgent``.

Any class with AIOpsLab's contract is evaluated unchanged, beside the built-in agents:

    class MyAgent:
        def __init__(self, problem_desc: str, instructions: str, apis: str) -> None: ...  # or no arguments
        def init_context(self, problem_desc: str, instructions: str, apis: str) -> None: ...  # optional
        async def get_action(self, state: str) -> str: ...

A fresh instance is made for every session, from that session's problem description,
instructions and tool list (the constructor takes them when it has three parameters,
``init_context`` otherwise). Token use is read from the agent's ``usage`` when it has one.
The spec (``module:Class``, the module importable from ``sys.path``/``PYTHONPATH``, or
``path/to/file.py:Class``) is the agent's name in the results store and the report.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path
from types import ModuleType
from typing import Any

from rca.errors import InputError


class AgentSpecError(InputError):
    """``--agent`` does not name an importable class with ``async get_action(state)``."""


def is_external(name: str) -> bool:
    """``module:Class`` names an external agent; built-in agent names have no colon."""
    return ":" in name


def load_agent_class(spec: str) -> type:
    """The class ``spec`` (``package.module:Class``) names, checked against the contract."""
    module_name, _, class_name = spec.partition(":")
    if not module_name or not class_name:
        raise AgentSpecError(f"--agent {spec!r}: expected package.module:ClassName")
    try:
        module = _module_file(Path(module_name)) if module_name.endswith(".py") else importlib.import_module(module_name)
    except (ImportError, OSError) as exc:
        raise AgentSpecError(f"--agent {spec!r}: cannot import {module_name} ({exc})") from exc
    target = getattr(module, class_name, None)
    if not inspect.isclass(target):
        raise AgentSpecError(f"--agent {spec!r}: {module_name} has no class {class_name}")
    if not inspect.iscoroutinefunction(getattr(target, "get_action", None)):
        raise AgentSpecError(f"--agent {spec!r}: {class_name} needs `async def get_action(self, state) -> str`")
    return target


def _module_file(path: Path) -> ModuleType:
    """A module loaded from a file outside any package (its name: the file's stem)."""
    found = importlib.util.spec_from_file_location(f"rca_bench_agent_{path.stem}", path)
    if found is None or found.loader is None:
        raise ImportError(f"{path} is not a Python module file")
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def _takes_context(cls: type) -> bool:
    """Whether the constructor takes (problem_desc, instructions, apis)."""
    try:
        parameters = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):  # a builtin or C-level constructor: assume none
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in parameters)


class ExternalAgent:
    """One session's instance of an external agent class, made when the session hands over its context."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.inner: Any = None

    @property
    def usage(self) -> tuple[int, int]:
        usage = getattr(self.inner, "usage", None)
        return (int(usage[0]), int(usage[1])) if usage else (0, 0)

    def init_context(self, problem_desc: str, instructions: str, apis: str) -> None:
        if _takes_context(self.cls):
            self.inner = self.cls(problem_desc, instructions, apis)
            return
        self.inner = self.cls()
        init = getattr(self.inner, "init_context", None)
        if callable(init):
            init(problem_desc, instructions, apis)

    async def get_action(self, state: str) -> str:
        if self.inner is None:
            raise AgentSpecError(f"{self.cls.__name__}: get_action before the session's context")
        reply = await self.inner.get_action(state)
        return str(reply)
