"""Issue 28.6: the base package is the diagnoser; the harnesses' heavy dependencies are extras,
and ``rca`` is the one command (``diagnose`` and ``judge`` are its aliases)."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import alias_args, app

ROOT = Path(__file__).resolve().parent.parent
# httpx is in the server extra too, but the base needs it anyway (openai and chromadb call with it).
EXTRAS_ONLY = ("fastapi", "uvicorn", "sqlalchemy", "alembic", "psycopg", "matplotlib", "jinja2")

# A plain `pip install .` lacks the extras: the probe makes importing them fail, then walks the
# diagnose path (its CLI run to --help included) and lists what it imported.
_PROBE = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError("not installed without extras: " + name)
sys.meta_path.insert(0, Block())
import diagnose.cli, diagnose.service, diagnose.react, diagnose.team, diagnose.sources, app.cli
sys.argv = ["diagnose", "--help"]
try:
    app.cli.diagnose_main()
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
print("LOADED", sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED))
"""


def test_the_diagnose_path_runs_without_the_extras() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE.format(blocked=EXTRAS_ONLY)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--uuid" in done.stdout  # the diagnose command's own help
    loaded = done.stdout.rsplit("LOADED", 1)[1].strip()
    assert loaded == "[]"


def test_heavy_dependencies_are_extras_that_setup_installs() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base = {d.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower() for d in project["dependencies"]}
    assert not base & set(EXTRAS_ONLY)
    extras = project["optional-dependencies"]
    assert {d.split("[")[0].split(">")[0] for d in extras["server"] + extras["report"]} >= set(EXTRAS_ONLY)
    assert "server,report" in (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    scripts = project["scripts"]
    assert scripts == {"rca": "app.cli:main", "diagnose": "app.cli:diagnose_main", "judge": "app.cli:judge_main"}


@pytest.mark.parametrize(("name", "argv", "expected"), [
    ("judge", ["-d", "dir", "--config", "c.toml", "-v"], ["--config", "c.toml", "-v", "judge", "qa", "-d", "dir"]),
    ("diagnose", ["--uuid", "x", "-q"], ["-q", "diagnose", "--uuid", "x"]),
])
def test_aliases_are_rca_sub_commands_with_the_root_options(name: str, argv: list[str], expected: list[str]) -> None:
    assert alias_args(name, argv) == expected


def test_the_judge_alias_shares_the_option_set(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, alias_args("judge", ["-d", str(tmp_path), "--config", str(tmp_path / "missing.toml")]))
    assert result.exit_code == 2
    assert "config file not found" in result.output
