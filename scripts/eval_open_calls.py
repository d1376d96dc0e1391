#!/usr/bin/env python
"""The model on the rules' open calls: does it pick the right fault type where the rules tie?

A fast tuning probe for what the model is shown (scripts/bench_diagnose.py runs whole seed
sets). From tuning seed sets it takes every case whose rules-ranked component is right and
whose true fault type is among that component's open types (``diagnose.reading``), i.e. a
choice the model is actually asked to make:

* every such case where the rules' best SOP fit is the wrong type (the model can fix it);
* ``--keep-sample`` cases where the rules' type is right (the model can break it).

It runs the configured model on those cases and prints, per group, how often the model's
fault type is the true one, with the cases where model and rules differ. ``--cases FILE``
(a JSON-lines file this script wrote) replays exactly those cases, so two prompt variants
are compared on the same set:

    scripts/eval_open_calls.py --simulate-seed 101 ... --simulate-seed 104 --randomize --per-type 2 \\
        --work-dir work/tune-rules --out work/open-A.jsonl
    scripts/eval_open_calls.py ... --cases work/open-A.jsonl --out work/open-B.jsonl

Tuning seeds only (100-199): the selection reads the ground truth, which is what tuning is
for and what evaluation seeds must never be used for.
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from pathlib import Path

from bench.pipeline import add_tuning_set_arguments, tuning_sets_from_args
from diagnose.cases import Case, load_cases
from diagnose.service import Diagnoser
from rca.errors import RcaError

log = logging.getLogger("eval_open_calls")


def _instances(truth: dict) -> list[str]:
    return truth["instance"] if isinstance(truth["instance"], list) else [truth["instance"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_tuning_set_arguments(parser)
    parser.add_argument("--keep-sample", type=int, default=3, help="cases per seed where the rules are right")
    parser.add_argument("--cases", type=Path, default=None, help="replay the cases of an earlier --out file")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines: one row per case")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    replay = None
    if args.cases is not None:
        replay = {(row["seed"], row["uuid"]) for row in map(json.loads, args.cases.read_text(encoding="utf-8").splitlines())}

    sets = tuning_sets_from_args(parser, args)
    rows: list[dict] = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as out:
        for seed_set in sets:
            seed, problem_set, truth = seed_set.seed, seed_set.problem_set, seed_set.truth
            with Diagnoser.from_settings(seed_set.settings) as diagnoser:
                fixable: list[Case] = []
                kept: list[Case] = []
                for case in load_cases(problem_set.input_file):
                    if replay is not None:
                        if (seed, case.uuid) in replay:
                            fixable.append(case)
                        continue
                    try:
                        prepared = diagnoser.prepare(case)
                    except RcaError as exc:
                        log.warning("%s", exc)
                        continue
                    row = truth[case.uuid]
                    component = prepared.reading.component
                    open_types = (prepared.choices or {}).get(component, [])
                    if component in _instances(row) and row["fault_type"] in open_types:
                        (kept if prepared.reading.fault_type == row["fault_type"] else fixable).append(case)
                random.Random(seed).shuffle(kept)
                for case in fixable + kept[: args.keep_sample]:
                    record = diagnoser.diagnose(case)
                    decision, component = record.decision, record.final_answer().component
                    result = {"seed": seed, "uuid": case.uuid, "truth": truth[case.uuid]["fault_type"],
                              "rules": record.rules_fault_type, "model": decision.fault_type if decision else None,
                              "component": component, "choices": (record.choices or {}).get(component)}
                    rows.append(result)
                    out.write(json.dumps(result) + "\n")
                    out.flush()
                    log.info("%s", result)

    wrong = [r for r in rows if r["rules"] != r["truth"]]
    right = [r for r in rows if r["rules"] == r["truth"]]
    print(f"open calls: {len(rows)} cases")
    print(f"  rules wrong: {len(wrong)}, the model right in {sum(r['model'] == r['truth'] for r in wrong)}")
    print(f"  rules right: {len(right)}, the model right in {sum(r['model'] == r['truth'] for r in right)}")
    for r in rows:
        if r["model"] != r["rules"]:
            print(f"  differs: {r['uuid']}@{r['seed']} truth {r['truth']}: rules {r['rules']}, model {r['model']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
