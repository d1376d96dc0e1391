"""Domain randomisation: draw each case's world from wide priors instead of one best guess.

A detector tuned on one simulator learns that simulator's habits (effect sizes, onset
sharpness, noise level, sampling). With ``--randomize`` every fault and every day draws its
own world from the priors below, so a ranking that scores well across them is less likely to
rely on one guess. Default runs (no ``--randomize``) keep the fixed world, byte for byte.

Each prior, its range and why the range is plausible:

| prior | range | why |
| --- | --- | --- |
| ``effect`` (per fault) | log-uniform 0.35-4.0 x | chaos tools inject a fixed stress, but what reaches KPIs depends on limits, load and replicas; real KPI shifts for the same fault type differ several-fold between cases (Nezha's OnlineBoutique tuning day: pod_cpu_usage under cpu stress 1.5-219x, median 14x, above the old 0.35-1.6: ``scripts/real_vs_sim.py``). The low end stays 0.35: the culprit's own rrt staying flat under a network delay is where the delay shows (on its callers' calls), not a weaker fault, and a 0.2 floor only made faults invisible (index AC@1 0.94 -> 0.88 on tuning seeds 105-107) |
| ``lag_s`` (per fault) | 0-90 s | chaos-mesh applies after scheduling and container exec; a stress ramps up before it bites; the window in input.json is the injection time, not the onset |
| ``ramp_s`` (per fault) | 0-180 s | CPU and memory stress climb; network rules take effect at once: a mix |
| ``recovery_s`` (per fault) | 0-150 s | effects outlive the window: memory is freed lazily, queues drain, pods restart |
| ``noise_scale`` (per day) | 0.6-6.0 x | clusters differ in background variance; our baseline noise is one guess (the real tuning day's pod_cpu_usage MAD/median is 0.18, about 4x ours at 1.0; was 0.6-2.2) |
| ``diurnal_amplitude`` (per day) | 0.1-0.6 | load curves from flat test loads to strong day/night cycles |
| ``trace_rate`` (per day) | 0.3-4.0 x | trace sampling rates differ between deployments and releases; the APM counts every request whatever the rate (since round 25: before, it was the sampled calls scaled up, and per-pod request counts carried the sample's noise, MAD/median 0.19-1.0 against the real day's 0.06; see docs/generalisation.md) |
| ``latency_jitter`` (per day) | 0.15-0.6 (sigma) | a pod's latency wobbles from minute to minute (load, garbage collection, CPU throttling, neighbours): each pod's own time in each minute is scaled by a log-normal factor of this sigma. The real tuning day's pod rrt MAD/median is 0.12; once the APM counted every request, averages over hundreds of calls a minute left ours at 0.01-0.07 without it; a call's time mixes several pods' factors, so sigma 0.3 (the fixed world's) gives about 0.11 |
| ``log_rate`` (per day) | 0.3-1.5 x | log levels and sampling differ (info lines dropped or kept) |
| ``blips_per_hour`` (per day) | 0-5 | background anomaly rate: benign deploys, GC, cron jobs |
| ``confounder`` (per fault) | 0.4-2.0 x | an unrelated anomaly near the case may be weaker or stronger than the fault itself |
| ``wording`` (per day) | one of the variants in ``logs.WORDINGS`` | runtimes and library versions phrase the same error differently |
| ``silence`` (per fault) | stop / zero / gaps | a dead pod's series may stop, drop to zero, or lose rows at random |
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np

from simulate.schedule import Fault

Silence = Literal["stop", "zero", "gaps"]


@dataclass(frozen=True)
class DayWorld:
    """Per-day draws: how noisy, how loaded and how sampled the telemetry is."""

    noise_scale: float = 1.0
    diurnal_amplitude: float = 0.35
    trace_rate: float = 1.0
    log_rate: float = 1.0
    blips_per_hour: int = 2
    wording: int = 0
    latency_jitter: float = 0.3


FIXED_DAY = DayWorld()


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))


def draw_day(rng: np.random.Generator, *, wordings: int) -> DayWorld:
    return DayWorld(
        noise_scale=_log_uniform(rng, 0.6, 6.0),
        diurnal_amplitude=float(rng.uniform(0.1, 0.6)),
        trace_rate=_log_uniform(rng, 0.3, 4.0),
        log_rate=_log_uniform(rng, 0.3, 1.5),
        blips_per_hour=int(rng.integers(0, 6)),
        wording=int(rng.integers(0, wordings)),
        latency_jitter=_log_uniform(rng, 0.15, 0.6),
    )


def randomize_fault(fault: Fault, rng: np.random.Generator) -> Fault:
    """The fault with its own effect size, onset lag, ramp, recovery and silence style."""
    silence: Silence = ("stop", "zero", "gaps")[int(rng.integers(3))]
    return dataclasses.replace(
        fault,
        effect=_log_uniform(rng, 0.35, 4.0),
        lag_s=float(rng.uniform(0, 90)),
        ramp_s=float(rng.choice([0.0, float(rng.uniform(30, 180))])),
        recovery_s=float(rng.uniform(0, 150)),
        silence=silence,
    )


def randomize_confounder(blip: Fault, rng: np.random.Generator) -> Fault:
    return dataclasses.replace(blip, effect=_log_uniform(rng, 0.4, 2.0))
