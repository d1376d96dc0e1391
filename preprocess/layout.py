"""File discovery in the released directory layout (see docs/data-contract.md section 1).

Owns the mapping "family + CST day (+ hour)" -> parquet paths and nothing else: no parquet
is opened here. Rules that the files impose:

- day directories and hour files are named in CST; the instants inside are UTC;
- hour files are matched on the ``<DATE>_<HH>`` prefix, so ``_HH-00-00`` and ``_HH-59-00`` both match;
- names containing ``deleted`` (pods deleted during the day) are kept on purpose: their rows
  are real telemetry of that day, and dropping them would hide the pod a fault removed.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Hour-partitioned families: sub-directory and file-name prefix.
HOURLY_DIRS: dict[str, tuple[str, str]] = {
    "log": ("log-parquet", "log_filebeat-server"),
    "trace": ("trace-parquet", "trace_jaeger-span"),
}

# Long-format metric families: sub-directory (relative to metric-parquet) and file-name prefix.
INFRA_DIRS: dict[str, tuple[str, str]] = {
    "infra_pod": ("infra/infra_pod", "infra_pod_"),
    "infra_node": ("infra/infra_node", "infra_node_"),
    "infra_tidb": ("infra/infra_tidb", "infra_tidb_"),
    "infra_tikv": ("other", "infra_tikv_"),
    "infra_pd": ("other", "infra_pd_"),
}
INFRA_FAMILIES: tuple[str, ...] = tuple(INFRA_DIRS)

# APM levels: sub-directory (relative to metric-parquet/apm) and file-name prefix.
APM_DIRS: dict[str, tuple[str, str]] = {
    "pod": ("pod", "pod_"),
    "service": ("service", "service_"),
}
APM_LEVELS: tuple[str, ...] = tuple(APM_DIRS)

METRIC_DIR = "metric-parquet"
_DAY_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class MetricFile:
    """One daily metric parquet and what its name says: the KPI (infra) or object (APM)."""

    path: Path
    family: str  # infra family ("infra_pod", ...) or "apm"
    key: str  # kpi_key for infra files, object id (pod/service name) for APM files
    deleted: bool


def day_dir(data_dir: Path, day: str) -> Path:
    return Path(data_dir) / day


def is_day_dir(path: Path) -> bool:
    return path.is_dir() and bool(_DAY_NAME.match(path.name))


def list_days(data_dir: Path) -> list[str]:
    """CST day names (``YYYY-MM-DD``) present under ``data_dir``, sorted."""
    return sorted(p.name for p in Path(data_dir).iterdir() if is_day_dir(p))


def hour_files(data_dir: Path, family: str, day: str, hour: int) -> tuple[list[Path], list[str]]:
    """The hour file(s) of ``family`` ("log" or "trace") for CST ``day`` and ``hour``.

    Returns ``(files, missing)`` like every discovery function here: ``missing`` holds a
    human-readable description of each expected file that is absent.
    """
    sub, prefix = HOURLY_DIRS[family]
    folder = day_dir(data_dir, day) / sub
    stem = f"{prefix}_{day}_{hour:02d}"
    found = sorted(folder.glob(f"{stem}*.parquet")) if folder.is_dir() else []
    if not found:
        return [], [f"{family} {day} hour {hour:02d} (no {folder}/{stem}*.parquet)"]
    if len(found) > 1:
        # Several exports of one hour are all read; their rows may overlap.
        log.warning("%d %s files for %s hour %02d: %s", len(found), family, day, hour, [p.name for p in found])
    return found, []


def _key_from_name(name: str, *, prefix: str, day: str) -> tuple[str, bool] | None:
    """Extract the KPI/object key between ``prefix`` and ``_<day>``; None if the name does not fit."""
    if not name.startswith(prefix) or not name.endswith(".parquet"):
        return None
    middle = name[len(prefix):-len(".parquet")]
    deleted = "deleted" in middle
    marker = middle.find(f"_{day}")
    if marker < 0:
        # Some exports name the day differently; the key is then everything before the last "_".
        log.debug("metric file %s does not carry day %s in its name", name, day)
        marker = middle.rfind("_")
        if marker <= 0:
            return None
    key = middle[:marker]
    # "deleted" appears as "_deleted", "-deleted" or " (deleted)" around the key.
    key = re.sub(r"[\s_-]*\(?deleted\)?[\s_-]*", "", key).strip() if deleted else key
    return key, deleted


def _metric_files(folder: Path, *, prefix: str, family: str, label: str, day: str) -> tuple[list[MetricFile], list[str]]:
    """Daily files ``<prefix><key>_<day>.parquet`` in ``folder``; what is absent is reported, not raised."""
    if not folder.is_dir():
        return [], [f"{label} {day} (no directory {folder})"]
    result: list[MetricFile] = []
    for path in sorted(folder.glob(f"{prefix}*.parquet")):
        parsed = _key_from_name(path.name, prefix=prefix, day=day)
        if parsed is None:
            log.warning("skipping %s: name does not follow %s<key>_<date>.parquet", path, prefix)
            continue
        key, deleted = parsed
        result.append(MetricFile(path=path, family=family, key=key, deleted=deleted))
    if not result:
        return [], [f"{label} {day} (no {prefix}*.parquet in {folder})"]
    return result, []


def infra_files(data_dir: Path, day: str, family: str) -> tuple[list[MetricFile], list[str]]:
    """Every daily KPI file of an infra family for a CST day, with the KPI from its name."""
    sub, prefix = INFRA_DIRS[family]
    folder = day_dir(data_dir, day) / METRIC_DIR / sub
    return _metric_files(folder, prefix=prefix, family=family, label=family, day=day)


def apm_files(data_dir: Path, day: str, level: str) -> tuple[list[MetricFile], list[str]]:
    """Every daily APM file of one level ("pod" or "service") for a CST day.

    The namespace-level file ``apm/pod_ns_hipstershop_<DATE>.parquet`` is deliberately not
    read: its schema is not established and it carries nothing per component.
    """
    sub, prefix = APM_DIRS[level]
    folder = day_dir(data_dir, day) / METRIC_DIR / "apm" / sub
    return _metric_files(folder, prefix=prefix, family="apm", label=f"apm {level}", day=day)
