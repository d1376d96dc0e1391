#!/usr/bin/env python3
"""Render the case report of a simulated case with the real embedded model, and its screenshot.

Simulates one fault-injected case, builds its evidence index, diagnoses it with the
configured model (embedded Qwen2.5-Coder 1.5B by default), writes the case page and takes
a screenshot in headless Chromium (network blocked). The README's picture is the top of
that screenshot, palette-compressed:

    .venv/bin/python scripts/render_case_report.py                       # -> docs/img/case-report.png
    .venv/bin/python scripts/render_case_report.py --seed 7 --model qwen2.5-coder-0.5b --crop-height 0

Reruns reuse the simulated data, the index and the run record under ``--work-dir``.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

from PIL import Image

from diagnose.cases import load_cases
from diagnose.record import RunRecord
from diagnose.report.browser import screenshot
from diagnose.report.case import report_scorer, write_case_report
from diagnose.service import Diagnoser
from index.build import run_nightly
from rca.logsetup import configure_logging
from rca.settings import load_settings
from rca.system import system_from_settings
from simulate.simulator import SimulationOptions, simulate

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("render_case_report")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", type=Path, default=Path("work/case-report"))
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--model", default=None, help="embedded model (qwen2.5-coder-1.5b / qwen2.5-coder-0.5b)")
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "case-report.png")
    parser.add_argument("--crop-height", type=int, default=2300, help="keep the page's top N px (0: whole page)")
    args = parser.parse_args()
    configure_logging(0)

    work = args.work_dir
    settings = load_settings(config_path=args.config, overrides={
        # The knowledge base is built inside the work dir so the shared cache stays untouched.
        "paths": {"runs_dir": work / "runs", "index_dir": work / "index", "input_file": work / "data" / "input.json",
                  "kb_dir": work / "kb"},
        "llm": {"embedded_model": args.model},
    })
    if not (work / "data" / "input.json").exists():
        simulate(SimulationOptions(out_dir=work / "data", cases=1, seed=args.seed, scale="small"))
    # Skips partitions already built; the spans are read with the system the diagnoser is given.
    run_nightly(data_dir=work / "data", index_dir=work / "index", naming=system_from_settings(settings).trace)
    case = load_cases(settings.paths.input_file)[0]
    record_path = settings.paths.runs_dir / "adhoc" / f"{case.uuid}.json"
    if not record_path.exists():
        with Diagnoser.from_settings(settings) as diagnoser:
            diagnoser.diagnose_adhoc(case)
    record = RunRecord.load(record_path)
    log.info("%s answered %s by %s", case.uuid, record.answer.component if record.answer else None, record.usage.model)

    page = write_case_report(record, scorer=report_scorer(settings), out=work / f"{case.uuid}.html",
                             system=system_from_settings(settings))
    full = screenshot(page, out=work / f"{case.uuid}.png", width=1280, height=6000)
    with Image.open(full) as image:
        top = image.crop((0, 0, image.width, min(image.height, args.crop_height or image.height)))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        top.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(args.out, optimize=True)
    print(f"page: {page}\nscreenshot: {full}\nREADME image: {args.out}")


if __name__ == "__main__":
    main()
