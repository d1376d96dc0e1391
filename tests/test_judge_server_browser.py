"""The leaderboard page in headless Chromium (Debian's package): submit, then see the team's row."""
from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime
from html.parser import HTMLParser

import pytest

from judge.groundtruth import load_truth
from tests.judge_server_support import (
    HTTP,
    ManualClock,
    judge_server,
    library_score,
    make_answers,
    server_settings,
    setup_contest,
    truth_subset,
    wait_until_scored,
    write_jsonl,
)


class _Rows(HTMLParser):
    """Cell texts of every row of the table with id "leaderboard"."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._inside = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table" and ("id", "leaderboard") in attrs:
            self._inside = True
        elif self._inside and tag == "tr":
            self.rows.append([])
        elif self._inside and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "table":
            self._inside = False
        elif tag in ("td", "th") and self._cell is not None and self.rows:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _dump_dom(chromium: str, url: str) -> str:
    with tempfile.TemporaryDirectory(prefix="judge-chromium-") as profile:
        done = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--dump-dom", url],
            capture_output=True, text=True, timeout=120,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_leaderboard_row_in_chromium(tmp_path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Chromium not installed: apt-get install chromium")
    gt = truth_subset(tmp_path / "gt.jsonl", 6, start=50)
    truth = load_truth(gt)
    with judge_server(f"sqlite:///{tmp_path / 'b.sqlite'}", settings=server_settings(),
                      clock=ManualClock(datetime(2025, 6, 2, 8, 0, tzinfo=UTC))) as (url, engine):
        tickets = setup_contest(engine, name="browser-cup", gt=gt, rules="late", teams=["Lions <b>&", "Tigers"])
        answers = make_answers(truth, variant=2)
        reply = HTTP.post(url + "/", content=json.dumps({"data": answers}).encode(),
                          headers={"ticket": tickets["Lions <b>&"], "contest": "browser-cup",
                                   "Content-Type": "application/json"})
        assert reply.status_code == 200
        wait_until_scored(url)
        dom = _dump_dom(chromium, f"{url}/leaderboard/browser-cup")
    parser = _Rows()
    parser.feed(dom)
    header, *rows = parser.rows
    assert header[:3] == ["Rank", "Team", "Score (last submission)"]
    expected = library_score(gt, write_jsonl(tmp_path / "r.jsonl", answers), rules="late")
    # The team name is shown as text (escaped), with its score; a team that never submitted is not ranked.
    assert rows == [["1", "Lions <b>&", f"{expected:.2f}", "done", rows[0][4], f"{expected:.2f}", "1", "1"]]
