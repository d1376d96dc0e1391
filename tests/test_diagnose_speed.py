"""Issue 27, fast on a laptop: the cached prefix stays byte-stable, the case part keeps its budget,
server timings are read from the reply, and a concurrent batch answers exactly as a serial one."""
from __future__ import annotations

import json
import random
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from openai.types.chat import ChatCompletion

from diagnose.cases import Case
from diagnose.prompt import CASE_TOKENS, approx_tokens, build_prompt, compact_evidence
from diagnose.service import Diagnoser
from index.models import Candidate, EvidenceItem
from knowledge.retrieval import RetrievedDoc
from rca.llm.base import LLMReply, ServerTimings
from rca.llm.openai_backend import OpenAIBackend
from rca.settings import load_settings
from rca.system import bundled_system
from tests.fakes import StaticEvidence, StaticKnowledge
from tests.test_diagnose_decision import _candidates as decision_candidates

T0 = datetime(2025, 6, 5, 16, 10, tzinfo=UTC)


def _item(component: str, text: str, *, modality: str = "metric", key: str = "pod_cpu_usage") -> EvidenceItem:
    signal = {"metric": "level", "log": "burst", "trace": "latency"}[modality]
    return EvidenceItem(modality=modality, signal=signal, key=key, component=component, text=text, magnitude=5.0)


def _candidates(extra: str = "") -> list[Candidate]:
    return [
        Candidate(component="emailservice", level="service", score=6.0, evidence=[
            _item("emailservice-1", f"pod_cpu_usage up 4.1x (z=9.3) on emailservice-1 from 16:11{extra}"),
            _item("emailservice", "rrt up 2.9e+02x (z=50.0) on emailservice from 16:12", key="rrt"),
            _item("emailservice", "checkoutservice->emailservice p95 39.8x (z=50.0) to emailservice-0",
                  modality="trace", key="checkoutservice->emailservice"),
        ]),
        Candidate(component="checkoutservice", level="service", score=5.0, evidence=[
            _item("checkoutservice", "rrt up 3.0x (z=7.0) on checkoutservice", key="rrt")]),
        Candidate(component="adservice", level="service", score=0.5, evidence=[
            _item("adservice-0", "Injected error x3 (1.1x, z=1.2) on adservice-0", modality="log", key="Injected error")]),
    ]


def _sop(name: str) -> RetrievedDoc:
    return RetrievedDoc(id=name, title=name, kind="fault", fault_type="cpu stress", score=0.8, best_section="Metrics",
                        text="x" * 400, excerpt="pod_cpu_usage rises " * 20, key_metrics=["pod_cpu_usage"],
                        reason_template="sig")


def test_the_system_prefix_is_byte_identical_across_different_cases() -> None:
    catalogue = StaticKnowledge().catalogue()
    a = build_prompt(catalogue=catalogue, uuid="a", window="2025-06-05T16:10:00Z to 2025-06-05T16:20:00Z",
                     candidates=_candidates(), sops=[_sop("one")], max_tokens=3000,
                     choices={"emailservice": ["cpu stress", "memory stress"]}, distinctions=["memory rather than cpu"], system=bundled_system())
    b = build_prompt(catalogue=catalogue, uuid="b", window="2025-06-05T18:10:00Z to 2025-06-05T18:30:00Z",
                     candidates=_candidates(" and more")[1:], sops=[], max_tokens=3000, missing=["no logs"],
                     choices={"checkoutservice": ["pod failure"], "adservice": ["jvm gc"]}, system=bundled_system())
    assert a.messages[0]["role"] == "system" and a.messages[0]["content"].encode() == b.messages[0]["content"].encode()
    case_a, case_b = a.messages[1]["content"], b.messages[1]["content"]
    assert case_a != case_b
    # Nothing of the case leaks into the prefix, nothing of the prefix is repeated in the case.
    for case_only in ("emailservice", "16:10", "checkoutservice->emailservice"):
        assert case_only not in a.messages[0]["content"]
    assert "How a case reads" not in case_a and "Fault catalogue" not in case_a


def test_the_case_part_keeps_its_budget_and_compact_form() -> None:
    many = [c.model_copy(update={"evidence": c.evidence * 8}) for c in _candidates()]
    prompt = build_prompt(catalogue=StaticKnowledge().catalogue(), uuid="u",
                          window="2025-06-05T16:10:00Z to 2025-06-05T16:20:00Z", candidates=many,
                          sops=[_sop("one"), _sop("two")], max_tokens=3000,
                          choices={"emailservice": ["cpu stress"], "checkoutservice": ["cpu stress"]},
                          distinctions=["a note " * 20, "another note " * 20], sop_chars=300, system=bundled_system())
    user = prompt.messages[1]["content"]
    assert approx_tokens(user) <= CASE_TOKENS
    assert prompt.dropped_sops == 2 and prompt.dropped_evidence > 0
    # Contenders are never dropped, only their details; the one out of the question is not shown.
    assert "1. emailservice" in user and "2. checkoutservice" in user and "adservice" not in user
    assert "z=" not in user and "Window" not in user and "16:1" not in user  # no clock times
    # The question comes last, by number (the head lines name the contenders), with their open types.
    assert user.splitlines()[-1] == "Choose: 1 (cpu stress) or 2 (cpu stress)."


def test_onsets_are_minutes_against_the_window_start() -> None:
    """A cause moves before its victims: each head line gives its first anomaly against the moment
    the window opens, in minutes (two tokens where a clock time costs five)."""
    early, late = (c.model_copy(update={"evidence": [i.model_copy(update={"onset": T0 + timedelta(minutes=m)})
                                                      for i in c.evidence]})
                   for c, m in zip(_candidates()[:2], (-3, 2), strict=True))
    prompt = build_prompt(catalogue=[], uuid="u", window="2025-06-05T16:10:00Z to 2025-06-05T16:20:00Z",
                          candidates=[early, late], sops=[], max_tokens=3000, system=bundled_system())
    heads = [line for line in prompt.messages[1]["content"].splitlines() if line[:1].isdigit()]
    assert heads == ["1. emailservice service 6.0, 1 pod, from -3 min", "2. checkoutservice service 5.0, from +2 min"]


def test_evidence_lines_are_compacted() -> None:
    # The onset goes to the candidate's head line (a time is six tokens), "from 0 to" stays.
    assert compact_evidence("rrt_max up 2.9e+02x (z=50.0) on redis-cart from 01:11", own="redis-cart") == \
        "rrt_max up 290x"
    assert compact_evidence("rrt up 39.8x (z=5.0) on redis-cart-0", own="redis-cart") == "rrt up 40x on redis-cart-0"
    assert compact_evidence("request up from 0 to 1.62e+04 from 02:12", own="x") == "request up from 0 to 16200"
    # A service's only abnormal pod is named once, in the head line, not on every line.
    assert compact_evidence("a->b p95 4.6x to b-5f6585d649-fnmft from 03:54", own=("b", "b-5f6585d649-fnmft")) == \
        "a->b p95 4.6x"


def _completion(timings: dict[str, Any] | None) -> ChatCompletion:
    body: dict[str, Any] = {
        "id": "c", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1700, "completion_tokens": 30, "total_tokens": 1730},
    }
    if timings is not None:
        body["timings"] = timings
    return ChatCompletion.model_validate(body)


def test_server_timings_are_read_from_a_llama_cpp_reply() -> None:
    backend = OpenAIBackend(base_url="http://127.0.0.1:9/v1", api_key="", model="m")
    try:
        # As llama.cpp's server words them: the prefix came from the cache, only the case was evaluated.
        raw = {"cache_n": 1480, "prompt_n": 220, "prompt_ms": 3650.5, "prompt_per_token_ms": 16.6,
               "predicted_n": 30, "predicted_ms": 2710.0, "predicted_per_second": 11.07}
        reply = backend._reply_from(_completion(raw), latency_s=6.5, attempts=1)
        assert reply.server_timings == ServerTimings(prompt_evaluated=220, prompt_cached=1480, prefill_s=3.6505,
                                                     decode_s=2.71, generated=30)
        assert reply.extra["server_timings"] == raw
        assert backend._reply_from(_completion(None), latency_s=1.0, attempts=1).server_timings is None
    finally:
        backend.close()
    totals = ServerTimings.total([reply.server_timings, None, ServerTimings(prompt_evaluated=10, prefill_s=0.5)])
    assert totals == {"prefill_s": 4.151, "decode_s": 2.71, "prompt_evaluated": 230.0, "prompt_cached": 1480.0}
    assert ServerTimings.total([None]) == {}


class ContentBackend:
    """A thread-safe fake model whose answer depends only on the prompt (like greedy decoding),
    answering after a random pause so concurrent cases finish out of order."""

    name = "content"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.rng = random.Random(7)

    def chat(self, messages, *, json_schema=None, schema_name="answer", temperature=None, max_tokens=None,
             seed=None) -> LLMReply:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            pause = self.rng.uniform(0.0, 0.03)
        time.sleep(pause)
        branches = json_schema.get("anyOf", [json_schema])
        digest = sum(map(ord, messages[-1]["content"]))
        branch = branches[digest % len(branches)]["properties"]
        enum = branch["fault_type"]["enum"]
        key = "candidate" if "candidate" in branch else "component"
        text = json.dumps({key: branch[key]["const"], "fault_type": enum[digest % len(enum)],
                           "reason": "pod_cpu_usage up"})
        with self.lock:
            self.in_flight -= 1
        timings = ServerTimings(prompt_evaluated=200, prompt_cached=1500, prefill_s=3.0, decode_s=2.0, generated=20)
        return LLMReply(text=text, model="content", prompt_tokens=1700, completion_tokens=20, latency_s=pause,
                        server_timings=timings)

    def close(self) -> None:
        pass


def _batch(tmp_path: Path, *, concurrency: int) -> tuple[bytes, list[dict[str, Any]], ContentBackend]:
    settings = load_settings(environ={}, overrides={"llm": {"concurrency": concurrency},
                                                    "paths": {"runs_dir": tmp_path / "runs"}})
    cases = [Case(uuid=f"case-{i:02d}", description="x", start=T0 + timedelta(minutes=7 * i),
                  end=T0 + timedelta(minutes=7 * i + 5 + i % 3)) for i in range(12)]
    backend = ContentBackend()
    out = tmp_path / "result.jsonl"
    with Diagnoser(settings=settings, evidence=StaticEvidence(decision_candidates()), knowledge=StaticKnowledge(),
                   llm=backend) as diagnoser:
        summary = diagnoser.run(cases, out=out, show_progress=False)
    assert len(summary.done) == 12 and not summary.failed
    records = [json.loads((tmp_path / "runs" / "result" / f"{c.uuid}.json").read_text()) for c in cases]
    return out.read_bytes(), records, backend


def test_a_concurrent_batch_answers_exactly_as_a_serial_one(tmp_path: Path) -> None:
    serial, serial_records, _ = _batch(tmp_path / "serial", concurrency=1)
    parallel, parallel_records, backend = _batch(tmp_path / "parallel", concurrency=3)
    assert backend.most_in_flight > 1  # the cases really overlapped in the model
    assert parallel == serial  # same answers, same order in the file
    keep = ("answer", "decision", "prompt", "raw_responses", "rules_answer", "choices", "usage")

    def content(record: dict[str, Any]) -> dict[str, Any]:
        # The seconds a call took are measured, not decided: they differ between any two runs.
        kept = {k: record[k] for k in keep}
        kept["usage"] = {k: v for k, v in kept["usage"].items() if k != "llm_seconds"}
        return kept

    assert [content(r) for r in parallel_records] == [content(r) for r in serial_records]
    # Each record says where its model seconds went and that the prefix came from the cache.
    timings = parallel_records[0]["timings_s"]
    assert timings["prefill_s"] == 3.0 and timings["prompt_cached"] == 1500.0 and "prepare_s" in timings


def test_the_embedded_server_gets_a_grammar_without_whitespace() -> None:
    schema = {"type": "object", "properties": {"component": {"type": "string", "enum": ["a", "b"]}},
              "required": ["component"], "additionalProperties": False}
    compact = OpenAIBackend(base_url="http://127.0.0.1:9/v1", api_key="", model="m", compact_json=True)
    plain = OpenAIBackend(base_url="http://127.0.0.1:9/v1", api_key="", model="m")
    try:
        request: dict[str, Any] = {}
        compact._add_response_format(request, json_schema=schema, schema_name="answer")
        grammar = request["extra_body"]["grammar"]
        head, _, body = grammar.partition("start: %json ")
        assert head == "%llguidance {}\n" and "response_format" not in request
        assert json.loads(body) == {**schema, "x-guidance": {"whitespace_flexible": False, "item_separator": ",",
                                                             "key_separator": ":"}}
        request = {}
        plain._add_response_format(request, json_schema=schema, schema_name="answer")
        assert request["response_format"]["type"] == "json_schema" and "extra_body" not in request
    finally:
        compact.close()
        plain.close()
