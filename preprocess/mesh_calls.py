"""The call graph a service mesh measured: Istio's ``istio_requests_total`` in a Prometheus.

    rca system infer --data-dir D --out system.toml --mesh-calls http://prometheus:9090 [--mesh-since 1d]

Every call between two workloads of an Istio mesh is counted by the caller's sidecar
(``reporter="source"``) with ``source_workload`` and ``destination_workload``. One instant query,
``sum by (source_workload, destination_workload) (increase(...[SINCE]))`` evaluated at the
dataset's newest time (so a dataset of past days finds its own calls), gives each pair's count;
the pairs with a positive count whose two ends are both named (Istio writes ``unknown`` for a
caller outside the mesh) are the calls. ``preprocess.infer_system.with_mesh_calls`` adds them to
a draft. The HTTP side (timeout, headers, retries, errors naming URL, status and the server's
text) is ``preprocess.formats.pull_http.PullClient``'s, and the answer's envelope (status, a
vector) is checked as every pull's (``preprocess.formats.pull.checked_answer``).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx

from preprocess.formats.pull import checked_answer
from preprocess.formats.pull_http import PullClient, PullError, redacted
from rca.timeutil import format_utc

log = logging.getLogger(__name__)

INSTANT_QUERY = "/api/v1/query"
UNKNOWN_WORKLOAD = "unknown"  # Istio's name for a peer outside the mesh (or one it could not name)


@dataclass(frozen=True)
class MeshCalls:
    """What the mesh counted: the query as sent, where and when, and (caller, callee, calls), most calls first."""

    url: str
    query: str
    at: datetime
    calls: list[tuple[str, str, float]] = field(default_factory=list)


def mesh_query(*, since: timedelta) -> str:
    """The PromQL counting each (caller, callee) workload pair's calls over the last ``since``."""
    seconds = max(1, round(since.total_seconds()))
    return ("sum by (source_workload, destination_workload) "
            f'(increase(istio_requests_total{{reporter="source"}}[{seconds}s]))')


def fetch_mesh_calls(url: str, *, since: timedelta, at: datetime, headers: Mapping[str, str] | None = None,
                     timeout_s: float = 30.0, transport: httpx.BaseTransport | None = None) -> MeshCalls:
    """The mesh's calls at ``url`` over ``since`` before ``at``; ``PullError`` for no or a malformed answer."""
    query = mesh_query(since=since)
    with PullClient(url, option="--mesh-calls", timeout_s=timeout_s, headers=headers, transport=transport) as client:
        where = redacted(client.url(INSTANT_QUERY))
        answer = checked_answer(client.get_json(INSTANT_QUERY, params={"query": query, "time": f"{at.timestamp():.3f}"}),
                                client=client, path=INSTANT_QUERY, result_types=("vector",))
    calls = _calls(answer["data"]["result"], where=where)
    log.info("%s: %d call(s) between mesh workloads over %s before %s", where, len(calls), since, format_utc(at))
    return MeshCalls(url=redacted(url), query=query, at=at, calls=calls)


def _calls(samples: list[Any], *, where: str) -> list[tuple[str, str, float]]:
    """(caller, callee, count) of an instant-query vector's samples, most first; ``PullError`` for a malformed one."""
    counts: dict[tuple[str, str], float] = {}
    for sample in samples:
        metric = sample.get("metric") if isinstance(sample, dict) else None
        value = sample.get("value") if isinstance(sample, dict) else None
        if not isinstance(metric, dict) or not isinstance(value, list) or len(value) != 2:
            raise PullError(f"GET {where}: a sample without its labels or [time, value]: {str(sample)[:300]}")
        try:
            count = float(value[1])
        except (TypeError, ValueError):
            raise PullError(f"GET {where}: a sample's value is no number: {str(sample)[:300]}") from None
        caller = str(metric.get("source_workload") or UNKNOWN_WORKLOAD)
        callee = str(metric.get("destination_workload") or UNKNOWN_WORKLOAD)
        if not math.isfinite(count) or count <= 0 or caller == callee or UNKNOWN_WORKLOAD in (caller, callee):
            continue
        counts[(caller, callee)] = counts.get((caller, callee), 0.0) + count
    return [(caller, callee, count)
            for (caller, callee), count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
