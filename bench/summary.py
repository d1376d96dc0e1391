"""``rca bench report R``: tables and figures from a results store, as markdown and HTML.

Tables: accuracy per task and agent (mean, 95% bootstrap interval, n) with each agent's
rank on the same problems; detection TPR / FPR over fault and no-fault windows;
localisation Acc@1 / Acc@3; analysis component / level / fault type / reason keyword;
mitigation success and minutes to mitigate; steps, tokens and seconds per agent.
Figures: accuracy per task and agent, per-fault-type heatmap, fault-type confusion,
cost per agent.
"""
from __future__ import annotations

import html
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import figures
from bench.store import ResultsStore, Row, bootstrap
from rca.atomic import write_text_atomic
from rca.taxonomy import FAULT_TYPES

TASK_ORDER = ("detection", "localisation", "analysis", "mitigation")


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""

    def markdown(self) -> str:
        lines = [f"### {self.title}", ""]
        if self.note:
            lines += [self.note, ""]
        lines += ["| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join(lines) + "\n"

    def html(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in self.rows)
        note = f"<p>{html.escape(self.note)}</p>" if self.note else ""
        return f"<h3>{html.escape(self.title)}</h3>{note}<table><tr>{head}</tr>{body}</table>"


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def _pct(value: float) -> str:
    return "-" if np.isnan(value) else f"{value:.2f}"


@dataclass
class Report:
    tables: list[Table]
    images: list[tuple[str, Path]]


def build_report(rows: list[Row], out_dir: Path) -> Report:
    tasks = [t for t in TASK_ORDER if any(r.task == t for r in rows)]
    agents = list(dict.fromkeys(r.agent for r in rows))
    by: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        by[(r.task, r.agent)].append(r)
    tables: list[Table] = []

    # Headline: accuracy per task and agent, and where each agent stands.
    cells: dict[tuple[str, str], tuple[float, float, float]] = {}
    for key, group in by.items():
        m = _mean([r.correct for r in group])
        lo, hi = bootstrap([r.correct for r in group], groups=[r.problem_id for r in group])
        cells[key] = (m, lo, hi)
    head_rows = []
    for agent in agents:
        row = [agent]
        for t in tasks:
            if (t, agent) in cells:
                m, lo, hi = cells[(t, agent)]
                rank = 1 + sum(1 for a in agents if (t, a) in cells and cells[(t, a)][0] > m)
                row.append(f"{m:.2f} [{lo:.2f}, {hi:.2f}] #{rank} (n={len(by[(t, agent)])})")
            else:
                row.append("-")
        head_rows.append(row)
    tables.append(Table("Accuracy per task and agent", ["agent", *tasks], head_rows,
                        "mean of the task's correctness, 95% bootstrap interval over problems, rank among agents "
                        "on the same problems, n sessions"))

    if "detection" in tasks:
        det = []
        for agent in agents:
            group = by.get(("detection", agent), [])
            if not group:
                continue
            faults = [r for r in group if r.details.get("truth") is True]
            quiet = [r for r in group if r.details.get("truth") is False]
            tpr = _mean([float(r.details.get("answer") is True) for r in faults])
            fpr = _mean([float(r.details.get("answer") is True) for r in quiet])
            det.append([agent, _pct(_mean([r.correct for r in group])), _pct(tpr), _pct(fpr),
                        str(len(faults)), str(len(quiet))])
        tables.append(Table("Detection", ["agent", "accuracy", "TPR", "FPR", "fault windows", "no-fault windows"],
                            det, "FPR: share of no-fault windows called faulty"))
    if "localisation" in tasks:
        tables.append(Table("Localisation", ["agent", "Acc@1", "Acc@3", "n"], [
            [a, _pct(_mean([r.details["acc@1"] for r in by[("localisation", a)]])),
             _pct(_mean([r.details["acc@3"] for r in by[("localisation", a)]])), str(len(by[("localisation", a)]))]
            for a in agents if ("localisation", a) in by]))
    if "analysis" in tasks:
        parts = ("component", "level", "fault_type", "reason_keyword")
        tables.append(Table("Analysis (challenge answer format, judge/ scoring)", ["agent", "all right", *parts], [
            [a, _pct(_mean([r.correct for r in by[("analysis", a)]])),
             *[_pct(_mean([r.details.get(p, 0.0) for r in by[("analysis", a)]])) for p in parts]]
            for a in agents if ("analysis", a) in by]))
    if "mitigation" in tasks:
        mit = []
        for a in agents:
            group = by.get(("mitigation", a), [])
            if not group:
                continue
            minutes = [r.details["minutes_to_mitigate"] for r in group if r.details.get("minutes_to_mitigate")]
            mit.append([a, _pct(_mean([r.correct for r in group])), _pct(_mean(minutes)),
                        _pct(_mean([float(len(r.details.get("actions", []))) for r in group])), str(len(group))])
        tables.append(Table("Mitigation (whole system healthy after the settle window)",
                            ["agent", "success", "minutes to mitigate", "cluster actions", "n"], mit))

    cost = []
    for a in agents:
        group = [r for r in rows if r.agent == a]
        judged = [r.judge_score for r in group if r.judge_score is not None]
        cost.append([a, f"{_mean([r.steps for r in group]):.1f}", f"{_mean([r.tokens_in for r in group]):.0f}",
                     f"{_mean([r.tokens_out for r in group]):.0f}", f"{_mean([r.seconds for r in group]):.1f}",
                     str(sum(r.outcome == "step_limit" for r in group)), _pct(_mean(judged)) if judged else "-"])
    tables.append(Table("Cost per session", ["agent", "steps", "tokens in", "tokens out", "seconds",
                                             "hit step limit", "LLM-judge trajectory score"], cost))

    images: list[tuple[str, Path]] = []
    images.append(("Accuracy per task and agent", figures.accuracy_bars(
        tasks=tasks, agents=agents, mean=cells, path=out_dir / "accuracy.png")))
    types = [t for t in FAULT_TYPES if any(r.fault_type == t for r in rows)]
    if types:
        values = np.full((len(agents), len(types)), np.nan)
        for i, a in enumerate(agents):
            for j, t in enumerate(types):
                got = [r.correct for r in rows if r.agent == a and r.fault_type == t]
                if got:
                    values[i, j] = np.mean(got)
        images.append(("Accuracy per fault type (all tasks of fault cases)", figures.heatmap(
            rows=agents, cols=types, values=values, path=out_dir / "fault_types.png",
            title="accuracy per fault type and agent")))
    # (truth, answer) of the analysis sessions that answered a known fault type
    analysed = [(r.fault_type, str(r.answer.get("fault_type"))) for r in rows if r.task == "analysis" and r.answer
                and r.answer.get("fault_type") in FAULT_TYPES]
    if analysed:
        truths = [t for t in FAULT_TYPES if any(truth == t for truth, _ in analysed)]
        answers = [t for t in FAULT_TYPES if any(answer == t for _, answer in analysed)]
        confusion = np.zeros((len(truths), len(answers)))
        for truth, answer in analysed:
            confusion[truths.index(truth), answers.index(answer)] += 1
        images.append(("Fault-type confusion (analysis, all agents; rows truth, columns answer)", figures.confusion(
            truths=truths, answers=answers, counts=confusion, path=out_dir / "confusion.png",
            title="fault type: truth vs answer (analysis task)")))
    images.append(("Tokens per session", figures.cost_bars(agents=agents, figures={
        "tokens in": [_mean([r.tokens_in for r in rows if r.agent == a]) for a in agents],
        "tokens out": [_mean([r.tokens_out for r in rows if r.agent == a]) for a in agents],
    }, path=out_dir / "tokens.png", title="tokens per session", value_label="tokens")))
    images.append(("Steps and seconds per session", figures.cost_bars(agents=agents, figures={
        "steps": [_mean([r.steps for r in rows if r.agent == a]) for a in agents],
        "seconds": [_mean([r.seconds for r in rows if r.agent == a]) for a in agents],
    }, path=out_dir / "steps_seconds.png", title="steps and wall seconds per session", value_label="per session")))
    return Report(tables=tables, images=images)


def write_report(results_dir: Path) -> tuple[Path, Path]:
    """``<R>/report/report.md`` and ``report.html`` (figures beside them)."""
    store_path = results_dir / "results.sqlite"
    if not store_path.is_file():
        raise FileNotFoundError(f"{store_path}: no results store (run `rca bench run --out {results_dir}` first)")
    with ResultsStore(store_path) as store:
        rows = store.rows()
    if not rows:
        raise FileNotFoundError(f"{store_path}: no sessions stored yet")
    out = results_dir / "report"
    report = build_report(rows, out)
    md = ["# Benchmark report", "", f"{len(rows)} sessions from `{store_path.name}`.", ""]
    md += [t.markdown() for t in report.tables]
    md += [f"### {title}\n\n![{title}]({path.name})\n" for title, path in report.images]
    page = ["<!doctype html><html><head><meta charset='utf-8'><title>Benchmark report</title><style>"
            "body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}</style></head><body>",
            f"<h1>Benchmark report</h1><p>{len(rows)} sessions.</p>"]
    page += [t.html() for t in report.tables]
    page += [f"<h3>{html.escape(title)}</h3><img src='{path.name}' alt='{html.escape(title)}'>"
             for title, path in report.images]
    page.append("</body></html>")
    md_path, html_path = out / "report.md", out / "report.html"
    write_text_atomic(md_path, "\n".join(md))
    write_text_atomic(html_path, "\n".join(page))
    return md_path, html_path
