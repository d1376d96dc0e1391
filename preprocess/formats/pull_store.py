"""Where ``rca import ... --url`` keeps what it fetched: ``DIR/.pulled/<format>/<name>.json``.

Every chunk or page a pull fetches is saved, atomically (``rca.atomic``), as one file named
after the request that fetched it: the start of its range (for a person listing the folder)
and a hash of the server URL, the API path and every query parameter (the query, the range,
the step or limit). The same command run again finds the same names and reads them instead of
asking the server, so a pull that was interrupted resumes where it stopped, and one that
finished fetches nothing.

A saved file is the API's own response document (what the format readers parse), with one
extra top-level key, ``rca_pull``: where it came from, when, and what the pull needs to resume
(a page's raw line count and last timestamp, a chunk that was split). Header values are never
part of it. A chunk whose range had not ended (by ``SETTLE``) when it was fetched may have
been incomplete: it is not reused, a rerun fetches it again and overwrites it.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rca.atomic import write_json_atomic
from rca.timeutil import as_utc, parse_utc

log = logging.getLogger(__name__)

PULLED_DIR = ".pulled"  # hidden: not a day directory of the layout, and skipped by a directory import
META_KEY = "rca_pull"
# Late data: samples, lines and spans reach a server some time after they happened (scrape interval,
# agent batching, ingestion). A chunk is taken as complete once it ended this long before its fetch.
SETTLE = timedelta(minutes=5)


@dataclass(frozen=True)
class PageKey:
    """One request of a pull: server, API path, parameters, and the time range it covers."""

    url: str  # the server's base URL, password redacted
    path: str
    params: tuple[tuple[str, str], ...]
    start: datetime
    end: datetime

    @classmethod
    def of(cls, *, url: str, path: str, params: Mapping[str, str], start: datetime, end: datetime) -> PageKey:
        return cls(url=url, path=path, params=tuple(sorted(params.items())), start=as_utc(start), end=as_utc(end))

    def name(self) -> str:
        """``<range start>-<hash>.json``: stable for the same request, sorted by time in a listing."""
        identity = json.dumps({"url": self.url, "path": self.path, "params": self.params}, sort_keys=True)
        digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:16]
        return f"{self.start.strftime('%Y%m%dT%H%M%S')}Z-{digest}.json"


class PulledPages:
    """The saved pages of one format under ``out/.pulled/<format>/``."""

    def __init__(self, out: Path, fmt: str) -> None:
        self.root = Path(out) / PULLED_DIR / fmt

    def path(self, key: PageKey) -> Path:
        return self.root / key.name()

    def load(self, key: PageKey) -> dict[str, Any] | None:
        """The saved document of ``key``, or None when there is none that can be reused."""
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            meta = document[META_KEY]
            fetched = parse_utc(meta["fetched_at"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Written atomically, so only a hand-edited or foreign file lands here: fetch it again.
            log.warning("%s: not a saved page (%s); fetching it again", path, exc)
            return None
        if key.end > fetched - SETTLE:
            log.info("%s: fetched before its range had settled; fetching it again", path)
            return None
        return dict(document)

    def save(self, key: PageKey, document: dict[str, Any], *, fetched_at: datetime,
             **resume: Any) -> Path:
        """Write ``document`` with its provenance and ``resume`` facts under ``key``'s name, atomically."""
        meta = {"url": key.url, "path": key.path, "params": dict(key.params), "start": key.start.isoformat(),
                "end": key.end.isoformat(), "fetched_at": as_utc(fetched_at).isoformat(), **resume}
        path = self.path(key)
        write_json_atomic(path, {**document, META_KEY: meta}, indent=None)
        return path


def meta_of(document: Mapping[str, Any]) -> dict[str, Any]:
    """The ``rca_pull`` facts of a saved document (empty for a freshly fetched one)."""
    meta = document.get(META_KEY)
    return dict(meta) if isinstance(meta, dict) else {}
