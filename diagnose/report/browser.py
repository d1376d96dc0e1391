"""Headless Chromium, offline: a screenshot or the rendered DOM of a report page.

Used to check that a page renders with no network and to make the README's screenshot.
Networking is blocked three ways (every host resolves to nothing, a proxy to a closed
port, background services off), so anything a page tried to fetch would simply fail.
"""
from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from rca.errors import InputError

log = logging.getLogger(__name__)

CHROMIUM = "/usr/bin/chromium"
OFFLINE_FLAGS: tuple[str, ...] = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--hide-scrollbars", "--mute-audio",
    "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
)


class BrowserError(InputError):
    """Chromium is missing or failed on a page."""


def chromium_path() -> str:
    found = shutil.which(CHROMIUM) or shutil.which("chromium")
    if found is None:
        raise BrowserError(f"{CHROMIUM} not found: install Debian's chromium package (scripts/setup.sh)")
    return found


def _run(page: Path, extra: list[str], *, timeout_s: float) -> subprocess.CompletedProcess[str]:
    page = Path(page).resolve()
    if not page.is_file():
        raise BrowserError(f"{page}: no such page")
    with tempfile.TemporaryDirectory(prefix="rca-chromium-") as profile:
        command = [chromium_path(), *OFFLINE_FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()]
        log.debug("chromium: %s", " ".join(command))
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    if result.returncode != 0:
        raise BrowserError(f"chromium failed on {page} (exit {result.returncode}): {result.stderr[-800:]}")
    return result


def screenshot(page: Path, *, out: Path, width: int = 1280, height: int = 4000, timeout_s: float = 120.0) -> Path:
    """PNG of the page's first ``height`` pixels at ``width`` (CSS px); returns ``out``."""
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    _run(page, [f"--screenshot={out}", f"--window-size={width},{height}", "--virtual-time-budget=5000"],
         timeout_s=timeout_s)
    if not out.is_file():
        raise BrowserError(f"chromium wrote no screenshot of {page} to {out}")
    return out


def dump_dom(page: Path, *, width: int = 1280, height: int = 4000, timeout_s: float = 120.0) -> str:
    """The DOM after load, serialised (``--dump-dom``), laid out in a ``width`` × ``height`` window."""
    return _run(page, ["--dump-dom", f"--window-size={width},{height}", "--virtual-time-budget=5000"],
                timeout_s=timeout_s).stdout
