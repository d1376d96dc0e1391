"""A fault on every call between two services that stands out on one callee pod only (synthetic, known truth).

The network between frontend and cartservice degrades: every call from frontend to cartservice
is slower, but under per-pod noise only cartservice-1's calls stand out clearly, so the pod
outranks its service by far. Two unrelated pods burn CPU at the same time (a busy day). The
truth is a service of the pair (the ground truth of a network fault names the services); it
must be among the first three, which it is only when the service follows its pod.
"""
from __future__ import annotations

import polars as pl
import pytest

from index.params import IndexParams, RankWeights
from index.query import query_window
from tests.test_index_query import FAULT_END, FAULT_START, build_world
from tests.test_index_weak_classes import FAULT, _at, _scale, _write


def _network_pair(seed: int):
    world = build_world("healthy", seed=seed, caller_pods=3)
    during = _at(FAULT_START, FAULT_END)
    pair = (pl.col("caller") == "frontend") & (pl.col("callee") == "cartservice") & during
    _scale(world, "trace_edges", pair & (pl.col("callee_pod") == "cartservice-1"), "p95_us", 3.0)
    _scale(world, "trace_edges", pair & (pl.col("callee_pod") != "cartservice-1"), "p95_us", 1.05)
    _scale(world, "metric_series", (pl.col("component") == "cartservice-1") & (pl.col("kpi") == "rrt") & during,
           "value", 1.6)
    for pod in ("emailservice-0", "checkoutservice-1"):
        _scale(world, "metric_series", (pl.col("component") == pod) & (pl.col("kpi") == "pod_cpu_usage") & during,
               "value", 6.0)
    return world


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("follows", [True, False])
def test_service_of_a_pair_fault_is_in_the_top_three(tmp_path, seed, follows):
    _write(tmp_path, _network_pair(seed))
    params = IndexParams(rank=RankWeights(service_follows_pod=follows))
    result = query_window(tmp_path, start=FAULT[0], end=FAULT[1], top_k=5, params=params)
    ranking = [(c.component, c.level, c.score) for c in result.candidates]
    top3 = [name for name, _, _ in ranking[:3]]
    if follows:
        assert ranking[0][0] == "cartservice-1", ranking
        assert top3[1] == "cartservice", ranking
    else:  # the ranking before the rule: the pod first, its service pushed out of the top three
        assert "cartservice" not in top3 and "frontend" not in top3, ranking
