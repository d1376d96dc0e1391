"""Filebeat log lines of one hour, derived from the hour's spans plus fault and noise lines.

Wording follows the real error templates (reference error_log_templates.csv): Go services
log JSON (``severity``, ``message``, ``error``, ``http.*``), Node.js pino JSON, Python JSON,
adservice log4j text. Callers name the failing service in their error lines, so a fault
downstream is visible in the logs of every caller up the call graph.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from simulate.effects import GRPC_CODE, ErrorKind
from simulate.requests import CST_OFFSET_S, SpanBatch
from simulate.schedule import Fault
from simulate.topology import DNS_SERVER, SERVICE_PORT, Placement, pod_ip, pods_of, service_ip

GRPC_NAME = {0: "OK", 1: "Canceled", 2: "Unknown", 4: "DeadlineExceeded", 13: "Internal", 14: "Unavailable"}
# What frontend / checkoutservice say when a call to a service fails (Go handlers).
WHAT_FAILED = {
    "cartservice": "could not retrieve cart", "productcatalogservice": "could not retrieve products",
    "currencyservice": "could not retrieve currencies", "recommendationservice": "failed to get product recommendations",
    "shippingservice": "failed to get shipping quote", "checkoutservice": "failed to complete the order",
    "paymentservice": "failed to charge card", "emailservice": "failed to send order confirmation",
    "adservice": "failed to get ads", "frontend": "request failed",
}
# Tolerated calls whose failure the caller drops without a word: checkoutservice's PlaceOrder
# discards EmptyCart's error (`_ = cs.emptyUserCart(...)` in the public OnlineBoutique source).
UNLOGGED_FAILURES = frozenset({"hipstershop.CartService/EmptyCart"})
JVM_RULES = {
    "jvm gc": "adservice--gc (GCHelper.triggerFullGC)",
    "jvm latency": "adservice-getRandomAds-latency (delay 3000ms)",
    "jvm exception": "adservice-getrandomads-exception (Caught ThrowException)",
    "jvm cpu": "adservice--stress (cpu fullload)",
}


@dataclass
class LogRows:
    """Column arrays of one hour's log file (already sorted by time)."""

    timestamp_us: np.ndarray
    namespace: np.ndarray
    pod: np.ndarray
    node: np.ndarray
    message: np.ndarray


def rpc_detail(kind: int, origin: str, *, wording: int = 0) -> str:
    """The ``rpc error: code = ... desc = ...`` text of a failed call to ``origin``.

    ``wording`` > 0 picks how another runtime or library version phrases the same failure
    (``--randomize``): a newer gRPC client, or a service-mesh sidecar answering for it.
    """
    ip = service_ip(origin) if origin else "10.233.0.1"
    port = SERVICE_PORT.get(origin, 8080)
    k = ErrorKind(kind)
    code = GRPC_NAME[GRPC_CODE.get(k, 2)]
    variant = WORDINGS[wording % len(WORDINGS)].get(k) if wording else None
    if variant is not None:
        return f"rpc error: code = {code} desc = {variant.format(ip=ip, port=port, origin=origin, dns=DNS_SERVER)}"
    desc = {
        ErrorKind.REFUSED: f'connection error: desc = "transport: Error while dialing: dial tcp {ip}:{port}: connect: connection refused"',
        ErrorKind.DEADLINE: "context deadline exceeded",
        ErrorKind.UNAVAILABLE: "transport is closing",
        ErrorKind.CANCELED: "context canceled",
        ErrorKind.DNS: f'connection error: desc = "transport: Error while dialing: dial tcp: lookup {origin} on {DNS_SERVER}: server misbehaving"',
        ErrorKind.INJECTED: "",
        ErrorKind.INTERNAL: f"{origin}: runtime error: invalid memory address or nil pointer dereference",
        ErrorKind.REGION: "Error 9005 (HY000): Region is unavailable",
        ErrorKind.PD_TIMEOUT: "Error 9001 (HY000): PD server timeout",
        ErrorKind.TIDB_REFUSED: f"dial tcp {pod_ip('tidb-tidb-0')}:4000: connect: connection refused",
        ErrorKind.IO_TIMEOUT: f'connection error: desc = "transport: Error while dialing: dial tcp {ip}:{port}: i/o timeout"',
    }.get(k, "")
    return f"rpc error: code = {code} desc = {desc}"


# Other phrasings of the same failures (index = the day's ``wording``; 0 is the table above).
WORDINGS: tuple[dict[ErrorKind, str], ...] = (
    {},
    {  # a newer grpc-go client
        ErrorKind.REFUSED: 'last connection error: connection error: desc = "transport: Error while dialing: dial tcp {ip}:{port}: connect: connection refused"',
        ErrorKind.DEADLINE: "context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
        ErrorKind.UNAVAILABLE: "error reading from server: EOF",
        ErrorKind.DNS: 'last connection error: connection error: desc = "transport: Error while dialing: dial tcp: lookup {origin} on {dns}: no such host"',
        ErrorKind.IO_TIMEOUT: 'last connection error: connection error: desc = "transport: Error while dialing: dial tcp {ip}:{port}: connect: connection timed out"',
    },
    {  # an Envoy sidecar answering for the callee
        ErrorKind.REFUSED: "upstream connect error or disconnect/reset before headers. reset reason: connection failure, transport failure reason: delayed connect error: 111",
        ErrorKind.DEADLINE: "upstream request timeout",
        ErrorKind.UNAVAILABLE: "upstream connect error or disconnect/reset before headers. reset reason: connection termination",
        ErrorKind.CANCELED: "stream terminated by RST_STREAM with error code: CANCEL",
        ErrorKind.DNS: "name resolver error: produced zero addresses",
        ErrorKind.IO_TIMEOUT: "upstream connect error or disconnect/reset before headers. reset reason: connection timeout",
    },
)


def _iso_ms(us: np.ndarray) -> np.ndarray:
    text = np.datetime_as_string(us.astype("datetime64[us]").astype("datetime64[ms]"), unit="ms")
    return np.char.add(text.astype(str), "Z")


def _go_json(fields: dict[str, object]) -> str:
    return json.dumps(fields, separators=(",", ":"))


class _Sink:
    """Collects log lines as parallel lists, with the span each line was written in (-1: none)."""

    def __init__(self) -> None:
        self.t: list[np.ndarray] = []
        self.pod: list[np.ndarray] = []
        self.node: list[np.ndarray] = []
        self.msg: list[np.ndarray] = []
        self.span: list[np.ndarray] = []
        self.by_caller: list[np.ndarray] = []

    def add(self, t_us: np.ndarray, pod: np.ndarray, node: np.ndarray, messages: list[str],
            span: np.ndarray | None = None, by_caller: bool = False) -> None:
        """``span``: per line, the index (in the hour's ``SpanBatch``) of the span the line is about;
        ``by_caller``: those are client spans, and the line is written in the caller's own span."""
        if len(messages):
            self.t.append(np.asarray(t_us, dtype=np.int64))
            self.pod.append(np.asarray(pod, dtype=object))
            self.node.append(np.asarray(node, dtype=object))
            self.msg.append(np.array(messages, dtype=object))
            self.span.append(np.full(len(messages), -1, dtype=np.int64) if span is None
                             else np.asarray(span, dtype=np.int64))
            self.by_caller.append(np.full(len(messages), by_caller and span is not None))


def _req_ids(rng: np.random.Generator, n: int) -> list[str]:
    raw = rng.integers(0, 2**63 - 1, size=(n, 2), dtype=np.int64)
    return [f"{a:016x}"[:8] + "-" + f"{a:016x}"[8:12] + "-4" + f"{b:016x}"[:3] + "-a" + f"{b:016x}"[3:6] + "-"
            + f"{b:016x}"[6:16] + "00" for a, b in raw.tolist()]


def build_hour_logs(*, spans: SpanBatch, faults: list[Fault], placement: Placement, hour_start_s: int,
                    info_share: float, verbose_frontend: bool, rng: np.random.Generator,
                    wording: int = 0, trace_context: bool = False) -> LogRows:
    """Log rows of one hour. ``verbose_frontend`` (full scale) adds "request started" and a
    closing line per handled call, as the real services log both ends of a request.
    ``trace_context``: each line a traced service writes for a request states the request's
    trace context (``_with_trace_context``), as Nezha's instrumented services write it; the
    lines of the services that are not traced (adservice, currencyservice, paymentservice) do not.
    """
    sink = _Sink()
    iso = _iso_ms(spans.start_us + spans.dur_us)

    # Frontend access lines, one per request (plus "request started" at full scale).
    root = np.nonzero(spans.http_method != "")[0]
    ids = _req_ids(rng, len(root))
    sessions = _req_ids(rng, len(root))
    took = (spans.dur_us[root] // 1000).tolist()
    paths = [p.replace("{id}", "OLJCESPC7Z") for p in spans.http_path[root].tolist()]
    done = [_go_json({"http.req.id": rid, "http.req.method": m, "http.req.path": p,
                      "http.resp.bytes": 1200 + (int(tk) * 37) % 9000, "http.resp.status": int(st),
                      "http.resp.took_ms": int(tk), "message": "request complete", "session": ses,
                      "severity": "debug", "timestamp": ts})
            for rid, ses, m, p, st, tk, ts in zip(ids, sessions, spans.http_method[root].tolist(), paths,
                                                   spans.http_status[root].tolist(), took, iso[root].tolist())]
    sink.add(spans.start_us[root] + spans.dur_us[root], spans.pod[root], spans.node[root], done, span=root)
    if verbose_frontend:
        started = [_go_json({"http.req.id": rid, "http.req.method": m, "http.req.path": p, "message": "request started",
                             "session": ses, "severity": "debug", "timestamp": ts})
                   for rid, ses, m, p, ts in zip(ids, sessions, spans.http_method[root].tolist(), paths,
                                                 _iso_ms(spans.start_us[root]).tolist())]
        sink.add(spans.start_us[root], spans.pod[root], spans.node[root], started, span=root)
    failed_roots = root[spans.err_kind[root] > 0]
    errs = [_go_json({"error": f"{WHAT_FAILED.get(fc, 'request failed')}: {rpc_detail(k, oc, wording=wording)}", "http.req.id": rid,
                      "http.req.method": m, "http.req.path": p.replace("{id}", "OLJCESPC7Z"),
                      "message": "request error", "severity": "error", "timestamp": ts})
            for rid, fc, k, oc, m, p, ts in zip(_req_ids(rng, len(failed_roots)), spans.fail_callee[failed_roots].tolist(),
                                                spans.origin_kind[failed_roots].tolist(),
                                                spans.origin_callee[failed_roots].tolist(),
                                                spans.http_method[failed_roots].tolist(),
                                                spans.http_path[failed_roots].tolist(), iso[failed_roots].tolist())]
    sink.add(spans.start_us[failed_roots] + spans.dur_us[failed_roots], spans.pod[failed_roots],
             spans.node[failed_roots], errs, span=failed_roots)

    # A tolerated call's failure is a warning of its caller (or nothing), never a failed request.
    shrugged = np.nonzero(spans.tolerated & (spans.err_kind > 0)
                          & ~np.isin(spans.operation, list(UNLOGGED_FAILURES)))[0]
    ads = shrugged[spans.callee[shrugged] == "adservice"]
    others = shrugged[spans.callee[shrugged] != "adservice"]
    warnings = [_go_json({"message": f"{WHAT_FAILED[c]}: {rpc_detail(k, oc, wording=wording)}", "severity": "warning",
                          "timestamp": ts})
                for c, k, oc, ts in zip(spans.callee[others].tolist(), spans.origin_kind[others].tolist(),
                                        spans.origin_callee[others].tolist(), iso[others].tolist())]
    sink.add(spans.start_us[others] + spans.dur_us[others], spans.pod[others], spans.node[others], warnings,
             span=others, by_caller=True)
    warn = [_go_json({"error": f"failed to get ads: {rpc_detail(k, 'adservice', wording=wording)}", "http.req.id": rid,
                      "http.req.method": "GET", "http.req.path": "/product/OLJCESPC7Z",
                      "message": "failed to retrieve ads", "severity": "warning", "timestamp": ts})
            for rid, k, ts in zip(_req_ids(rng, len(ads)), spans.err_kind[ads].tolist(), iso[ads].tolist())]
    sink.add(spans.start_us[ads] + spans.dur_us[ads], spans.pod[ads], spans.node[ads], warn,
             span=ads, by_caller=True)
    injected = ads[spans.err_kind[ads] == ErrorKind.INJECTED]
    _callee_lines(sink, spans, injected, placement, lambda i: (
        f'Exception in thread "grpc-default-executor-{i % 97}" java.lang.Error: Injected error'))

    # Error lines of intermediate callers (checkoutservice, cartservice, recommendationservice ...).
    mid = np.nonzero((spans.kind == "server") & (spans.err_kind > 0) & (spans.service != "frontend"))[0]
    lines = [_service_error(svc, fc, k, oc, ts, wording=wording) for svc, fc, k, oc, ts in
             zip(spans.service[mid].tolist(), spans.fail_callee[mid].tolist(), spans.origin_kind[mid].tolist(),
                 spans.origin_callee[mid].tolist(), iso[mid].tolist())]
    sink.add(spans.start_us[mid] + spans.dur_us[mid], spans.pod[mid], spans.node[mid], lines, span=mid)

    # Everyday info lines of the services (sampled by info_share to set the volume).
    info = np.nonzero(((spans.kind == "server") & (spans.service != "frontend")
                       | np.isin(spans.callee, ["currencyservice", "paymentservice", "adservice"])
                       & (spans.kind == "client")) & (spans.err_kind == 0))[0]
    info = info[rng.random(len(info)) < info_share]
    client_side = spans.kind[info] == "client"
    own = info[~client_side]
    phases = ("received", "completed") if verbose_frontend else ("received",)
    for phase in phases:
        t_own = spans.start_us[own] + (spans.dur_us[own] if phase == "completed" else 0)
        sink.add(t_own, spans.pod[own], spans.node[own],
                 [_service_info(svc, op, ts, phase) for svc, op, ts in
                  zip(spans.service[own].tolist(), spans.operation[own].tolist(), _iso_ms(t_own).tolist())],
                 span=own)
        _callee_lines(sink, spans, info[client_side], placement, None)

    _fault_lines(sink, faults, placement=placement, hour_start_s=hour_start_s, rng=rng)

    if not sink.t:
        return LogRows(*(np.array([], dtype=d) for d in (np.int64, object, object, object, object)))
    t = np.concatenate(sink.t)
    order = np.argsort(t, kind="stable")
    pods = np.concatenate(sink.pod)[order]
    namespace = np.full(len(t), "hipstershop", dtype=object)
    messages = np.concatenate(sink.msg)[order]
    if trace_context:
        span = _writer_spans(spans, span=np.concatenate(sink.span)[order],
                             by_caller=np.concatenate(sink.by_caller)[order])
        messages = _with_trace_context(messages, spans=spans, span=span)
    return LogRows(t[order], namespace, pods, np.concatenate(sink.node)[order], messages)


def _writer_spans(spans: SpanBatch, *, span: np.ndarray, by_caller: np.ndarray) -> np.ndarray:
    """The span each line was written in: its own, or for a line about a client span, the caller's
    own span (its parent), whose handler writes the caller's lines; -1 where there is none."""
    out = span.copy()
    if by_caller.any():
        position = {int(s): i for i, s in enumerate(spans.span_id.tolist())}
        out[by_caller] = [position.get(int(p), -1) for p in spans.parent_id[span[by_caller]].tolist()]
    return out


def _with_trace_context(messages: np.ndarray, *, spans: SpanBatch, span: np.ndarray) -> np.ndarray:
    """Each line written in a span states its trace context: JSON lines as ``trace_id`` / ``span_id``
    fields (first, as a structured logger's context), text lines ending ``trace_id=... span_id=...``."""
    out = messages.copy()
    for i in np.nonzero(span >= 0)[0].tolist():
        k = int(span[i])
        trace = f"{int(spans.trace_hi[k]):016x}{int(spans.trace_lo[k]):016x}"
        own = f"{int(spans.span_id[k]):016x}"
        line = str(out[i])
        out[i] = (f'{{"trace_id":"{trace}","span_id":"{own}",{line[1:]}' if line.startswith("{")
                  else f"{line} trace_id={trace} span_id={own}")
    return out


def _callee_lines(sink: _Sink, spans: SpanBatch, idx: np.ndarray, placement: Placement, text) -> None:
    """Lines logged by the called pod of client-only services (they have no server span)."""
    if len(idx) == 0:
        return
    t = spans.start_us[idx] + spans.dur_us[idx] // 2
    pods = spans.callee_pod[idx]
    minute = ((t / 1e6 + CST_OFFSET_S) % 86400 // 60).astype(int)
    nodes = np.array([placement.node_at(str(p), int(m)) for p, m in zip(pods.tolist(), minute.tolist())], dtype=object)
    iso = _iso_ms(t).tolist()
    if text is None:
        messages = [_callee_info(str(p), ts) for p, ts in zip(pods.tolist(), iso)]
    else:
        messages = [text(i) for i in range(len(idx))]
    sink.add(t, pods, nodes, messages)


def _callee_info(pod: str, ts: str) -> str:
    if pod.startswith("currencyservice"):
        return json.dumps({"severity": "info", "time": ts, "pid": 1, "hostname": pod, "name": "currencyservice-server",
                           "message": "conversion request successful"}, separators=(",", ":"))
    if pod.startswith("paymentservice"):
        return json.dumps({"severity": "info", "time": ts, "pid": 1, "hostname": pod, "name": "paymentservice-charge",
                           "message": "Transaction processed: visa ending 4432     Amount: USD41.99"},
                          separators=(",", ":"))
    return f"{ts.replace('T', ' ')[:-1]} INFO  [grpc-default-executor-2] hipstershop.AdService - received ad request (context_words=[clothing])"


def _service_info(service: str, operation: str, ts: str, phase: str) -> str:
    method = operation.rsplit("/", 1)[-1]
    if service == "cartservice":
        if phase == "completed":
            return f"{method}Async completed for userId=5b8e1d3c-a4f0-4c4b-9e6a-0d2f3c1e7a90"
        return f"{method}Async called with userId=5b8e1d3c-a4f0-4c4b-9e6a-0d2f3c1e7a90"
    if service == "redis":
        return f"redis {operation} ok"
    if service in ("recommendationservice", "emailservice"):
        text = ("[Recv ListRecommendations] product_ids=['OLJCESPC7Z', '66VCHSJNUP']" if service.startswith("rec")
                else "A request to send order confirmation email to someone@example.com has been received.")
        return json.dumps({"timestamp": ts, "severity": "INFO", "name": f"{service}-server", "message": text},
                          separators=(",", ":"))
    return _go_json({"message": f"[{method}] {phase} request", "severity": "info", "timestamp": ts})


def _service_error(service: str, fail_callee: str, kind: int, origin: str, ts: str, *, wording: int = 0) -> str:
    detail = rpc_detail(kind, origin, wording=wording)
    if service == "productcatalogservice" and kind in (ErrorKind.REGION, ErrorKind.PD_TIMEOUT, ErrorKind.TIDB_REFUSED):
        return _go_json({"message": f"failed to query product catalog: {detail.split('desc = ', 1)[1]}",
                         "severity": "error", "timestamp": ts})
    if service == "cartservice":
        return (f"Error status code 'FailedPrecondition' with detail 'Can't access cart storage. "
                f"StackExchange.Redis.RedisTimeoutException: Timeout awaiting response (outbound=0KiB, inbound=0KiB, "
                f"5000ms elapsed, timeout is 5000ms), command=HGET, serverEndpoint=redis-cart:6379' ({detail})")
    if service in ("recommendationservice", "emailservice"):
        return json.dumps({"timestamp": ts, "severity": "ERROR", "name": f"{service}-server",
                           "message": "<_InactiveRpcError of RPC that terminated with: status = StatusCode.UNAVAILABLE "
                                      f'details = "failed to connect to all addresses" ({detail})>'},
                          separators=(",", ":"))
    if kind == ErrorKind.INTERNAL and origin == service:
        return _go_json({"message": "panic: runtime error: invalid memory address or nil pointer dereference",
                         "severity": "error", "timestamp": ts})
    return _go_json({"message": f"{WHAT_FAILED.get(fail_callee, 'call failed')}: {detail}",
                     "severity": "warning", "timestamp": ts})


def _fault_lines(sink: _Sink, faults: list[Fault], *, placement: Placement, hour_start_s: int,
                 rng: np.random.Generator) -> None:
    """Lines written by the fault itself: chaos agent output in adservice, restarts of killed pods."""
    for f in faults:
        start, end = max(f.start.timestamp(), hour_start_s), min(f.end.timestamp(), hour_start_s + 3600)
        if f.fault_type in JVM_RULES and end > start:
            per_pod = max(1, int((end - start) // 20))
            for pod in f.pods:
                t = np.sort(rng.uniform(start, end, per_pod)) * 1e6
                minute = int(((start + CST_OFFSET_S) % 86400) // 60)
                node = placement.node_at(pod, minute)
                iso = _iso_ms(t.astype(np.int64)).tolist()
                msgs = [f"{ts.replace('T', ' ')[:-1]} WARN  [TransformListener] "
                        f"java.lang.reflect.InvocationTargetException applying rule {JVM_RULES[f.fault_type]}"
                        for ts in iso]
                sink.add(t.astype(np.int64), np.full(len(t), pod, dtype=object), np.full(len(t), node, dtype=object),
                         msgs)
        if f.fault_type in ("pod kill", "pod failure", "code error") and not f.service.startswith("tidb-"):
            restart = f.start.timestamp() + 40 if f.fault_type == "pod kill" else f.end.timestamp() + 5
            if hour_start_s <= restart < hour_start_s + 3600:
                for pod in (f.pods or pods_of(f.service)):
                    node = placement.node_at(pod, int(((restart + CST_OFFSET_S) % 86400) // 60))
                    sink.add(np.array([int(restart * 1e6)]), np.array([pod], dtype=object),
                             np.array([node], dtype=object),
                             [_go_json({"message": f"starting grpc server at :{SERVICE_PORT.get(f.service, 8080)}",
                                        "severity": "info"})])
