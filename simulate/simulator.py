"""Top-level run of the simulator: options, the hours to write, and the day-by-day loop.

Each CST day is generated from its own seeded random streams (placement, each hour, the
metrics), so a day's bytes depend only on the seed and the schedule. Finished days are
recorded in ``<out>/.simulate-progress.json``; a rerun with the same options skips them.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from collections.abc import Callable
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rca.errors import InputError
from rca.system import bundled_system
from rca.timeutil import UTC, cst_day_and_hour, cst_day_bounds_utc, format_utc
from simulate import writer
from simulate.apm import ApmDay
from simulate.catalogue import INPUT_TEMPLATES
from simulate.logs import WORDINGS, build_hour_logs
from simulate.metrics import build_day_metrics, infra_rows, stable_seed
from simulate.randomize import FIXED_DAY, DayWorld, draw_day, randomize_confounder, randomize_fault
from simulate.requests import generate_hour
from simulate.schedule import Fault, draw_schedule, read_schedule
from simulate.topology import ALL_NODES, APM_PODS, APM_SERVICES, APP_PODS, WORKER_NODES, Placement, place_pods

log = logging.getLogger(__name__)
PROGRESS_FILE = ".simulate-progress.json"
BASELINE_HOURS = 1  # clean hour(s) before the first fault (>= 40 min of baseline)
BLIPS_PER_HOUR = 2


class ScaleProfile(BaseModel):
    model_config = ConfigDict(frozen=True)
    traces_per_hour: float
    apm_scale_up: float  # the system's requests per trace kept (the volume the APM counts)
    # Requests drawn one by one each hour, traced or not: the APM counts every one (its counts'
    # noise is that of the drawn requests, and the rest of the volume is scaled up from them).
    # Real per-pod request counts are steady (Nezha's tuning day: MAD/median 0.06); counted from
    # the sampled traces alone they were not (0.19-1.0, scripts/real_vs_sim.py).
    apm_requests_per_hour: float
    info_share: float  # share of everyday service info lines written
    verbose_frontend: bool  # "request started" lines as well as "request complete"


SCALES: dict[str, ScaleProfile] = {
    "small": ScaleProfile(traces_per_hour=1500, apm_scale_up=40.0, apm_requests_per_hour=30000, info_share=0.6,
                          verbose_frontend=False),
    "full": ScaleProfile(traces_per_hour=13000, apm_scale_up=4.0, apm_requests_per_hour=30000, info_share=1.0,
                         verbose_frontend=True),
}


class SimulationOptions(BaseModel):
    """What to simulate; validated at the CLI boundary."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    out_dir: Path
    days: int | None = Field(default=None, ge=1)
    cases: int | None = Field(default=None, ge=1)
    seed: int = 0
    scale: Literal["small", "full"] = "small"
    difficulty: float = Field(default=1.0, gt=0)
    schedule: Path | None = None
    start_date: date = date(2025, 6, 6)
    randomize: bool = False  # draw each fault's and each day's world from wide priors (simulate/randomize.py)
    # Quiet windows (no injected fault) written into input.json as extra cases, with their
    # truth in ``nofault.jsonl``, so detection benchmarks can count false positives.
    no_fault_windows: int = Field(default=0, ge=0)
    # Lines a traced service writes for a request state its trace context (trace_id / span_id), as
    # instrumented services write them (Nezha's do; the 2025 release's do not).
    log_trace_context: bool = False

    @model_validator(mode="after")
    def _one_extent(self) -> SimulationOptions:
        if self.days is not None and self.cases is not None:
            raise ValueError("give --days or --cases, not both")
        if self.days is not None and self.schedule is not None:
            raise ValueError("--days cannot be combined with --schedule (use --cases to limit a replay)")
        return self


def _rng(seed: int, *parts: str | int) -> np.random.Generator:
    return np.random.default_rng([seed & 0xFFFFFFFF, *(stable_seed(p) for p in parts)])


def plan(options: SimulationOptions) -> tuple[list[Fault], list[datetime]]:
    """The faults to inject and the UTC hours to write."""
    if options.schedule is not None:
        faults = read_schedule(options.schedule)
        if options.cases is not None:
            faults = faults[:options.cases]
        hours: set[datetime] = set()
        for f in faults:
            h = f.start.replace(minute=0, second=0, microsecond=0) - timedelta(hours=BASELINE_HOURS)
            while h <= f.end + timedelta(minutes=5):
                hours.add(h)
                h += timedelta(hours=1)
        return faults, sorted(hours)
    first, _ = cst_day_bounds_utc(options.start_date.isoformat())
    rng = _rng(options.seed, "schedule")
    if options.cases is not None:
        faults = []
        hour = first + timedelta(hours=BASELINE_HOURS)
        while len(faults) < options.cases:
            faults += draw_schedule(rng=rng, first_hour=hour, hours=1, first_number=len(faults) + 1)
            hour += timedelta(hours=1)
        last = faults[-1].end.replace(minute=0, second=0, microsecond=0)
        count = int((last - first).total_seconds() // 3600) + 1
        return faults, [first + timedelta(hours=k) for k in range(count)]
    total = 24 * (options.days or 1)
    faults = draw_schedule(rng=rng, first_hour=first + timedelta(hours=BASELINE_HOURS), hours=total - BASELINE_HOURS)
    return faults, [first + timedelta(hours=k) for k in range(total)]


def _blip(kind: str, *, start: datetime, minutes: int, pods: tuple[str, ...] = (), node: str = "") -> Fault:
    service = bundled_system().service_of(pods[0]) if pods else ""
    return Fault(f"blip-{kind}", kind, "pod" if pods else "node", service, pods, node, "", "", start,
                 start + timedelta(minutes=minutes), {})


def draw_blips(*, faults: list[Fault], hours: list[datetime], rng: np.random.Generator,
               per_hour: dict[datetime, int] | None = None) -> list[Fault]:
    """Benign blips every hour, plus one unrelated confounder near every case."""
    blips: list[Fault] = []
    kinds = ("blip latency", "blip pod cpu", "blip node cpu", "blip errors")
    service_of = bundled_system().service_of  # the simulated world is the bundled HipsterShop

    def one(start: datetime, avoid_pods: tuple[str, ...], avoid_node: str) -> Fault:
        kind = kinds[int(rng.integers(len(kinds)))]
        minutes = int(rng.integers(2, 6))
        if kind == "blip node cpu":
            nodes = [n for n in WORKER_NODES if n != avoid_node]
            return _blip(kind, start=start, minutes=minutes, node=nodes[int(rng.integers(len(nodes)))])
        pods = [p for p in APP_PODS if p not in avoid_pods and service_of(p) not in
                {service_of(a) for a in avoid_pods}]
        return _blip(kind, start=start, minutes=minutes, pods=(pods[int(rng.integers(len(pods)))],))

    for f in faults:
        offset = timedelta(seconds=int(rng.integers(-600, max(60, int((f.end - f.start).total_seconds())))))
        blips.append(one(f.start + offset, f.pods + tuple(x for x in (f.source, f.destination) if x), f.node))
    for h in hours:
        for _ in range(BLIPS_PER_HOUR if per_hour is None else per_hour[h]):
            blips.append(one(h + timedelta(seconds=int(rng.integers(0, 3600))), (), ""))
    return blips


def _pods_on_node(placement: Placement) -> dict[str, tuple[str, ...]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for pod, node in placement.node_of.items():
        grouped[node].append(pod)
    return {n: tuple(p) for n, p in grouped.items()}


def _overlapping(faults: list[Fault], start: datetime, end: datetime) -> list[Fault]:
    return [f for f in faults if f.start <= end and f.end + timedelta(minutes=1) >= start]


NO_FAULT_MINUTES = 10
NO_FAULT_CLEARANCE = timedelta(minutes=10)  # after a fault ends, before a quiet window opens
NO_FAULT_BASELINE = timedelta(minutes=35)  # data needed before a quiet window (index baseline)


class NoFaultWindowError(InputError):
    """The written hours have fewer fault-free gaps than quiet windows were asked for."""


def no_fault_windows(*, faults: list[Fault], hours: list[datetime], count: int,
                     rng: np.random.Generator) -> list[tuple[datetime, datetime]]:
    """``count`` windows of ``NO_FAULT_MINUTES`` inside written hours that overlap no fault.

    Gaps run from a fault's end (plus clearance) to the next fault's start; one window per
    gap, gaps taken in a seeded random order, so benign blips may fall inside (as in life).
    """
    if count == 0:
        return []
    length = timedelta(minutes=NO_FAULT_MINUTES)
    first, last = min(hours), max(hours) + timedelta(hours=1)
    edges = sorted((f.start, f.end) for f in faults)
    gaps: list[tuple[datetime, datetime]] = []
    cursor = first + NO_FAULT_BASELINE
    for start, end in edges:
        if start - timedelta(minutes=5) - cursor >= length:
            gaps.append((cursor, start - timedelta(minutes=5)))
        cursor = max(cursor, end + NO_FAULT_CLEARANCE)
    if last - cursor >= length:
        gaps.append((cursor, last))
    if len(gaps) < count:
        raise NoFaultWindowError(f"--no-fault-windows {count}: only {len(gaps)} fault-free gap(s) of "
                                 f"{NO_FAULT_MINUTES} min in the simulated hours; ask for fewer or simulate more cases")
    picked = sorted(int(i) for i in rng.permutation(len(gaps))[:count])
    windows = []
    for i in picked:
        lo, hi = gaps[i]
        slack = int((hi - lo - length).total_seconds())
        start = lo + timedelta(seconds=int(rng.integers(0, slack + 1)))
        windows.append((start, start + length))
    return windows


def _fingerprint(options: SimulationOptions) -> str:
    return hashlib.sha256(options.model_dump_json(exclude={"out_dir", "no_fault_windows"}).encode()).hexdigest()[:16]


def simulate_day(*, out: Path, day: str, hours: list[datetime], faults: list[Fault], options: SimulationOptions,
                 world: DayWorld = FIXED_DAY, hour_done: Callable[[datetime], None] | None = None) -> None:
    """Write every hour file and the day's metric files of one CST day; ``hour_done`` is told each hour written."""
    profile = SCALES[options.scale]
    strength = 1.0 / options.difficulty
    day_start, day_end = cst_day_bounds_utc(day)
    first_minute = int((min(hours) - day_start).total_seconds() // 60)
    placement = place_pods(rng=_rng(options.seed, "placement", day), day=day, first_minute=first_minute)
    pods_on_node = _pods_on_node(placement)
    day_faults = _overlapping(faults, day_start - timedelta(hours=1), day_end)
    traces_per_hour = profile.traces_per_hour * world.trace_rate
    requests_per_hour = max(profile.apm_requests_per_hour, traces_per_hour)
    apm = ApmDay(day_start_s=int(day_start.timestamp()),
                 scale_up=profile.traces_per_hour * profile.apm_scale_up / requests_per_hour)
    agents = writer.agent_names(ALL_NODES)
    for hour in hours:
        _, cst_hour = cst_day_and_hour(hour)
        rng = _rng(options.seed, "hour", format_utc(hour))
        hour_faults = _overlapping(day_faults, hour - timedelta(minutes=2), hour + timedelta(hours=1))
        spans, calls = generate_hour(hour_start=hour, requests_per_hour=requests_per_hour,
                                     trace_share=traces_per_hour / requests_per_hour,
                                     latency_jitter=world.latency_jitter, faults=hour_faults,
                                     placement=placement, pods_on_node=pods_on_node, strength=strength, rng=rng)
        logs = build_hour_logs(spans=spans, faults=hour_faults, placement=placement,
                               hour_start_s=int(hour.timestamp()), info_share=min(1.0, profile.info_share * world.log_rate),
                               verbose_frontend=profile.verbose_frontend, rng=rng, wording=world.wording,
                               trace_context=options.log_trace_context)
        writer.write_atomic(writer.span_table(spans), writer.hour_file(out, family="trace", day=day, cst_hour=cst_hour))
        writer.write_atomic(writer.log_table(logs, agents=agents),
                            writer.hour_file(out, family="log", day=day, cst_hour=cst_hour))
        apm.add_hour(hour_start_s=int(hour.timestamp()), calls=calls)
        log.info("simulated %s CST %02d:00: %d spans, %d log lines, %d faults active",
                 day, cst_hour, len(spans), len(logs.message), sum(1 for f in hour_faults if f.record))
        if hour_done is not None:
            hour_done(hour)

    minutes_s = apm.day_start_s + 60 * np.nonzero(apm.covered)[0]
    frame = build_day_metrics(minutes_s=minutes_s, faults=day_faults, placement=placement, pods_on_node=pods_on_node,
                              strength=strength, noise_scale=options.difficulty ** 0.5 * world.noise_scale,
                              rng=_rng(options.seed, "metrics", day))
    for infra in infra_rows(frame, placement=placement, day_start_s=apm.day_start_s):
        writer.write_atomic(writer.infra_table(infra),
                            writer.infra_path(out, day=day, family=infra.family, kpi_key=infra.kpi_key))
    for pod in APM_PODS:
        if pod == placement.moved_pod:
            # The pod was rescheduled early in the day: its old incarnation is a `deleted` file.
            old = apm.pod_rows(pod=pod, faults=day_faults, last_minute=placement.move_minute)
            if len(old.time_s):
                writer.write_atomic(writer.apm_table(old), writer.apm_path(out, day=day, rows=old, deleted=True))
            rows = apm.pod_rows(pod=pod, faults=day_faults, first_minute=placement.move_minute)
        else:
            rows = apm.pod_rows(pod=pod, faults=day_faults)
        writer.write_atomic(writer.apm_table(rows), writer.apm_path(out, day=day, rows=rows))
    for service in APM_SERVICES:
        rows = apm.service_rows(service=service)
        writer.write_atomic(writer.apm_table(rows), writer.apm_path(out, day=day, rows=rows))
    rows = apm.namespace_rows()
    writer.write_atomic(writer.apm_table(rows), writer.apm_path(out, day=day, rows=rows))


def simulate(options: SimulationOptions, *, on_hour: Callable[[str, int], None] | None = None) -> list[Fault]:
    """Write the whole simulated release under ``options.out_dir``; returns the injected faults.

    ``on_hour`` is told each simulated (or already complete, skipped) hour: its label and the
    run's number of hours (a progress bar's total).
    """
    out = options.out_dir
    out.mkdir(parents=True, exist_ok=True)
    faults, hours = plan(options)
    by_day: dict[str, list[datetime]] = defaultdict(list)
    for h in hours:
        by_day[cst_day_and_hour(h)[0]].append(h.replace(tzinfo=UTC))
    worlds = {day: FIXED_DAY for day in by_day}
    per_hour = None
    if options.randomize:
        worlds = {day: draw_day(_rng(options.seed, "world", day), wordings=len(WORDINGS)) for day in by_day}
        per_hour = {h: worlds[cst_day_and_hour(h)[0]].blips_per_hour for h in hours}
        rng = _rng(options.seed, "fault worlds")
        faults = [randomize_fault(f, rng) for f in faults]
    blips = draw_blips(faults=faults, hours=hours, rng=_rng(options.seed, "blips"), per_hour=per_hour)
    if options.randomize:
        rng = _rng(options.seed, "confounder worlds")
        blips = [randomize_confounder(b, rng) for b in blips]

    def hour_done(hour: datetime) -> None:
        if on_hour is not None:
            day, cst_hour = cst_day_and_hour(hour)
            on_hour(f"{day} CST {cst_hour:02d}:00", len(hours))

    progress_path = out / PROGRESS_FILE
    fingerprint = _fingerprint(options)
    done: list[str] = []
    if progress_path.exists():
        saved = json.loads(progress_path.read_text(encoding="utf-8"))
        if saved.get("fingerprint") == fingerprint:
            done = list(saved.get("days_done", []))
    for number, day in enumerate(sorted(by_day), start=1):
        if day in done:
            log.info("day %s already complete, skipped (%d/%d)", day, number, len(by_day))
            for hour in by_day[day]:
                hour_done(hour)
            continue
        log.info("simulating day %s (%d/%d), %d hours", day, number, len(by_day), len(by_day[day]))
        simulate_day(out=out, day=day, hours=by_day[day], faults=faults + blips, options=options, world=worlds[day],
                     hour_done=hour_done)
        done.append(day)
        writer.write_text_atomic(json.dumps({"fingerprint": fingerprint, "days_done": done}), progress_path)

    rng = _rng(options.seed, "descriptions")
    descriptions = [INPUT_TEMPLATES[int(rng.integers(len(INPUT_TEMPLATES)))].format(
        start=format_utc(f.start), end=format_utc(f.end)) for f in faults]
    quiet = _quiet_cases(faults=faults, hours=hours, options=options)
    writer.write_cases(out, records=[f.record for f in faults], descriptions=descriptions, quiet=quiet)
    return faults


def _quiet_cases(*, faults: list[Fault], hours: list[datetime], options: SimulationOptions) -> list[dict[str, str]]:
    """The no-fault cases: uuid (same shape as a fault's), description and window."""
    rng = _rng(options.seed, "no-fault")
    windows = no_fault_windows(faults=faults, hours=hours, count=options.no_fault_windows, rng=rng)
    cases = []
    for number, (start, end) in enumerate(windows, start=len(faults) + 1):
        template = INPUT_TEMPLATES[int(rng.integers(len(INPUT_TEMPLATES)))]
        cases.append({"uuid": f"{int(rng.integers(0, 2**32)):08x}-{number}",
                      "description": template.format(start=format_utc(start), end=format_utc(end)),
                      "start_time": format_utc(start), "end_time": format_utc(end)})
    return cases
