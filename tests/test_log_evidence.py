"""Log evidence wording: example lines keep the words Drain merged into <*>, long lines keep their tail."""
from __future__ import annotations

import polars as pl
import pytest

from diagnose.cases import Case
from diagnose.pipeline import compose_answer
from diagnose.trace import build_trace
from index.evidence import log_items
from index.models import Candidate, EvidenceItem
from index.params import RankWeights
from preprocess.detect_log import (
    LogTemplateMiner,
    elide,
    log_counts,
    log_words,
    score_log_window,
    template_keyword,
)
from rca.challenge import rule_version
from rca.system import bundled_system
from tests.fakes import StaticKnowledge
from tests.test_detect_log import BASELINE_START, WINDOW_END, WINDOW_START, _logs

# The chaos agent's lines of the simulator (simulate/logs.py JVM_RULES), whose rule names differ only at the end.
JVM_RULES = {
    "gc": ("adservice--gc (GCHelper.triggerFullGC)", ("adservice--gc", "GCHelper")),
    "latency": ("adservice-getRandomAds-latency (delay 3000ms)", ("getRandomAds-latency", "delay")),
    "exception": ("adservice-getrandomads-exception (Caught ThrowException)", ("exception", "ThrowException")),
    "cpu": ("adservice--stress (cpu fullload)", ("adservice--stress", "fullload")),
}
JVM_LINE = ("2025-06-05 16:{minute:02d}:12.345 WARN  [TransformListener] "
            "java.lang.reflect.InvocationTargetException applying rule {rule}")
DNS_LINE = ('{{"message":"request error","error":"failed to get currencies: rpc error: code = Unavailable desc = '
            'connection error: desc = \\"transport: Error while dialing: dial tcp: lookup currencyservice on '
            '10.233.33.139:53: server misbehaving\\"","http.req.id":"{n:08x}-aaaa-bbbb-cccc-0123456789ab"}}')


def _evidence(rows: list[tuple[int, str, str]]) -> tuple[list[EvidenceItem], pl.DataFrame]:
    # Logs were recorded before the window too (a template is new only against recorded minutes):
    # another pod's steady line, every minute.
    rows = [*rows, *((m, "emailservice-0", "sent confirmation email") for m in range(51) for _ in range(5))]
    miner = LogTemplateMiner(state_path=None)
    events = score_log_window(log_counts(_logs(rows), miner=miner), miner.templates(), start=WINDOW_START,
                              end=WINDOW_END, baseline_start=BASELINE_START)
    return [item.evidence for _, item in log_items(events, known_services=set(), weights=RankWeights(), system=bundled_system())], events


@pytest.mark.parametrize("fault", sorted(JVM_RULES))
def test_jvm_rule_survives_the_drain_merge(fault):
    # Every rule fires on some adservice pod over the day, so Drain merges the rules of equal length.
    rows = [(m, f"adservice-{1 + i % 2}", JVM_LINE.format(minute=m, rule=rule))
            for i, (rule, _) in enumerate(JVM_RULES.values()) for m in range(5 + i, 30, 4)]
    rule, words = JVM_RULES[fault]
    rows += [(m, "adservice-0", JVM_LINE.format(minute=m, rule=rule)) for m in range(35, 51) for _ in range(3)]
    evidence, events = _evidence(rows)
    assert [e.component for e in evidence] == ["adservice-0"]
    if fault != "gc":  # the gc rule has one token less, so Drain keeps it apart
        assert events.item(0, "template").endswith("applying rule <*> <*> <*>")
    assert all(w in evidence[0].text for w in words), evidence[0].text
    assert len(evidence[0].text) <= 100 and len(evidence[0].key) <= 48


def test_example_is_the_most_frequent_line_of_the_template():
    latency, cpu = JVM_RULES["latency"][0], JVM_RULES["cpu"][0]
    rows = [(40, "adservice-0", JVM_LINE.format(minute=40, rule=rule)) for rule in [cpu] + [latency] * 3]
    counts = log_counts(_logs(rows), miner=LogTemplateMiner(state_path=None))
    assert counts.height == 1 and counts.item(0, "count") == 4
    assert "getRandomAds-latency" in counts.item(0, "example")


def test_long_dns_error_keeps_its_cause():
    rows = [(m, "frontend-0", DNS_LINE.format(n=m * 10 + k)) for m in range(35, 51) for k in range(4)]
    evidence, events = _evidence(rows)
    text = evidence[0].text
    assert len(events.item(0, "example")) > 100
    assert "server misbehaving" in text and "currencyservice" in text and text.startswith("request error")
    assert text.endswith("x64 (new) on frontend-0") and len(text) <= 100
    assert "server misbehaving" in evidence[0].key and len(evidence[0].key) <= 48


def test_silent_stream_has_no_example():
    rows = [(m, "cartservice-2", "request complete") for m in range(35) for _ in range(5)]
    rows += [(m, "frontend-0", "request complete") for m in range(60) for _ in range(5)]  # the logs were recorded
    evidence, events = _evidence(rows)
    assert events.item(0, "direction") == "silent" and events.item(0, "example") == ""
    assert evidence[0].key == "log stream"


def test_elide_keeps_head_and_tail_within_max():
    text = "request error: failed to get ads: rpc error: code = Unavailable desc = dial tcp: connect: connection refused"
    for max_chars in (20, 48, 70):
        short = elide(text, max_chars=max_chars)
        head, tail = short.split("…")
        assert len(short) <= max_chars and text.startswith(head) and text.endswith(tail)
    assert elide(text, max_chars=48).endswith("connection refused")
    assert elide(text, max_chars=48).startswith("request error: failed to")
    assert elide(text, max_chars=len(text)) == text


def test_keyword_drops_mask_only_tokens_and_keeps_the_tail():
    masked = "<NUM><NUM><NUM> <NUM>:<NUM>:<NUM> WARN lookup currencyservice on <IP>: server misbehaving (delay <NUM>ms)"
    assert template_keyword(masked, max_chars=100) == \
        "WARN lookup currencyservice on server misbehaving (delay <NUM>ms)"
    assert template_keyword(masked, max_chars=40).endswith("(delay <NUM>ms)")
    assert template_keyword("<*> <*>") == "log template"



@pytest.mark.parametrize(("line", "expected"), [
    ("<NUM><NUM><NUM> <NUM>:<NUM>:<NUM> WARN [TransformListener] java.lang.reflect.InvocationTargetException "
     "applying rule adservice-getrandomads-exception (Caught ThrowException)",
     ["TransformListener", "InvocationTargetException", "applying", "rule",
      "adservice-getrandomads-exception", "Caught", "ThrowException"]),
    ('Exception in thread "grpc-default-executor<NUM>" java.lang.Error: Injected error',
     ["Exception", "thread", "grpc-default-executor", "Error", "Injected"]),
    ("could not retrieve cart: rpc error: code = Unavailable desc = last connection error: dial tcp <IP>: connect",
     ["could", "not", "retrieve", "cart", "rpc", "error", "code", "Unavailable", "desc", "last", "connection",
      "dial", "tcp", "connect"]),
    ('{"http.resp.status":<NUM>,"http.req.path":"/cart","message":"request complete"}',
     ["http.resp.status", "http.req.path", "cart", "message", "request", "complete"]),
    ("<*> <NUM> <IP>", []),
    ("invalid id <ID> from ip <IP>", ["invalid", "id", "ip"]),  # a mask goes; the word that names it stays
])
def test_log_words_keep_what_happened_once_each(line, expected):
    # Masks, numbers, punctuation, filler and the severity level go; dotted keys stay whole; a class
    # loses its package.
    assert log_words(line) == expected


def _log_step(evidence: list[EvidenceItem], *, chosen: str, rules: str) -> str:
    candidates = [Candidate(component=chosen, level="pod", score=1.0, evidence=evidence)]
    steps = build_trace(chosen=chosen, fault_type="jvm exception", reason_metrics=[], candidates=candidates,
                        rules=rule_version(rules))
    [step] = [s for s in steps if s.action.startswith("log search")]
    return step.observation


def test_log_observation_keeps_the_words_that_the_elided_text_loses():
    rule = JVM_RULES["exception"][0]
    rows = [(m, "adservice-0", JVM_LINE.format(minute=m, rule=rule)) for m in range(35, 51) for _ in range(3)]
    evidence, _ = _evidence(rows)
    assert "InvocationTargetException" not in evidence[0].text  # the evidence line is cut in the middle
    observation = _log_step(evidence, chosen="adservice-0", rules="early")
    assert observation.startswith("TransformListener InvocationTargetException applying rule "
                                  "adservice-getrandomads-exception") and len(observation) <= 100


@pytest.mark.parametrize("rules", ["early", "late"])
def test_log_observation_adds_the_next_lines_unsaid_words_within_the_scored_part(rules):
    rows = [(m, "adservice-0", 'Exception in thread "grpc-default-executor-7" java.lang.Error: Injected error')
            for m in range(35, 51) for _ in range(3)]
    rows += [(m, "frontend-0", DNS_LINE.format(n=m)) for m in range(35, 51)]
    evidence, _ = _evidence(rows)
    observation = _log_step(evidence, chosen="adservice-0", rules=rules)
    first, second = observation.split("; ")
    assert first.startswith("Exception thread grpc-default-executor Error Injected x48 on adservice-0")
    # The frontend line follows with its pod, its words not said yet ("error" was), as many as fit.
    assert second.startswith("frontend-0: request failed")
    assert "request failed get currencies rpc code Unavailable desc connection transport while dialing".startswith(
        second.removeprefix("frontend-0: "))
    if rules == "early":
        assert len(observation) <= 100 and len(observation) > 90
    else:
        assert len(observation.split()) == 20


def test_reason_names_the_key_metric_that_the_elided_evidence_text_cut():
    # The JVM agent's rule name is the fault's key metric; the evidence line is cut in its middle.
    rule = JVM_RULES["exception"][0]
    rows = [(m, "adservice-0", JVM_LINE.format(minute=m, rule=rule)) for m in range(35, 51) for _ in range(3)]
    evidence, _ = _evidence(rows)
    assert "adservice-getrandomads-exception" not in evidence[0].text
    # error_ratio leads, so the rule name is named only if the evidence is seen to show it.
    knowledge = StaticKnowledge(key_metrics={"jvm exception": ["error_ratio", "adservice-getrandomads-exception"]})
    case = Case(uuid="u1", description="an incident", start=WINDOW_START, end=WINDOW_END)
    answer = compose_answer(case, candidates=[Candidate(component="adservice-0", level="pod", score=1.0,
                                                        evidence=evidence)],
                            component="adservice-0", fault_type="jvm exception", model_reason="",
                            knowledge=knowledge, rules=rule_version("early"))
    assert answer.reason == "jvm exception on adservice-0 (adservice-getrandomads-exception)"


def test_a_line_naming_a_service_is_evidence_against_it_after_drain_merged_the_names():
    # Java callers log the URL of the call that failed. Over the day, the same statement named
    # other services, so Drain keeps the service as <*>; the line itself still names it.
    line = ("ERROR o.s.OrderServiceImpl#98 call failed: I/O error on POST request for "
            '"http://{service}:{port}/api/v1/query": Read timed out')
    day = [(m, "ts-order-service-0", line.format(service=s, port=p))
           for m in range(0, 30, 3) for s, p in (("ts-basic-service", 15680), ("ts-route-service", 11178))]
    burst = [(m, "ts-order-service-0", line.format(service="ts-basic-service", port=15680))
             for m in range(35, 51) for _ in range(4)]
    rows = [*day, *burst, *((m, "emailservice-0", "sent confirmation email") for m in range(51) for _ in range(5))]
    miner = LogTemplateMiner(state_path=None)
    events = score_log_window(log_counts(_logs(rows), miner=miner), miner.templates(), start=WINDOW_START,
                              end=WINDOW_END, baseline_start=BASELINE_START)
    assert "ts-basic-service" not in events.item(0, "template"), events.item(0, "template")
    items = log_items(events, known_services={"ts-order-service", "ts-basic-service", "ts-route-service"},
                      weights=RankWeights(), system=bundled_system())
    named = {component: item.role for component, item in items}
    assert named == {"ts-order-service-0": "symptom", "ts-basic-service": "edge"}, named
