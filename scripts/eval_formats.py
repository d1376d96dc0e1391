#!/usr/bin/env python
"""The same simulated telemetry answered twice: as released, and as a user's own stack would hand it over.

The reference path indexes a simulated seed set as ``rca simulate`` writes it, with the bundled
HipsterShop description. The user's path exports the same telemetry as their collector would write
it (``--format otlp``: OTLP/JSON traces, logs and metrics; ``--format mixed``: Jaeger, Prometheus
``query_range`` and Loki documents), imports it with the readers ``rca import`` uses, describes the
system with ``rca system infer`` (nothing bundled: its services, calls and runtimes as the data
shows them), indexes it with that description and answers every case. Both paths answer with the
rules alone (as scripts/eval_rules.py), so a seed set costs seconds to answer once indexed.

It prints LA, TA and final of each path with 95% intervals, how many answers agree, and every case
whose answer differs, with the fault's truth. What the import loses (a reading fault) and what an
inferred description does not know (a call no trace shows) both show here; the format tests
(tests/test_formats_index.py) already hold the first to zero with the bundled description.

    scripts/eval_formats.py --simulate-seed 101 --simulate-seed 102 --randomize --per-type 2
    scripts/eval_formats.py --nezha SRC                  # the real tuning day (Nezha OnlineBoutique 2022-08-22)

Tuning seeds are 100-199, evaluation seeds 200-299; the script refuses to mix them. ``--nezha SRC``
(a clone or bare snapshot of Nezha's repository) answers the real tuning day instead, imported and
indexed as ``scripts/eval_real.py`` does, against its user's path; it has no option for an evaluation
set (those are run once, by eval_real.py).
``--system FILE`` indexes the user's path with that description instead of the drafted one (to
measure what a reviewed description recovers).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
from rich.console import Console
from rich.table import Table

from bench import export, real_sets
from bench.pipeline import (
    add_seed_set_arguments,
    aimed_settings,
    print_score_intervals,
    refuse_mixed_seeds,
    rules_answers,
    seed_index_sets,
    seed_report_name,
    seeded_truth_rows,
)
from bench.report import score_file, score_intervals
from index.build import run_nightly
from preprocess.dataset_writer import write_frames
from preprocess.formats import make_reader
from preprocess.infer_system import infer_system, render_toml
from rca.challenge import rule_version
from rca.errors import RcaError
from rca.settings import load_settings
from rca.system import load_system

log = logging.getLogger("eval_formats")

FORMATS = ("otlp", "mixed")


def _exports(frames: dict[str, pl.DataFrame], *, fmt: str, out: Path) -> Iterator[tuple[str, list[Path]]]:
    """Write the frames as ``fmt``'s producers write them; yield (reader, files) to import."""
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "otlp":
        yield "otlp", [export.write_otlp_json(out / "traces.jsonl", export.otlp_trace_requests(frames["spans"])),
                       export.write_otlp_json(out / "logs.jsonl", export.otlp_log_requests(frames["logs"])),
                       export.write_otlp_json(out / "metrics.jsonl",
                                              export.otlp_metric_requests(apm=frames["apm"], infra=frames["infra"]))]
        return
    documents = {"jaeger": export.jaeger_document(frames["spans"]),
                 "prometheus": export.prometheus_query_range(apm=frames["apm"], infra=frames["infra"]),
                 "loki": export.loki_query_range(frames["logs"])}
    for reader, document in documents.items():
        path = out / f"{reader}.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        yield reader, [path]


def user_dataset(release: Path, *, fmt: str, out: Path) -> Path:
    """The release exported as ``fmt`` and imported as ``rca import`` does: the dataset under ``out/data``."""
    data_dir = out / "data"
    if (out / "imported").exists():
        return data_dir
    frames = export.release_frames(release)
    for reader, files in _exports(frames, fmt=fmt, out=out / "exports"):
        result = make_reader(reader).read(files)
        if result.lost:
            raise RcaError(f"{reader}: the import lost {len(result.lost)} record(s), first: {result.lost[0]}")
        write_frames(data_dir, **result.frames())
    (out / "imported").write_text(fmt, encoding="utf-8")
    return data_dir


def drafted_system(data_dir: Path, *, out: Path) -> Path:
    """``rca system infer`` on the imported dataset, written as the user would review it."""
    path = out / "system.toml"
    path.write_text(render_toml(infer_system(data_dir), data_dir=data_dir, name="my-system"), encoding="utf-8")
    return path


def user_index(data_dir: Path, *, system_file: Path, out: Path) -> Path:
    """The user's dataset indexed with ``system_file`` (its ``[traces]`` name the peers) under ``out``."""
    index_dir = out / f"index-{system_file.stem}"
    run_nightly(data_dir=data_dir, index_dir=index_dir, naming=load_system(system_file).trace, workers=1)
    return index_dir


def real_tuning_day(*, source: Path, fmt: str, system_file: Path | None, work_dir: Path,
                    config: Path | None) -> tuple[list[str], dict[str, list[str]]]:
    """The real tuning day answered as released (the bundled HipsterShop description) and on the user's
    path: (truth rows, {path: answer lines})."""
    (system, day), = real_sets.TUNING_SETS
    data_dir, index_dir = real_sets.prepared_set(source=source, system=system, days=[day], work_dir=work_dir)
    released = real_sets.set_settings(data_dir=data_dir, index_dir=index_dir, system=system, work_dir=work_dir,
                                      config=config)
    user_dir = data_dir.parent / f"user-{fmt}"
    user_data = user_dataset(data_dir, fmt=fmt, out=user_dir)
    described = system_file or drafted_system(user_data, out=user_dir)
    user = released.model_copy(update={
        "paths": released.paths.model_copy(update={"index_dir": user_index(user_data, system_file=described,
                                                                            out=user_dir),
                                                   "data_dir": user_data}),
        "system": released.system.model_copy(update={"file": described})})
    answers = {name: real_sets.rules_answers(settings, out=user_dir / f"{name}.answers.jsonl").read_text(
        encoding="utf-8").splitlines() for name, settings in (("released", released), (fmt, user))}
    return (data_dir / "groundtruth.jsonl").read_text(encoding="utf-8").splitlines(), answers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_seed_set_arguments(parser, required=False)
    parser.add_argument("--nezha", type=Path, default=None,
                        help="answer the real tuning day from this Nezha snapshot instead of simulated seeds")
    parser.add_argument("--format", choices=FORMATS, default="otlp",
                        help="otlp: OTLP/JSON files; mixed: Jaeger + Prometheus query_range + Loki documents")
    parser.add_argument("--system", type=Path, default=None,
                        help="index the user's path with this description, not the one infer drafts")
    parser.add_argument("--work-dir", type=Path, default=Path("work/eval-index"))
    parser.add_argument("--config", type=Path, default=None, help="TOML config (its [index] and [diagnose] apply)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if bool(args.simulate_seed) == (args.nezha is not None):
        parser.error("give --simulate-seed (one or more) or --nezha SRC")
    refuse_mixed_seeds(parser, args.simulate_seed)

    base = load_settings(config_path=args.config)
    rules = rule_version(base.challenge.rules)
    truth_rows: list[str] = []
    by_path: dict[str, list[str]] = {"released": [], args.format: []}
    if args.nezha is not None:
        truth_rows, by_path = real_tuning_day(source=args.nezha, fmt=args.format, system_file=args.system,
                                              work_dir=args.work_dir, config=args.config)
    for seed, problem_set, index_dir in seed_index_sets(args):
        truth_rows += seeded_truth_rows(problem_set, seed=seed)
        released = aimed_settings(base, problem_set, index_dir=index_dir).model_copy(
            update={"system": base.system.model_copy(update={"file": None})})
        by_path["released"] += rules_answers(released, seed=seed, rules=rules)

        user_dir = index_dir.parent / f"user-{args.format}"
        data_dir = user_dataset(problem_set.data_dir, fmt=args.format, out=user_dir)
        system_file = args.system or drafted_system(data_dir, out=user_dir)
        user = released.model_copy(update={
            "paths": released.paths.model_copy(update={
                "index_dir": user_index(data_dir, system_file=system_file, out=user_dir), "data_dir": data_dir}),
            "system": base.system.model_copy(update={"file": system_file})})
        by_path[args.format] += rules_answers(user, seed=seed, rules=rules)

    name = f"{seed_report_name('formats', args) if args.simulate_seed else 'formats-nezha'}-{args.format}"
    truth_file = args.work_dir / f"{name}.truth.jsonl"
    truth_file.write_text("\n".join(truth_rows) + "\n", encoding="utf-8")
    console = Console(width=160)
    chosen: dict[str, dict[str, dict]] = {}
    for path_name, lines in by_path.items():
        result_file = args.work_dir / f"{name}.{path_name}.answers.jsonl"
        result_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
        report = score_file(truth_file=truth_file, result_file=result_file, settings=base)
        print_score_intervals(score_intervals(report.cases, rules=rules), console,
                              title=f"{path_name}: rules only, per fault type, 95% intervals (bootstrap over cases)")
        chosen[path_name] = {json.loads(line)["uuid"]: json.loads(line) for line in lines}

    truth = {json.loads(line)["uuid"]: json.loads(line) for line in truth_rows}
    reference, user_answers = chosen["released"], chosen[args.format]
    differ = Table(title=f"cases answered differently: released vs {args.format}"
                         f"{' (' + str(args.system) + ')' if args.system else ' (description drafted by infer)'}")
    for column in ("case", "fault", "truth", "released", args.format):
        differ.add_column(column)
    same = 0
    for uuid, row in truth.items():
        left, right = reference.get(uuid, {}), user_answers.get(uuid, {})
        if (left.get("component"), left.get("reason")) == (right.get("component"), right.get("reason")):
            same += 1
            continue
        instance = row.get("instance")
        differ.add_row(uuid, str(row.get("fault_type")), ", ".join(instance) if isinstance(instance, list) else str(instance),
                       f"{left.get('component', '-')}: {left.get('reason', 'unanswered')[:40]}",
                       f"{right.get('component', '-')}: {right.get('reason', 'unanswered')[:40]}")
    console.print(differ)
    console.print(f"{same} of {len(truth)} cases answered alike ({args.format} against the release)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
