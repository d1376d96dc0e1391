"""Real public fault sets (Nezha) prepared for evaluation: imported once, indexed by the incremental nightly job.

``prepared_set`` runs ``rca import nezha`` and ``rca preprocess`` under a work directory, one
folder per (system, days, view); ``set_settings`` points a Settings at it; ``rules_answers``
writes the rules' answer for every case. ``scripts/eval_real.py`` (one set, index, rules and
model) and ``scripts/tuning_views.py`` (the tuning day in every view) build on them.

Protocol: OnlineBoutique 2022-08-22 is the tuning set (``TUNING_SETS``); OnlineBoutique
2022-08-23 and every TrainTicket day are evaluation sets, run once at the end of a round.
"""
from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.pipeline import rules_answer_lines
from preprocess import nezha
from rca.challenge import rule_version
from rca.settings import Settings, load_settings

log = logging.getLogger(__name__)

TUNING_SETS = {("onlineboutique", "2022-08-22")}
TELEMETRY = ("mesh", "traces", "metrics")  # what a view may leave out (``rca import nezha --without-...``)


@dataclass(frozen=True)
class View:
    """How a set is imported: the telemetry left out, TraStrainer's trace minutes added, and the share
    of whole traces kept."""

    without: tuple[str, ...] = ()
    keep_traces: float = 1.0
    # TraStrainer's trace minutes of the same day join Nezha's (``rca import nezha --more-traces``):
    # the day as a deployment that traces every minute records it, not only after each injection.
    more_traces: bool = False

    def __post_init__(self) -> None:
        unknown = [w for w in self.without if w not in TELEMETRY]
        if unknown:
            raise ValueError(f"view: unknown telemetry {unknown}; expected some of {TELEMETRY}")
        if not 0.0 < self.keep_traces <= 1.0:
            raise ValueError(f"view: keep_traces {self.keep_traces}: expected a share in (0, 1]")

    @property
    def suffix(self) -> str:
        """The folder suffix: ``-without-traces``, ``-traces-0.2``."""
        return "".join(f"-without-{w}" for w in self.without) + ("-more-traces" if self.more_traces else "") + (
            f"-traces-{self.keep_traces:g}" if self.keep_traces < 1.0 else "")

    @property
    def name(self) -> str:
        """``full``, ``without-traces``, ``without-metrics-traces-0.2``: what ``parse`` reads back."""
        return self.suffix.removeprefix("-") or "full"

    @classmethod
    def parse(cls, name: str) -> View:
        """The view a ``name`` says (``View.name``); a clear error for anything else."""
        if name == "full":
            return cls()
        rest, without, keep, more = name, [], 1.0, False
        while rest.startswith("without-"):
            head, _, rest = rest.removeprefix("without-").partition("-")
            without.append(head)
        if rest.startswith("more-traces"):
            more, rest = True, rest.removeprefix("more-traces").removeprefix("-")
        if rest.startswith("traces-"):
            try:
                keep = float(rest.removeprefix("traces-"))
            except ValueError:
                raise ValueError(f"view {name!r}: traces-SHARE needs a number, e.g. traces-0.2") from None
            rest = ""
        if rest:
            raise ValueError(f"view {name!r}: expected 'full' or without-mesh|traces|metrics parts, an optional "
                             "more-traces and an optional traces-SHARE, e.g. without-metrics-traces-0.2")
        return cls(without=tuple(without), keep_traces=keep, more_traces=more)

    @property
    def label(self) -> str:
        parts = [f"without {w}" for w in self.without]
        if self.more_traces:
            parts.append("with TraStrainer's trace minutes")
        if self.keep_traces < 1.0:
            parts.append(f"with {self.keep_traces:g} of its traces")
        return ", ".join(parts) or "full"


def is_tuning(*, system: str, days: list[str]) -> bool:
    return bool(days) and all((system, day) in TUNING_SETS for day in days)


def _run(command: list[str]) -> None:
    log.info("running %s", " ".join(command))
    done = subprocess.run(command, check=False, stdout=subprocess.DEVNULL)
    if done.returncode not in (0, 3):  # 3: finished with data loss (files absent from a snapshot), still usable
        raise SystemExit(f"{' '.join(command)} failed with status {done.returncode}")


def prepared_set(*, source: Path, system: str, days: list[str], work_dir: Path, view: View = View(),
                 trastrainer: Path | None = None) -> tuple[Path, Path]:
    """Import (once; reruns reuse it) and index one real set under ``work_dir``: its data and index folders.
    ``trastrainer``: a snapshot of TraStrainer's repository, which a ``more_traces`` view needs."""
    if view.more_traces and trastrainer is None:
        raise ValueError(f"view {view.name!r}: needs a snapshot of TraStrainer's repository (--trastrainer)")
    name = f"{system}-{'_'.join(days) or 'all'}{view.suffix}"
    data_dir, index_dir = work_dir / name / "data", work_dir / name / "index"
    rca = str(Path(sys.executable).with_name("rca"))
    if not (data_dir / "groundtruth.jsonl").exists():
        _run([rca, "-q", "import", "nezha", str(source), "--out", str(data_dir), "--system", system,
              *(arg for day in days for arg in ("--day", day)), *(f"--without-{w}" for w in view.without),
              *(("--keep-traces", f"{view.keep_traces:g}") if view.keep_traces < 1.0 else ()),
              *(("--more-traces", str(trastrainer)) if view.more_traces else ())])
    # Always: the nightly job is incremental (a partition it already holds costs a fingerprint),
    # and it rebuilds an index an older schema wrote.
    _run([rca, "-q", "preprocess", "--data-dir", str(data_dir), "--index-dir", str(index_dir), "--all"])
    return data_dir, index_dir


def inferred_system(*, data_dir: Path, system: str) -> Path:
    """The system description ``rca system infer`` drafts from the imported data, as a user would make it,
    told the one fact a user knows and the data hides: which systems run wholly on the JVM."""
    out = data_dir.parent / "system.toml"
    if not out.exists():
        rca = str(Path(sys.executable).with_name("rca"))
        known = ["--runtime", "*=java"] if system in nezha.JVM_SYSTEMS else []
        _run([rca, "-q", "system", "infer", "--data-dir", str(data_dir), "--out", str(out), "--name", system, *known])
    return out


def set_settings(*, data_dir: Path, index_dir: Path, system: str, work_dir: Path, config: Path | None = None,
                 system_file: Path | None = None) -> Settings:
    """Settings that read one prepared set. OnlineBoutique is HipsterShop, the bundled system; another
    system is described by ``system_file`` or, without one, by ``inferred_system``."""
    if system_file is None and system != "onlineboutique":
        system_file = inferred_system(data_dir=data_dir, system=system)
    base = load_settings(config_path=config, overrides={"system": {"file": system_file}})
    return base.model_copy(update={"paths": base.paths.model_copy(update={
        "index_dir": index_dir, "input_file": data_dir / "input.json", "data_dir": data_dir,
        "runs_dir": work_dir / "runs"})})


def rules_answers(settings: Settings, *, out: Path) -> Path:
    """The rules alone for every case (``bench.pipeline.rules_answer_lines``), written to ``out``."""
    lines = rules_answer_lines(settings, rules=rule_version(settings.challenge.rules))
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return out
