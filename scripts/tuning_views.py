#!/usr/bin/env python
"""The real tuning day in every view, one table: is a change right on real data, case for case?

    scripts/tuning_views.py --nezha SRC                                  # every view, summary and misses
    scripts/tuning_views.py --nezha SRC --save work/views-before.json    # keep this run's misses
    scripts/tuning_views.py --nezha SRC --compare work/views-before.json # what changed, case by case
    scripts/tuning_views.py --nezha SRC --view full --view without-metrics

Each view is Nezha's OnlineBoutique 2022-08-22 (the tuning set) imported as another deployment
would record it (``rca import nezha --without-...``, ``--keep-traces``), then indexed once
under --work-dir and reused (the folders ``scripts/eval_real.py`` uses). Per view: the index's
AC@1 with its 95% interval, the rules' LA, TA and final (no model), and the cases the index's
first candidate misses, and the lead: by how much a right first candidate beats its first rival
(the first candidate of another service or node), as a share of its score, averaged over the right
answers. A change that moves no answer can still widen or narrow that lead. ``--compare`` names,
per view, the cases a change won and lost, the lead before and after, and the right answers whose
own lead moved by 0.05 or more (``LEAD_MOVE``).

Only the tuning day: the evaluation sets run once, at the end of a round (``scripts/eval_real.py
--evaluation``), and are never looked at case by case.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.index_eval import evaluate_index
from bench.real_sets import TUNING_SETS, View, prepared_set, rules_answers, set_settings
from bench.report import interval_cell, score_file, score_interval
from index.params import IndexParams
from rca.challenge import rule_version
from rca.system import system_from_settings

log = logging.getLogger("tuning_views")

# The last three since round 28: most deployments have no mesh and sample their traces (a tenth, a
# twentieth), where a minute's p95 is the slowest of a handful of calls.
VIEWS: tuple[str, ...] = ("full", "without-mesh", "without-traces", "without-mesh-without-traces",
                          "without-metrics", "traces-0.2", "without-metrics-traces-0.2",
                          "without-mesh-traces-0.2", "without-mesh-traces-0.1", "traces-0.05")
# With --trastrainer (round 29): TraStrainer keeps the tuning day's trace minutes between injections
# too (127 minutes present in its snapshot, Nezha's 43), as a deployment that traces every minute.
MORE_TRACES_VIEW = "more-traces"
(SYSTEM, DAY), = TUNING_SETS


def view_figures(*, source: Path, view: View, work_dir: Path, config: Path | None,
                 trastrainer: Path | None = None) -> dict[str, Any]:
    """One view's figures: AC@1 (value, low, high), rules final/LA/TA (value, low, high), top-1 misses."""
    data_dir, index_dir = prepared_set(source=source, system=SYSTEM, days=[DAY], work_dir=work_dir, view=view,
                                       trastrainer=trastrainer)
    settings = set_settings(data_dir=data_dir, index_dir=index_dir, system=SYSTEM, work_dir=work_dir, config=config)
    evaluation = evaluate_index(index_dir=index_dir, input_file=data_dir / "input.json",
                                gt_file=data_dir / "groundtruth.jsonl", exclude_other_windows=True,
                                params=IndexParams.from_settings(settings.index, system=system_from_settings(settings)))
    report = score_file(truth_file=data_dir / "groundtruth.jsonl",
                        result_file=rules_answers(settings, out=data_dir.parent / "rules.jsonl"), settings=settings)
    overall = score_interval("ALL", report.cases, rules=rule_version(settings.challenge.rules))
    return {"cases": len(evaluation.cases), "ac1": list(evaluation.accuracy(evaluation.cases, 1)),
            "final": list(overall.final), "la": list(overall.la), "ta": list(overall.ta),
            "lead": evaluation.mean_lead(evaluation.cases),
            "leads": {case.uuid: round(case.lead, 3) for case in evaluation.cases if case.hits[1] and case.lead is not None},
            "misses": sorted(case.uuid for case in evaluation.misses(k=1))}


# A right answer's lead that moved by at least this much is named by ``--compare`` (case by case).
LEAD_MOVE = 0.05


def lead_moves(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, tuple[float, float]]]:
    """Per view in both runs: the cases right in both whose lead moved by ``LEAD_MOVE`` or more, (before, after).
    Runs saved before per-case leads were kept have none."""
    result = {}
    for view in after:
        old, new = before.get(view, {}).get("leads", {}), after[view].get("leads", {})
        result[view] = {uuid: (old[uuid], new[uuid]) for uuid in sorted(old.keys() & new.keys())
                        if abs(new[uuid] - old[uuid]) >= LEAD_MOVE}
    return result


def changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """Per view in both runs: the cases the index's first candidate now gets right (``won``) and now misses (``lost``)."""
    result = {}
    for view in after:
        if view in before:
            old, new = set(before[view]["misses"]), set(after[view]["misses"])
            result[view] = {"won": sorted(old - new), "lost": sorted(new - old)}
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nezha", type=Path, required=True, help="clone or bare git snapshot of the Nezha repository")
    parser.add_argument("--view", action="append", default=[], metavar="NAME",
                        help=f"a view (repeatable; default all: {', '.join(VIEWS)})")
    parser.add_argument("--trastrainer", type=Path, default=None,
                        help="clone or bare git snapshot of github.com/IntelligentDDS/TraStrainer: adds the view "
                             f"{MORE_TRACES_VIEW} (the day's trace minutes between injections too)")
    parser.add_argument("--work-dir", type=Path, default=Path("work/real"))
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--save", type=Path, default=None, help="write this run's figures and misses (JSON)")
    parser.add_argument("--compare", type=Path, default=None, help="a --save file of an earlier run: what changed")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        default = [*VIEWS, MORE_TRACES_VIEW] if args.trastrainer else VIEWS
        views = [View.parse(name) for name in (args.view or default)]
    except ValueError as exc:
        parser.error(str(exc))
    before = json.loads(args.compare.read_text(encoding="utf-8")) if args.compare else None

    try:
        figures = {view.name: view_figures(source=args.nezha, view=view, work_dir=args.work_dir, config=args.config,
                                           trastrainer=args.trastrainer) for view in views}
    except ValueError as exc:
        parser.error(str(exc))
    table = Table(title=f"{SYSTEM} {DAY} (tuning) in every view: index and rules (no model), 95% intervals")
    for column in ("view", "cases", "index AC@1", "lead", "rules final", "LA", "TA", "top-1 misses"):
        table.add_column(column)
    for name, row in figures.items():
        table.add_row(name, str(row["cases"]), interval_cell(tuple(row["ac1"])), f"{row['lead']:.3f}",
                      interval_cell(tuple(row["final"]), digits=1), f"{row['la'][0]:.2f}", f"{row['ta'][0]:.2f}",
                      " ".join(row["misses"]))
    console = Console(width=200)
    console.print(table)
    if before is not None:
        for view, change in changes(before, figures).items():
            old_final, new_final = before[view]["final"][0], figures[view]["final"][0]
            lead = f", lead {before[view]['lead']:.3f} -> {figures[view]['lead']:.3f}" if "lead" in before[view] else ""
            moved = lead_moves(before, figures)[view]
            moves = (", leads moved: " + ", ".join(f"{uuid} {a:.3f} -> {b:.3f}" for uuid, (a, b) in moved.items())
                     if moved else "")
            console.print(f"{view}: won {change['won'] or '-'}, lost {change['lost'] or '-'}, "
                          f"rules final {old_final:.1f} -> {new_final:.1f}{lead}{moves}")
    if args.save:
        args.save.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.save.with_name(args.save.name + ".tmp")
        tmp.write_text(json.dumps(figures, indent=1), encoding="utf-8")
        tmp.replace(args.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
