"""Prompt templates: ``diagnose/prompts/<name>.md`` rendered with ``string.Template``.

Prompt text lives in these files, not in code, so a prompt change is a text diff that
people who know the domain can review. ``$name`` marks a value the code fills in; every
value must be given (a missing one is a bug, named with its file).
"""
from __future__ import annotations

import string
from functools import cache
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"


@cache
def _template(name: str) -> string.Template:
    path = PROMPTS_DIR / f"{name}.md"
    return string.Template(path.read_text(encoding="utf-8").strip())


def render(name: str, **values: object) -> str:
    """The prompt template ``diagnose/prompts/<name>.md`` with ``$values`` filled in (all required)."""
    try:
        return _template(name).substitute({k: str(v) for k, v in values.items()})
    except KeyError as exc:
        raise KeyError(f"{PROMPTS_DIR / name}.md: no value for ${exc.args[0]}") from exc
