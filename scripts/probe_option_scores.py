#!/usr/bin/env python
"""Does the model's probability of each open option carry signal the rules lack? A tuning probe.

The pipeline asks the model to *write* its choice, and a small model mostly writes the first
option it was offered (scripts/eval_open_calls.py). This probe reads the model's
probabilities instead, so every open (component, fault type) option of a case gets a number
whatever its position:

* ``letters``: the options as lettered lines, ranked order (the rules' pick is A); the
  log-probability of each letter as the first reply token (``next_token_logprobs``);
* ``letters_both``: the mean of that and the same question with the options reversed (a
  position bias shows as the two orders disagreeing);
* ``yes_no``: one question per option, "Is the root cause T on C?", scored log P(yes) - log P(no)
  (no positions at all; the shared evidence prefix is cached, so each question costs its tail).

Each score is log-softmax normalised over the options, then combined with a head start of
``beta`` nats for the rules' pick (index top-1 + best SOP fit): beta 0 is the model alone,
a large beta is the rules alone. The table shows, per method and beta, how many cases end on
the true (component, fault type) and how many the model changes for better or worse. A method
worth shipping needs a beta where "better" clearly exceeds "worse".

    scripts/probe_option_scores.py --simulate-seed 101 --randomize --per-type 2 \\
        --work-dir work/tune-rules --out work/option-scores-101.jsonl

Tuning seeds only (100-199): the table reads the ground truth. ``--rows FILE`` re-prints the
table from an earlier ``--out`` without running the model.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import string
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.pipeline import add_tuning_set_arguments, tuning_sets_from_args
from diagnose.cases import load_cases
from diagnose.pipeline import PreparedCase
from diagnose.service import Diagnoser
from rca.errors import RcaError

log = logging.getLogger("probe_option_scores")

BETAS = (0.0, 0.5, 1.0, 2.0, 3.0)
# Where the shipped prompt turns from evidence to the question; the probe asks its own question there.
SYSTEM_QUESTION = "Answer with compact JSON only:"
USER_QUESTIONS = ("\nRules' reading (code, not a decision)", "\nnotes:\n", "\nChoose: ")
LETTERS_QUESTION = "Which option is the root cause? Answer with its letter only."


def _evidence_part(prepared: PreparedCase) -> tuple[str, str]:
    """The shipped system and case text up to (not including) their question."""
    system, user = (m["content"] for m in prepared.prompt.messages)
    if SYSTEM_QUESTION not in system:
        raise SystemExit(f"the system prompt no longer contains {SYSTEM_QUESTION!r}; update this probe")
    cut = min((user.index(marker) for marker in USER_QUESTIONS if marker in user), default=None)
    if cut is None:
        raise SystemExit(f"{prepared.case.uuid}: the case prompt has none of {USER_QUESTIONS}; update this probe")
    return system[: system.index(SYSTEM_QUESTION)], user[:cut]


def _log_softmax(values: Sequence[float]) -> list[float]:
    top = max(values)
    norm = top + math.log(sum(math.exp(v - top) for v in values))
    return [v - norm for v in values]


def _letter_scores(llm, system: str, user: str, options: Sequence[tuple[str, str]]) -> list[float]:
    lines = [user, "Options (component: fault type):"]
    lines += [f"{string.ascii_uppercase[i]}) {component}: {fault_type}" for i, (component, fault_type) in enumerate(options)]
    lines.append(LETTERS_QUESTION)
    messages = [{"role": "system", "content": system + "Answer with the letter of the root-cause option."},
                {"role": "user", "content": "\n".join(lines)}]
    _, found = llm.next_token_logprobs(messages, top=20)
    by_letter: dict[str, float] = {}
    for token, logprob in found.items():
        by_letter.setdefault(token.strip(), logprob)
    floor = min(found.values()) - 1.0  # an option outside the top 20: below all of them
    return [by_letter.get(string.ascii_uppercase[i], floor) for i in range(len(options))]


def _yes_no_scores(llm, system: str, user: str, options: Sequence[tuple[str, str]]) -> list[float]:
    scores = []
    for component, fault_type in options:
        messages = [{"role": "system", "content": system + "Answer yes or no."},
                    {"role": "user", "content": f"{user}Is the root cause {fault_type} on {component}? Answer yes or no."}]
        _, found = llm.next_token_logprobs(messages, top=20)
        floor = min(found.values()) - 1.0
        yes = max((lp for token, lp in found.items() if token.strip().lower() == "yes"), default=floor)
        no = max((lp for token, lp in found.items() if token.strip().lower() == "no"), default=floor)
        scores.append(yes - no)
    return scores


def _score_case(llm, prepared: PreparedCase, *, max_options: int) -> dict | None:
    options = [(component, fault_type) for component, types in (prepared.choices or {}).items() for fault_type in types]
    options = options[:max_options]
    if len(options) < 2:
        return None
    system, user = _evidence_part(prepared)
    forward = _letter_scores(llm, system, user, options)
    backward = _letter_scores(llm, system, user, options[::-1])[::-1]
    return {"options": options, "rules": [prepared.reading.component, prepared.reading.fault_type],
            "letters": forward, "letters_reversed": backward, "yes_no": _yes_no_scores(llm, system, user, options)}


def _method_scores(row: dict, method: str) -> list[float]:
    if method == "letters":
        return _log_softmax(row["letters"])
    if method == "letters_both":
        return [(a + b) / 2 for a, b in zip(_log_softmax(row["letters"]), _log_softmax(row["letters_reversed"]))]
    return _log_softmax(row["yes_no"])


def _is_truth(row: dict, option: Sequence[str]) -> bool:
    return option[0] in row["truth_components"] and option[1] == row["truth_fault_type"]


def print_table(rows: Sequence[dict]) -> None:
    rules_right = sum(_is_truth(r, r["rules"]) for r in rows)
    reachable = sum(any(_is_truth(r, o) for o in r["options"]) for r in rows)
    print(f"cases {len(rows)}: the rules' pick is the truth in {rules_right}; the truth is an option in {reachable}")
    print("| method | beta | right | changed | better | worse |")
    print("|---|---|---|---|---|---|")
    for method in ("letters", "letters_both", "yes_no"):
        for beta in BETAS:
            right = changed = better = worse = 0
            for r in rows:
                scores = [s + (beta if list(o) == r["rules"] else 0.0) for s, o in zip(_method_scores(r, method), r["options"])]
                pick = r["options"][max(range(len(scores)), key=scores.__getitem__)]
                right += _is_truth(r, pick)
                if list(pick) != r["rules"]:
                    changed += 1
                    better += _is_truth(r, pick) and not _is_truth(r, r["rules"])
                    worse += _is_truth(r, r["rules"]) and not _is_truth(r, pick)
            print(f"| {method} | {beta:g} | {right} | {changed} | {better} | {worse} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_tuning_set_arguments(parser)
    parser.add_argument("--max-options", type=int, default=12)
    parser.add_argument("--out", type=Path, help="JSON lines: one row per case with every score")
    parser.add_argument("--rows", type=Path, help="print the table of an earlier --out file; runs nothing")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.rows is not None:
        print_table([json.loads(line) for line in args.rows.read_text(encoding="utf-8").splitlines()])
        return 0
    if not args.simulate_seed or args.out is None:
        parser.error("give --simulate-seed and --out (or --rows)")
    sets = tuning_sets_from_args(parser, args)
    rows: list[dict] = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as out:
        for seed_set in sets:
            seed, truth = seed_set.seed, seed_set.truth
            with Diagnoser.from_settings(seed_set.settings) as diagnoser:
                for case in load_cases(seed_set.problem_set.input_file):
                    try:
                        prepared = diagnoser.prepare(case)
                    except RcaError as exc:
                        log.warning("%s", exc)
                        continue
                    row = _score_case(diagnoser.llm, prepared, max_options=args.max_options)
                    if row is None:
                        continue
                    known = truth[case.uuid]
                    instances = known["instance"] if isinstance(known["instance"], list) else [known["instance"]]
                    row = {"seed": seed, "uuid": case.uuid, "truth_components": instances,
                           "truth_fault_type": known["fault_type"], **row}
                    rows.append(row)
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    log.info("%s@%d scored %d options", case.uuid, seed, len(row["options"]))
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
