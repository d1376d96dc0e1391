#!/usr/bin/env python
"""One case of the real tuning day, read closely: why did the ranker answer what it answered?

    scripts/tuning_case.py --nezha SRC 3fbd36b8-3                        # the full view
    scripts/tuning_case.py --nezha SRC --view traces-0.2 3fbd36b8-3 6531eb07-1
    scripts/tuning_case.py --nezha SRC --view without-traces --top 2 --lines 12 605ed02b-11

Per case: the truth (the importer's ground truth, read here to judge, never by the diagnoser),
the index's first candidates with their score breakdown and evidence lines (signal, z, the share
the component's own fault explains, onset), where the truth ranks, the lead of the first
candidate over its first rival (``index.confidence.first_rival``), and the rules' reading: the
fault type the first candidate's runbook signatures fit best, and the next. ``scripts/tuning_views.py``
names the cases a view misses; this says why.

Only the tuning set (OnlineBoutique 2022-08-22, ``bench.real_sets.TUNING_SETS``): there is no option
for another set, since evaluation sets are never read case by case.
"""
from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.index_eval import lead_over_rival
from bench.real_sets import TUNING_SETS, View, prepared_set, set_settings
from diagnose.cases import load_cases
from diagnose.service import Diagnoser
from index.confidence import first_rival
from index.models import Candidate
from judge.groundtruth import TruthCase, load_truth
from knowledge.signatures import SignatureMatch
from rca.errors import NoCandidates
from rca.system import SystemSpec, system_from_settings

(SYSTEM, DAY), = TUNING_SETS


def candidate_lines(candidates: Sequence[Candidate], *, truth: Sequence[str], top: int, lines: int,
                    system: SystemSpec) -> list[str]:
    """The first ``top`` candidates (``*`` marks the truth), each with up to ``lines`` evidence lines,
    then where the truth ranks when it is not among them, and the first candidate's lead."""
    out = []
    for candidate in candidates[:top]:
        parts = " ".join(f"{key}={value:.2f}" for key, value in candidate.score_breakdown.items())
        mark = "*" if candidate.component in truth else " "
        out.append(f"{mark} {candidate.component:30s} {candidate.level:7s} {candidate.score:6.2f}  {parts}")
        for item in candidate.evidence[:lines]:
            onset = f" from {item.onset:%H:%M}" if item.onset is not None else ""
            out.append(f"      {item.modality}/{item.signal} z={item.z:.1f} own={item.own_share:.2f}{onset}: {item.text}")
    rank = next((i for i, c in enumerate(candidates) if c.component in truth), None)
    if rank is None:
        out.append(f"  the truth is not among the {len(candidates)} candidates")
    elif rank >= top:
        out.append(f"  the truth ranks {rank + 1} ({candidates[rank].component}, {candidates[rank].score:.2f})")
    rival, lead = first_rival(candidates, system=system), lead_over_rival(candidates, system=system)
    if rival is not None and lead is not None:
        out.append(f"  lead over the first rival ({rival.component}, {rival.score:.2f}): {lead:.3f}")
    return out


def fit_lines(fits: Sequence[SignatureMatch], *, top: int = 3) -> list[str]:
    """The first ``top`` runbook fits of the first candidate, best first."""
    return [f"  fit {fit.fault_type:22s} {fit.score:.2f}  {fit.render()}" for fit in fits[:top]]


def case_report(diagnoser: Diagnoser, *, uuids: Sequence[str], truths: dict[str, TruthCase], input_file: Path,
                top: int, lines: int, system: SystemSpec) -> list[str]:
    """The report of each case of ``uuids`` (in the input's order); an unknown uuid is a clear error."""
    cases = {case.uuid: case for case in load_cases(input_file)}
    unknown = [uuid for uuid in uuids if uuid not in cases]
    if unknown:
        raise SystemExit(f"{input_file}: no case {', '.join(unknown)} on the tuning day ({SYSTEM} {DAY})")
    out = []
    wanted = set(uuids)
    for uuid in (u for u in cases if u in wanted):
        truth = truths[uuid]
        try:
            prepared = diagnoser.prepare(cases[uuid])
        except NoCandidates as exc:  # a view may hold nothing for a window: say so, read the next case
            out.append(f"== {uuid}: truth {truth.instance[0]} ({truth.fault_type}); no candidates")
            out.append(f"  {exc}")
            continue
        out.append(f"== {uuid}: truth {truth.instance[0]} ({truth.fault_type}); confidence {prepared.confidence}")
        out.extend(candidate_lines(prepared.candidates, truth=truth.instance, top=top, lines=lines, system=system))
        reading = prepared.reading
        out.append(f"  rules' reading: {reading.component} with {reading.fault_type}"
                   f" (next: {reading.alternative_type}, fit gap {reading.fit_gap})")
        out.extend(fit_lines(prepared.signature_matches.get(reading.component, [])))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("uuids", nargs="+", metavar="UUID", help="cases of the tuning day")
    parser.add_argument("--nezha", type=Path, required=True, help="clone or bare git snapshot of the Nezha repository")
    parser.add_argument("--view", default="full", help="how the day is imported (scripts/tuning_views.py's names)")
    parser.add_argument("--trastrainer", type=Path, default=None,
                        help="clone or bare git snapshot of TraStrainer's repository (the view more-traces needs it)")
    parser.add_argument("--work-dir", type=Path, default=Path("work/real"))
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--top", type=int, default=3, help="candidates shown (default 3)")
    parser.add_argument("--lines", type=int, default=6, help="evidence lines per candidate (default 6)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        view = View.parse(args.view)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        data_dir, index_dir = prepared_set(source=args.nezha, system=SYSTEM, days=[DAY], work_dir=args.work_dir,
                                           view=view, trastrainer=args.trastrainer)
    except ValueError as exc:
        parser.error(str(exc))
    settings = set_settings(data_dir=data_dir, index_dir=index_dir, system=SYSTEM, work_dir=args.work_dir,
                            config=args.config)
    truths = {truth.uuid: truth for truth in load_truth(data_dir / "groundtruth.jsonl")}
    with Diagnoser.from_settings(settings) as diagnoser:
        report = case_report(diagnoser, uuids=args.uuids, truths=truths, input_file=data_dir / "input.json",
                             top=args.top, lines=args.lines, system=system_from_settings(settings))
    sys.stdout.write("\n".join(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
