"""Server-rendered HTML (no script, no external asset): index, leaderboard and team page.

Every value from the database or a request is escaped; the page template is templates/page.html.
"""
from __future__ import annotations

import html
from functools import cache
from pathlib import Path
from string import Template
from typing import Any

from judge.server.board import BoardRow

TEMPLATE_DIR = Path(__file__).parent / "templates"


@cache
def _template() -> Template:
    return Template((TEMPLATE_DIR / "page.html").read_text(encoding="utf-8"))


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def page(title: str, body: str) -> str:
    return _template().substitute(title=_e(title), body=body)


def _table(headers: list[str], rows: list[list[str]], numeric: set[int], table_id: str) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    lines = []
    for row in rows:
        cells = "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        lines.append(f"<tr>{cells}</tr>")
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(lines)}</tbody></table>'


def index_page(contests: list[tuple[str, str, str]]) -> str:
    items = "".join(
        f'<li><a href="/leaderboard/{_e(name)}">{_e(name)}</a> <span class="note">({_e(kind)}, rules {_e(rules)})</span></li>'
        for name, kind, rules in contests
    )
    body = (f"<h2>Contests</h2><ul>{items or '<li>none yet</li>'}</ul>"
            '<p class="note"><a href="/team">Team page</a> (your submission history; needs your ticket).</p>')
    return page("Judge server", body)


def leaderboard_page(contest: str, rows: list[BoardRow], frozen_at: str | None) -> str:
    table = _table(
        ["Rank", "Team", "Score (last submission)", "Status", "Submitted (UTC)", "Best score", "Best rank", "Submissions"],
        [[_e(r.rank or "-"), _e(r.team), _num(r.last_score), _e(r.last_status), _e(r.last_time),
          _num(r.best_score), _e(r.best_rank or "-"), _e(r.submissions)] for r in rows],
        numeric={0, 2, 5, 6, 7}, table_id="leaderboard",
    )
    frozen = f'<p class="frozen">Frozen at {_e(frozen_at)}: later submissions are not shown.</p>' if frozen_at else ""
    body = (f"{frozen}{table}<p class=\"note\">Ranked by each team's last accepted submission (the challenge rule); "
            f'best submission beside it. JSON: <a href="/api/contests/{_e(contest)}/leaderboard">'
            f"/api/contests/{_e(contest)}/leaderboard</a></p>")
    return page(f"Leaderboard: {contest}", body)


def team_form(message: str = "") -> str:
    note = f'<p class="frozen">{_e(message)}</p>' if message else ""
    body = (f'{note}<form method="post" action="/team"><input name="contest" placeholder="contest">'
            '<input name="ticket" type="password" placeholder="ticket"><button type="submit">Show</button></form>')
    return page("Team page", body)


def _breakdown(summary: dict[str, Any]) -> str:
    if "by_fault_type" not in summary:  # QA kind: one line of figures
        return _table(["Score", "Keyword", "Similarity", "Answered"],
                      [[_num(summary.get("score"), 4), _num(summary.get("keyword_score"), 4),
                        _num(summary.get("similarity"), 4), f"{_e(summary.get('answered'))}/{_e(summary.get('questions'))}"]],
                      numeric={0, 1, 2, 3}, table_id="breakdown")
    rows = []
    for name, score in [("all", summary["overall"]), *summary["by_fault_type"].items()]:
        rows.append([_e(name), _e(score["cases"]), _num(100 * score["la"], 1), _num(100 * score["ta"], 1),
                     _num(100 * score["efficiency"], 1), _num(100 * score["explainability"], 1), _num(score["final"])])
    return _table(["Fault type", "Cases", "LA %", "TA %", "Eff %", "Expl %", "Final"], rows,
                  numeric={1, 2, 3, 4, 5, 6}, table_id="breakdown")


def team_page(contest: str, team: str, history: list[dict[str, Any]], latest: dict[str, Any] | None) -> str:
    table = _table(
        ["Submission", "Submitted (UTC)", "Judged (UTC)", "Status", "Score"],
        [[f"<code>{_e(h['submission_id'])}</code>", _e(h["create_time"]), _e(h["judge_time"] or "-"),
          _e(h["status"]), _num(h["score"])] for h in history],
        numeric={4}, table_id="history",
    )
    breakdown = ("<h2>Latest scored submission, by fault type</h2>" + _breakdown(latest)) if latest else ""
    return page(f"Team {team} in {contest}", f"<h2>History</h2>{table}{breakdown}")
