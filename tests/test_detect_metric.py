"""Metric detector on synthetic series with known truth."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from preprocess.detect_metric import SERIES_SCHEMA, MetricParams, metric_series, score_metric_window
from preprocess.schema import APM_SCHEMA, INFRA_SCHEMA
from rca.system import bundled_system, spec_from_toml

SYSTEM = bundled_system()

T0 = datetime(2025, 6, 5, 16, 0, tzinfo=UTC)
WINDOW_START, WINDOW_END = T0 + timedelta(minutes=35), T0 + timedelta(minutes=50)
BASELINE_START = T0 + timedelta(minutes=5)


def _series(values: list[float | None], *, component: str = "emailservice-1", kpi: str = "pod_cpu_usage") -> pl.DataFrame:
    rows = [(T0 + timedelta(minutes=i), component, "infra_pod", kpi, v) for i, v in enumerate(values) if v is not None]
    return pl.DataFrame(rows, schema=SERIES_SCHEMA, orient="row")


def _noise(seed: int, level: float = 10.0) -> np.ndarray:
    return level + np.random.default_rng(seed).normal(0, 0.05 * level, 60)


def _step(factor: float):
    def shape(v: np.ndarray) -> list[float]:
        v = v.copy()
        v[35:51] *= factor
        return list(v)
    return shape


def _spike(v: np.ndarray) -> list[float]:
    v = v.copy()
    v[38:40] = 5 * v[38:40]
    return list(v)


def _silence(v: np.ndarray) -> list[float | None]:
    return [x if i < 35 else None for i, x in enumerate(v)]


def _zeros(v: np.ndarray) -> list[float]:
    return [x if i < 35 else 0.0 for i, x in enumerate(v)]


@pytest.mark.parametrize(("shape", "direction"), [
    (_step(4.0), "up"), (_step(0.25), "down"), (_spike, "up"), (_silence, "silent"), (_zeros, "silent"),
])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_detects_injected_change(shape, direction, seed):
    events = score_metric_window(_series(shape(_noise(seed))), system=SYSTEM, start=WINDOW_START, end=WINDOW_END,
                                 baseline_start=BASELINE_START)
    assert events.height == 1
    event = events.row(0, named=True)
    assert event["direction"] == direction
    assert event["component"] == "emailservice-1" and event["kpi"] == "pod_cpu_usage"
    assert event["z"] >= 4
    # Onset within two minutes of the injected change.
    onset_delta = abs((event["onset"] - (T0 + timedelta(minutes=35 if shape is not _spike else 38))).total_seconds())
    assert onset_delta <= 180


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_onset_is_near_the_window_by_the_clock_when_the_baseline_skips_an_incident(seed):
    """The baseline's last kept minutes (17-19, a bump) sit right before the window in the array but
    16 minutes before it by the clock: another incident's minutes (20-34) are left out. A change
    there is not this window's onset."""
    values = _noise(seed)
    values[17:20] *= 3
    values[35:51] *= 4
    events = score_metric_window(_series(list(values)), system=SYSTEM, start=WINDOW_START, end=WINDOW_END,
                                 baseline_start=BASELINE_START,
                                 exclude=[(T0 + timedelta(minutes=20), T0 + timedelta(minutes=34, seconds=59))])
    assert events.height == 1 and events.item(0, "direction") == "up"
    assert abs((events.item(0, "onset") - WINDOW_START).total_seconds()) <= 180


@pytest.mark.parametrize("seed", range(10))
def test_noise_only_gives_no_event(seed):
    events = score_metric_window(_series(list(_noise(seed))), system=SYSTEM, start=WINDOW_START, end=WINDOW_END,
                                 baseline_start=BASELINE_START)
    assert events.height == 0


def test_zero_baseline_counter_rising_is_an_event_but_single_blip_is_not():
    errors = [0.0] * 60
    for i in range(36, 50):
        errors[i] = 12.0
    assert score_metric_window(_series(errors, kpi="error"), system=SYSTEM, start=WINDOW_START, end=WINDOW_END,
                               baseline_start=BASELINE_START).height == 1
    blip = [0.0] * 60
    blip[40] = 1.0
    assert score_metric_window(_series(blip, kpi="error"), system=SYSTEM, start=WINDOW_START, end=WINDOW_END,
                               baseline_start=BASELINE_START).height == 0


def test_metric_series_from_canonical_frames():
    apm = pl.DataFrame({
        "time": [T0, T0 + timedelta(minutes=1)], "object_type": ["pod", "pod"], "object_id": ["frontend-0"] * 2,
        **{k: [1.0, 2.0] for k in APM_SCHEMA if k not in ("time", "object_type", "object_id")},
    }, schema=APM_SCHEMA)
    infra = pl.DataFrame({
        "time": [T0, T0], "family": ["infra_node"] * 2, "kpi_key": ["node_disk_read_bytes_total"] * 2,
        "component": ["aiops-k8s-01"] * 2, "node": ["aiops-k8s-01"] * 2, "instance": [None, None],
        "device": ["sda", "sdb"], "mountpoint": [None, None], "namespace": [None, None],
        "type": [None, None], "sql_type": [None, None], "value": [5.0, 9.0],
    }, schema=INFRA_SCHEMA)
    series = metric_series(apm=apm, infra=infra)
    node = series.filter(pl.col("component") == "aiops-k8s-01")
    assert node.height == 1 and node.item(0, "value") == 9.0  # devices collapse to the worst one
    rrt = series.filter((pl.col("component") == "frontend-0") & (pl.col("kpi") == "rrt"))
    assert rrt.get_column("value").to_list() == [1.0, 2.0]
    assert set(series.get_column("kind").unique()) == {"apm_pod", "infra_node"}


def test_metric_series_does_not_depend_on_the_row_order():
    """The nightly job hands the rows over in file order (unsorted): the same bytes as sorted rows,
    a negative zero beside a zero in one minute included (their maximum depends on the order)."""
    seconds = [40, 10, 15, 50, 20, 70]  # distinct: rows of one time keep their file order
    infra = pl.DataFrame({
        "time": [T0 + timedelta(seconds=s) for s in seconds], "family": ["infra_node"] * 6,
        "kpi_key": ["node_disk_read_bytes_total"] * 6, "component": ["aiops-k8s-01"] * 6,
        "node": ["aiops-k8s-01"] * 6, "instance": [None] * 6, "device": ["sda", "sdb", "sdc", "sda", "sdd", "sda"],
        "mountpoint": [None] * 6, "namespace": [None] * 6, "type": [None] * 6, "sql_type": [None] * 6,
        "value": [0.0, -0.0, 0.0, -0.0, 0.0, 3.0],
    }, schema=INFRA_SCHEMA)
    ordered = metric_series(apm=None, infra=infra.sort("family", "kpi_key", "component", "time", maintain_order=True))
    for seed in range(4):
        shuffled = infra.sample(fraction=1.0, shuffle=True, seed=seed)
        unordered = metric_series(apm=None, infra=shuffled)
        assert unordered.equals(ordered)
        assert (np.signbit(unordered.get_column("value").to_numpy()) == np.signbit(ordered.get_column("value").to_numpy())).all()


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_metric_series_is_the_maximum_per_minute_of_each_series(seed):
    """The coded keys and numpy's reduction give polars' own group-by: keys in runs and interleaved,
    null keys and times before 1970 (polars' way), APM and infra rows, static KPIs and non-finite
    values dropped."""
    rng = np.random.default_rng(seed)

    def pick(pool: list, n: int, null_share: float = 0.0) -> list:
        return [None if rng.random() < null_share else pool[i] for i in rng.integers(len(pool), size=n)]

    n = 60
    times = [T0 + timedelta(seconds=int(s)) for s in rng.integers(0, 600, size=n)]
    if seed == 2:
        times[3] = None  # a null time: polars' group-by
    if seed == 3:
        times[3] = datetime(1969, 12, 31, 23, 59, 30, tzinfo=UTC)  # before 1970: polars' group-by
    values = rng.choice([1.0, 2.5, -3.0, 7.0, np.nan, np.inf], size=n).tolist()
    apm = pl.DataFrame({
        "time": times, "object_type": pick(["pod", "service"], n, null_share=0.1),
        "object_id": pick(["cart-0", "cart", "ad-1"], n, null_share=0.1),
        **{k: rng.choice([1.0, 4.0, np.nan], size=n).tolist() for k in APM_SCHEMA if k not in ("time", "object_type", "object_id")},
    }, schema=APM_SCHEMA)
    infra = pl.DataFrame({
        "time": sorted(times, key=lambda t: (t is not None, t)), "family": pick(["infra_pod", "infra_node"], n),
        "kpi_key": ["pod_cpu_usage"] * 20 + pick(["uptime", "node_load1", "rrt"], n - 20, null_share=0.1),
        "component": ["cart-0"] * 30 + pick(["cart-0", "k8s-01", "ad-1"], n - 30, null_share=0.1),
        "node": [None] * n, "instance": [None] * n, "device": [None] * n, "mountpoint": [None] * n,
        "namespace": [None] * n, "type": [None] * n, "sql_type": [None] * n, "value": values,
    }, schema=INFRA_SCHEMA)
    kpis = [k for k in APM_SCHEMA if k not in ("time", "object_type", "object_id")]
    expected = (
        pl.concat([
            apm.unpivot(index=["time", "object_type", "object_id"], on=kpis, variable_name="kpi").select(
                "time", pl.col("object_id").alias("component"), ("apm_" + pl.col("object_type")).alias("kind"), "kpi",
                "value"),
            infra.filter(pl.col("component").is_not_null()).select(
                "time", "component", pl.col("family").alias("kind"), pl.col("kpi_key").alias("kpi"), "value"),
        ])
        .filter((pl.col("kpi") != "uptime") & pl.col("value").is_finite())
        .group_by(pl.col("time").dt.truncate("1m"), "component", "kind", "kpi").agg(pl.col("value").max())
        .sort("component", "kind", "kpi", "time").cast(pl.Schema(SERIES_SCHEMA))
    )
    assert metric_series(apm=apm, infra=infra).equals(expected)


BRIEF_START = T0 + timedelta(minutes=35, seconds=55)  # a pod kill's one-second window, scored over 3 minutes
BRIEF_END = BRIEF_START + timedelta(minutes=3)


@pytest.mark.parametrize("seed", [1, 2])
def test_brief_window_reads_a_restart_gap_as_silence(seed):
    values: list[float | None] = list(_noise(seed))
    values[36] = values[37] = None  # the pod restarts: two scrapes missing, then back to normal
    events = score_metric_window(_series(values), system=SYSTEM, start=BRIEF_START, end=BRIEF_END, baseline_start=BASELINE_START)
    assert events.height == 1 and events.row(0, named=True)["direction"] == "silent"


@pytest.mark.parametrize("seed", [1, 2])
def test_brief_window_without_a_gap_or_past_the_data_is_quiet(seed):
    values: list[float | None] = list(_noise(seed))
    cut = [v if i <= 36 else None for i, v in enumerate(values)]  # the data stops: not yet there, not a gap
    sparse = [float(v) for v in np.random.default_rng(seed).choice([132.0, 264.0, 396.0, 528.0], 60)]
    sparse[37] = 0.0  # a sparse count hits zero by chance
    for series in (_series(values), _series(cut), _series(sparse, kpi="request")):
        events = score_metric_window(series, system=SYSTEM, start=BRIEF_START, end=BRIEF_END, baseline_start=BASELINE_START)
        assert events.height == 0, events


def _recording_starts_with_the_incident(seed: int) -> tuple[pl.DataFrame, list[tuple[datetime, datetime]]]:
    """Nezha's habit: recording starts a minute before an incident (minutes 1-3, CPU 3x), whose
    effect outlasts its declared end by four minutes; another incident (CPU 4x) follows at
    minutes 12-16, then the pod is quiet until minute 30."""
    values = _noise(seed, level=25.0)[:31].copy()
    values[1:8] *= 3.0  # the window (1-3) and its tail (4-7)
    values[12:17] *= 4.0  # the next incident
    return _series(list(values)), [(T0 + timedelta(minutes=12), T0 + timedelta(minutes=21))]


@pytest.mark.parametrize("seed", range(3))
def test_the_minutes_after_skip_the_fault_tail_and_the_next_incident(seed):
    series, later = _recording_starts_with_the_incident(seed)
    window = {"start": T0 + timedelta(minutes=1), "end": T0 + timedelta(minutes=3), "baseline_start": T0}
    events = score_metric_window(series, system=SYSTEM, **window, exclude=later)
    assert events.height == 1 and events.item(0, "reference") == "after"
    assert events.item(0, "direction") == "up" and events.item(0, "baseline") == pytest.approx(25.0, rel=0.1)
    # Read with the tail and the next incident in it, the same window is a weaker event, if any.
    blind = score_metric_window(series, system=SYSTEM, **window, params=MetricParams(after_skip_minutes=0))
    assert blind.height == 0 or blind.item(0, "z") < events.item(0, "z")


def _utilisation(seed: int, *, window: list[float]) -> list[float]:
    """A noisy utilisation (35-85 %, median about 60) whose window minutes are ``window``."""
    values = list(np.random.default_rng(seed).uniform(35.0, 85.0, 35))
    return values + window


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_a_window_pinned_at_a_ceiling_is_an_event_though_its_rise_is_small(seed):
    # A stressed pod's CPU throttled at its quota: it climbs for a minute, then holds at 101 %,
    # only ~3 noise units above its median (z below min_z), but real load never holds that still.
    pinned = [78.0, 101.05, 101.34, 101.43]
    start, end = T0 + timedelta(minutes=35), T0 + timedelta(minutes=38)
    events = score_metric_window(_series(_utilisation(seed, window=pinned)), system=SYSTEM, start=start, end=end,
                                 baseline_start=BASELINE_START)
    assert events.height == 1
    event = events.row(0, named=True)
    assert event["direction"] == "up" and event["z"] >= MetricParams().min_z
    assert event["window_value"] == pytest.approx(101.34)  # the level it is held at
    off = score_metric_window(_series(_utilisation(seed, window=pinned)), system=SYSTEM, start=start, end=end,
                              baseline_start=BASELINE_START, params=MetricParams(ceiling_spread=0.0))
    assert off.height == 0


@pytest.mark.parametrize(("window", "why"), [
    ([40.0, 56.0, 90.0, 90.0], "two equal minutes of a count are a coincidence"),
    ([80.0, 95.0, 88.0, 91.0], "high but moving: ordinary load"),
    ([70.0, 75.0, 75.2, 75.1], "held, but not above the baseline"),
])
def test_no_ceiling_without_a_still_window_above_every_baseline_minute(window, why):
    events = score_metric_window(_series(_utilisation(1, window=window)), system=SYSTEM, start=T0 + timedelta(minutes=35),
                                 end=T0 + timedelta(minutes=38), baseline_start=BASELINE_START)
    assert events.filter(pl.col("direction") == "up").height == 0, why


@pytest.mark.parametrize(("baseline", "window", "why"), [
    ([0.0] * 35, [1.0, 1.0, 1.0, 1.0], "one error a minute after none: the from-zero rule's, not a ceiling"),
    ([2.0, 3.0] * 17 + [2.0], [4.0, 4.0, 4.0, 4.0], "a count repeats a whole number by nature"),
])
def test_no_ceiling_for_counts(baseline, window, why):
    events = score_metric_window(_series(baseline + window, kpi="error"), system=SYSTEM, start=T0 + timedelta(minutes=35),
                                 end=T0 + timedelta(minutes=38), baseline_start=BASELINE_START)
    assert events.filter(pl.col("z") == MetricParams().min_z).height == 0, why


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("window_seconds", [0, 55])
def test_an_earlier_incident_running_into_the_window_takes_none_of_its_minutes(seed, window_seconds):
    """Incidents seven minutes apart: the earlier one's span (window and recovery tail) reaches past
    this window's start and is clipped there. The window's first minute is the window's own, so a
    steady series has no gap in the window and does not "go silent" (a brief window, 3 minutes,
    where one missing minute reads as a dip to zero)."""
    start = WINDOW_START + timedelta(seconds=window_seconds)
    end = start + timedelta(minutes=3)
    earlier = (start - timedelta(minutes=7), start + timedelta(minutes=1))
    events = score_metric_window(_series(list(_noise(seed))), system=SYSTEM, start=start, end=end,
                                 baseline_start=BASELINE_START, exclude=[earlier])
    assert events.height == 0, events.to_dicts()


def _sparse_count(seed: int) -> list[float]:
    """A small count whose every fourth minute is empty (a pod that serves a request or two a minute)."""
    rng = np.random.default_rng(seed)
    return [0.0 if i % 4 == 0 else 5.0 + rng.normal(0, 0.2) for i in range(60)]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(("alpha", "silent"), [(0.0, True), (MetricParams().silence_habit_alpha, False)])
def test_a_sparse_counts_empty_minute_is_no_silence_against_a_scattered_baseline(seed, alpha, silent):
    """A crowded day: other incidents leave six baseline minutes, none of them empty by chance, and
    the window (three minutes, brief) holds one of the count's usual empty minutes. Against the
    baseline alone it is a dip to zero; the series' own recorded minutes (a quarter of them empty)
    say it is the series' habit."""
    start, end = WINDOW_START, WINDOW_START + timedelta(minutes=3)
    others = [(T0 + timedelta(minutes=8), T0 + timedelta(minutes=9)), (T0 + timedelta(minutes=12), start)]
    events = score_metric_window(_series(_sparse_count(seed)), system=SYSTEM, start=start, end=end, baseline_start=BASELINE_START,
                                 exclude=others, params=MetricParams(silence_habit_alpha=alpha))
    assert (events.filter(pl.col("direction") == "silent").height == 1) is silent, events.to_dicts()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_silence_the_series_rarely_had_stands(seed):
    """One empty minute long before the window (a blip) does not make a whole silent window a habit."""
    values = _zeros(_noise(seed))
    values[2] = 0.0
    events = score_metric_window(_series(values), system=SYSTEM, start=WINDOW_START, end=WINDOW_END, baseline_start=BASELINE_START)
    assert events.row(0, named=True)["direction"] == "silent"


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("unrecorded", [range(0, 27), range(0, 29), range(6, 28)],
                         ids=["recording-begins", "recording-begins-later", "gap-between-files"])
def test_minutes_nothing_was_recorded_in_are_not_a_sparse_series(seed, unrecorded):
    """Nezha's day files start at 03:51 while the baseline reaches back to 03:27: the few minutes
    recorded before the window are every minute there was, so the series is dense and its fall to
    zero for three minutes is a silence. Counted from the baseline's start, 6 or 8 of 30 minutes
    looked like an idle pod's count and the silence went unseen. A gap between two files, in which
    no series has a row, is the same."""
    counts = 16.0 + np.random.default_rng(seed).normal(0, 3.0, 40)
    values: list[float | None] = [None if i in unrecorded else float(v) for i, v in enumerate(counts)]
    values[36:39] = [0.0, 0.0, 0.0]
    start, end = T0 + timedelta(minutes=35, seconds=50), T0 + timedelta(minutes=38, seconds=50)
    events = score_metric_window(_series(values, kpi="request"), system=SYSTEM, start=start, end=end, baseline_start=BASELINE_START)
    assert events.height == 1 and events.item(0, "direction") == "silent", events.to_dicts()
    assert events.item(0, "baseline") == pytest.approx(16.0, abs=3.0)


# A system whose pods are named <service>_<replica>, not as Kubernetes names a Deployment's pods.
UNDERSCORE_PODS = spec_from_toml({"services": {"app": ["cart"]}, "pods": {"patterns": ["^(?P<service>[a-z]+)_\\d+$"]}},
                                 source="test")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_pod_without_history_is_judged_against_its_services_pods_as_the_system_names_them(seed):
    # Recording starts with the window: no minute before or after it, no earlier day. Of three
    # replicas of cart, cart_0 runs at four times its peers' CPU; which pods are peers is the
    # system's naming rule, not the default one (under which cart_0 is a service of its own).
    def replica(pod: str, level: float) -> pl.DataFrame:
        values = [None] * 35 + list(_noise(seed, level=level)[35:51])
        return _series(values, component=pod)
    series = pl.concat([replica("cart_0", 40.0), replica("cart_1", 10.0), replica("cart_2", 10.0)])
    window = {"start": WINDOW_START, "end": WINDOW_END, "baseline_start": BASELINE_START}
    events = score_metric_window(series, system=UNDERSCORE_PODS, **window)
    assert events.select("component", "direction", "reference").rows() == [("cart_0", "up", "peers")]
    assert score_metric_window(series, system=SYSTEM, **window).height == 0
