"""Which foreign format a directory of telemetry looks like, so a wrong ``--data-dir`` gets a useful error.

The nightly job reads one layout (docs/data-contract.md). Pointed at anything else, it says
which ``rca import FORMAT`` would bring the data in, from the first bytes of a few files:
never a guess that reads as a certainty, and never a silent fallback.
"""
from __future__ import annotations

import gzip
from pathlib import Path

# A marker in a file's first kilobytes -> the import format that reads it (first match wins).
_MARKERS: tuple[tuple[str, str], ...] = (
    ('"resourceSpans"', "otlp"), ('"resourceLogs"', "otlp"), ('"resourceMetrics"', "otlp"),
    ('"resultType":"matrix"', "prometheus"), ('"resultType":"streams"', "loki"),
    ('"traceID"', "jaeger"), ('"localEndpoint"', "zipkin"), ('"@timestamp"', "ecs"),
    ("# TYPE ", "prometheus"), ("# HELP ", "prometheus"),
)
_SAMPLE_BYTES = 4096
_MAX_FILES = 20


def _head(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            return handle.read(_SAMPLE_BYTES).decode("utf-8", errors="replace").replace(" ", "")
    except (OSError, EOFError):
        return ""


def guess_format(data_dir: Path) -> str | None:
    """The ``rca import`` format the files under ``data_dir`` look like, or None."""
    data_dir = Path(data_dir)
    if (data_dir / "rca_data").is_dir() or ((data_dir / "HEAD").is_file() and (data_dir / "objects").is_dir()):
        return "nezha"
    files = [p for p in sorted(data_dir.rglob("*")) if p.is_file()][:_MAX_FILES] if data_dir.is_dir() else []
    for path in files:
        head = _head(path)
        for marker, name in _MARKERS:
            if marker.replace(" ", "") in head:
                return name
    return None


def layout_hint(data_dir: Path) -> str:
    """A sentence for an error about a directory that is not in the canonical layout."""
    found = guess_format(data_dir)
    if found is None:
        return ("it is not in the canonical layout (YYYY-MM-DD day directories, docs/data-contract.md); "
                "import it first with `rca import FORMAT` (docs/formats/)")
    return (f"it is not in the canonical layout, and its files look like {found}: "
            f"`rca import {found} {data_dir} --out DIR`, then preprocess DIR")
