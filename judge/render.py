"""Terminal tables (rich) and JSON report files for both judges."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from judge.challenge import ChallengeReport, ChallengeScore
from judge.qa import QAReport
from rca import atomic


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    atomic.write_json_atomic(path, data, indent=2)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _score_row(name: str, score: ChallengeScore) -> list[str]:
    return [
        name, str(score.cases), _pct(score.la), _pct(score.ta_keyword), _pct(score.ta),
        _pct(score.efficiency), "-" if score.apl is None else f"{score.apl:.1f}",
        _pct(score.explainability), f"{score.final:.2f}",
    ]


def _score_table(title: str, rows: dict[str, ChallengeScore]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("group", "cases", "LA %", "TA kw %", "TA %", "Eff %", "APL", "Expl %", "Final"):
        table.add_column(column, justify="left" if column == "group" else "right")
    for name, score in rows.items():
        table.add_row(*_score_row(name, score))
    return table


def print_challenge(report: ChallengeReport, console: Console) -> None:
    for issue in report.errors[:20]:
        console.print(f"[red]format error[/red] {issue}")
    if len(report.errors) > 20:
        console.print(f"[red]... {len(report.errors) - 20} more format errors (see the JSON report)[/red]")
    for issue in report.warnings[:5]:
        console.print(f"[yellow]warning[/yellow] {issue}")
    semantic = f"semantic threshold {report.semantic_threshold}" if report.semantic else "keyword-only TA"
    console.print(f"rules: {report.rules}; {semantic}; format {'valid' if report.valid else 'INVALID'}")
    console.print(_score_table("Overall", {"all": report.overall}))
    console.print(_score_table("By level (instance_type)", report.by_level))
    console.print(_score_table("By fault type", report.by_fault_type))
    overall = report.overall
    by_type = ", ".join(f"{kind} {_pct(value)}" for kind, value in overall.explainability_by_type.items())
    console.print(
        f"Final [bold]{overall.final:.2f}[/bold] (keyword-only TA: {overall.final_keyword_only:.2f}); "
        f"explainability by evidence type: {by_type}"
    )


def print_qa(report: QAReport, console: Console) -> None:
    table = Table(title=f"QA judge ({report.evaluation_model})", title_justify="left")
    for column in ("id", "keywords found", "keyword", "similarity", "score", "label"):
        table.add_column(column, justify="left" if column in ("id", "keywords found") else "right")
    for row in report.per_question:
        found = f"{len(row.keywords_found)}/{len(row.keywords)}" if row.answered else "no answer"
        table.add_row(row.id, found, f"{row.keyword_score:.2f}", f"{row.similarity:.3f}", f"{row.score:.3f}",
                      "-" if row.label is None else str(row.label))
    console.print(table)
    console.print(
        f"score [bold]{report.score:.4f}[/bold] = {report.keyword_weight} x keyword {report.keyword_score:.4f}"
        f" + {report.similarity_weight} x similarity {report.similarity:.4f} "
        f"({report.answered}/{report.questions} answered)"
    )
    if report.agreement is not None:
        a = report.agreement
        pearson = "-" if a.pearson is None else f"{a.pearson:.3f}"
        auc = "-" if a.auc is None else f"{a.auc:.3f}"
        threshold = "-" if a.best_threshold is None else f"{a.best_threshold:.3f}"
        console.print(f"agreement with {a.n} labels: Pearson {pearson}, AUC {auc}, best F1 {a.best_f1:.3f}"
                      f" (score >= {threshold})")
