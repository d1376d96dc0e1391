"""Rebuild this slice of Nezha (github.com/IntelligentDDS/Nezha, MIT) from a git snapshot of it.

    python tests/data/nezha_slice/make_slice.py /path/to/Nezha.git [out_dir]

Deterministic: the same snapshot gives the same bytes. What is kept is listed in README.md;
field values are copied verbatim (re-quoted by Python's csv module), only whole rows are dropped.
"""
from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

COMMIT = "d8140101fdb4e7dfb60d3ef9f64706f382b68470"
HERE = Path(__file__).resolve().parent

# (day, injections kept (inject_time), metric pods, first and last metric minute kept,
#  trace files, log files)
SLICES = [
    {
        "day": "2022-08-22",
        "faults": ["2022-08-22 05:09:50", "2022-08-22 05:18:09", "2022-08-22 05:27:06"],
        "pods": ["adservice-5f6585d649-fnmft", "checkoutservice-578fcf4766-9csqn", "currencyservice-cf787dd48-vpjrd",
                 "frontend-579b9bff58-t2dbm"],
        "minutes": ("2022-08-22 04:59", "2022-08-22 05:58"),
        "extra_metric": ["dependency.csv"],
        "edge_metric": ["source_50.csv", "destination_50.csv"],
        "traces": {"05_19": ("adservice", "currencyservice", "checkoutservice"), "05_20": ()},
        "logs": ["05_19"],
    },
    {
        "day": "2023-01-29",
        "faults": ["2023-01-29 09:21:39", "2023-01-29 09:25:39"],
        "pods": ["ts-basic-service-5dc8d4f9fd-46997", "ts-gateway-service-6f6cfc45b-h5m2n",
                 "ts-travel-service-64469b5b48-25zj6", "ts-travel2-service-5c66d57d58-6mp2b"],
        "minutes": ("2023-01-29 09:00", "2023-01-29 09:59"),
        "extra_metric": [],
        "edge_metric": [],
        "traces": {"09_22": ("ts-basic-service", "ts-travel2-service")},
        "logs": ["09_21"],
        "construct": "08_50",
    },
]
CONSTRUCT_TRACE_ROWS = 100  # the fault-free minute (construct_data/<day>): whole traces up to about this many
CONSTRUCT_LOG_ROWS_PER_POD = 3
TRACE_ROWS = 300  # whole traces are kept until about this many rows
BORDER_ROWS = 60  # rows of the next minute file repeating spans of the previous one
LOG_ROWS_PER_POD = 12
ZERO_TIME_ROWS = 3  # TrainTicket's lines whose TimeUnixNano is Go's zero time (README: habits)
GO_ZERO_TIME = "-6795364578871345152"  # Go's time.Time{}.UnixNano(): the source's lines without a time


def _git(git_dir: Path, *args: str) -> bytes:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, check=True).stdout


def _rows(raw: bytes) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(io.StringIO(raw.decode("utf-8"))))
    return rows[0], rows[1:]


def _write(path: Path, header: list[str], rows: list[list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    path.write_text(buffer.getvalue(), encoding="utf-8")


def _traces(header: list[str], rows: list[list[str]], *, must: tuple[str, ...]) -> list[list[str]]:
    """Whole traces (every span of a kept trace): one holding each service in ``must``, then the first ones."""
    trace_at, pod_at = header.index("TraceID"), header.index("PodName")
    by_trace: dict[str, list[list[str]]] = {}
    for row in rows:
        by_trace.setdefault(row[trace_at], []).append(row)
    chosen: list[str] = []
    for service in must:
        holding = [t for t, spans in by_trace.items() if any(r[pod_at].startswith(service + "-") for r in spans)]
        smallest = min(holding, key=lambda t: (len(by_trace[t]), t))
        if smallest not in chosen:
            chosen.append(smallest)
    for trace in by_trace:
        if sum(len(by_trace[t]) for t in chosen) >= TRACE_ROWS:
            break
        if trace not in chosen and len(by_trace[trace]) <= 40:
            chosen.append(trace)
    keep = set(chosen)
    return [row for row in rows if row[trace_at] in keep]


def build(git_dir: Path, out: Path) -> None:
    (out / "LICENSE").write_bytes(_git(git_dir, "show", f"{COMMIT}:LICENSE"))
    for spec in SLICES:
        day = spec["day"]
        base = f"rca_data/{day}"
        grouped = json.loads(_git(git_dir, "show", f"{COMMIT}:{base}/{day}-fault_list.json"))
        kept = {hour: [e for e in entries if e["inject_time"] in spec["faults"]] for hour, entries in grouped.items()}
        kept = {hour: entries for hour, entries in kept.items() if entries}
        target = out / base / f"{day}-fault_list.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(kept, indent=4), encoding="utf-8")

        first, last = spec["minutes"]
        for pod in spec["pods"]:
            header, rows = _rows(_git(git_dir, "show", f"{COMMIT}:{base}/metric/{pod}_metric.csv"))
            _write(out / base / "metric" / f"{pod}_metric.csv", header,
                   [r for r in rows if first <= r[0][:16] <= last])
        for name in spec["extra_metric"]:
            (out / base / "metric" / name).write_bytes(_git(git_dir, "show", f"{COMMIT}:{base}/metric/{name}"))
        for name in spec["edge_metric"]:  # every pair's column, the same minutes as the pods
            header, rows = _rows(_git(git_dir, "show", f"{COMMIT}:{base}/metric/{name}"))
            _write(out / base / "metric" / name, header, [r for r in rows if first <= r[0][:16] <= last])

        files = {minute: _rows(_git(git_dir, "show", f"{COMMIT}:{base}/trace/{minute}_trace.csv"))
                 for minute in spec["traces"]}
        kept_traces: dict[str, list[list[str]]] = {}
        previous: list[list[str]] = []
        last_minute = ""
        for minute, must in spec["traces"].items():
            header, rows = files[minute]
            if previous:
                # The next minute file repeats spans of the previous one (identical rows): keep a few
                # whole traces the two files share, in both, then a few traces of its own.
                seen = {(r[0], r[1]) for r in previous}
                shared: list[str] = []
                for row in rows:
                    if (row[0], row[1]) in seen and row[0] not in shared:
                        shared.append(row[0])
                    if sum(1 for r in rows if r[0] in shared) >= BORDER_ROWS:
                        break
                border = [r for r in rows if r[0] in set(shared)]
                before = kept_traces[last_minute]
                kept_traces[last_minute] = before + [r for r in previous if r[0] in set(shared) and r not in before]
                # (last_minute: the previous file's name, set at the end of the previous turn)
                own = _traces(header, [r for r in rows if (r[0], r[1]) not in seen], must=must)[:TRACE_ROWS // 2]
                kept_traces[minute] = border + [r for r in own if r not in border]
            else:
                kept_traces[minute] = _traces(header, rows, must=must)
            previous, last_minute = rows, minute
        for minute, kept_rows in kept_traces.items():
            _write(out / base / "trace" / f"{minute}_trace.csv", files[minute][0], kept_rows)

        for minute in spec["logs"]:
            header, rows = _rows(_git(git_dir, "show", f"{COMMIT}:{base}/log/{minute}_log.csv"))
            pod_at, time_at = header.index("PodName"), header.index("TimeUnixNano")
            per_pod: dict[str, int] = {}
            kept_rows = []
            zero_times = 0
            for row in rows:
                zero_time = row[time_at] == GO_ZERO_TIME and zero_times < ZERO_TIME_ROWS
                zero_times += zero_time
                if zero_time or per_pod.get(row[pod_at], 0) < LOG_ROWS_PER_POD:
                    kept_rows.append(row)
                    per_pod[row[pod_at]] = per_pod.get(row[pod_at], 0) + 1
            _write(out / base / "log" / f"{minute}_log.csv", header, kept_rows)

        if "construct" in spec:  # the day's fault-free minute, as the source keeps it apart
            minute, construct = spec["construct"], f"construct_data/{day}"
            header, rows = _rows(_git(git_dir, "show", f"{COMMIT}:{construct}/trace/{minute}_trace.csv"))
            trace_at = header.index("TraceID")
            traces: list[str] = []
            for row in rows:
                if row[trace_at] not in traces and sum(1 for r in rows if r[trace_at] in traces) < CONSTRUCT_TRACE_ROWS:
                    traces.append(row[trace_at])
            _write(out / construct / "trace" / f"{minute}_trace.csv", header,
                   [r for r in rows if r[trace_at] in set(traces)])
            header, rows = _rows(_git(git_dir, "show", f"{COMMIT}:{construct}/log/{minute}_log.csv"))
            pod_at = header.index("PodName")
            counts: dict[str, int] = {}
            kept_rows = []
            for row in rows:
                if counts.get(row[pod_at], 0) < CONSTRUCT_LOG_ROWS_PER_POD:
                    kept_rows.append(row)
                    counts[row[pod_at]] = counts.get(row[pod_at], 0) + 1
            _write(out / construct / "log" / f"{minute}_log.csv", header, kept_rows)


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else HERE)
