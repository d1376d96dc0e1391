"""The agent modes with recorded model replies: react's loop and the team's rounds."""
from __future__ import annotations

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from diagnose.agents import mentioned, open_investigation
from diagnose.cases import Case
from diagnose.decide import DecisionError
from diagnose.react import run_react
from diagnose.record import RunRecord
from diagnose.service import Diagnoser
from diagnose.team import run_team
from index.models import Candidate, EvidenceItem
from rca.challenge import EARLY
from rca.llm.openai_backend import OpenAIBackend
from rca.settings import Settings
from rca.system import bundled_system
from tests.fakes import START, MemoryTelemetry, RecordedBackend, StaticEvidence, StaticKnowledge


def _case(uuid: str = "case-1") -> Case:
    return Case(uuid=uuid, description="incident", start=START, end=START + timedelta(minutes=10))


def _candidates() -> list[Candidate]:
    cpu = EvidenceItem(modality="metric", key="pod_cpu_usage", component="cartservice-0",
                       text="pod_cpu_usage up 5x (z=40) on cartservice-0", magnitude=40.0, signal="level",
                       direction="up")
    edge = EvidenceItem(modality="trace", key="frontend->cartservice", component="cartservice",
                        text="frontend->cartservice p95 10x (z=20)", magnitude=20.0, signal="latency",
                        caller="frontend", callee="cartservice")
    return [Candidate(component="cartservice", level="service", score=2.0, evidence=[cpu, edge]),
            Candidate(component="frontend", level="service", score=0.5, evidence=[edge])]


def _open(settings: Settings | None = None):
    settings = settings or Settings()
    return open_investigation(_case(), settings=settings, evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge(),
                              telemetry=MemoryTelemetry())


def _act(tool: str, **args) -> str:
    return json.dumps({"thought": f"look at {tool}", "tool": tool, "args": args})


def _answer(component: str = "cartservice", fault_type: str = "cpu stress", **extra) -> str:
    return json.dumps({"component": component, "fault_type": fault_type,
                       "reason": f"{fault_type}: pod_cpu_usage up on {component}", **extra})


def _react(replies: list[str], *, max_steps: int = 4):
    toolbox, ranked = _open()
    backend = RecordedBackend(replies)
    record = run_react(_case(), toolbox=toolbox, ranked=ranked, llm=backend, knowledge=StaticKnowledge(), rules=EARLY,
                       max_steps=max_steps, temperature=0.0, system=bundled_system())
    return record, backend, toolbox


def test_react_feeds_tool_errors_back_as_observations_and_traces_the_calls_taken():
    record, backend, _ = _react([
        _act("get_metrics", component="cartservice"),
        "this is not json",
        _act("get_kpis"),
        _act("get_metrics", component="cartservice"),  # a repeat
        _act("final_answer"),
        _answer(),
    ], max_steps=6)
    assert record.answer.component == "cartservice"
    observations = [r["messages"][-1]["content"] for r in backend.requests]
    assert "error: your reply is not an action" in observations[2]
    assert "error: unknown tool 'get_kpis'; valid tools: get_metrics, get_logs" in observations[3]
    assert "already called" in observations[4]
    trace = record.answer.reasoning_trace
    assert [s.action for s in trace] == [
        "evidence index ranking: get_candidates()", "metric analysis: get_metrics(component=cartservice)",
        "decision: final answer after the investigation"]
    assert trace[1].observation.startswith("pod_cpu_usage up 5.0x on cartservice-0")
    assert trace[2].observation.startswith("cartservice: cpu stress")
    run = RunRecord.model_validate_json(record.model_dump_json())  # as read back from its file
    assert run.mode == "react" and run.schema_version == 2
    assert run.usage.calls == 6
    assert [c.tool for c in run.agent_calls] == ["get_candidates", "get_metrics", "(invalid reply)", "get_kpis",
                                                 "get_metrics", None]
    assert all(c.messages for c in run.agent_calls[1:])  # every model call keeps its messages
    # The rules-only ablation is recorded in agent modes too: index top-1 with its best SOP fit.
    assert run.rules_answer is not None and run.rules_answer.component == "cartservice"
    assert run.rules_fault_type == run.rules_reading["fault_type"]


def test_react_stops_at_the_step_limit():
    record, backend, _ = _react([_act("get_logs"), _act("get_traces"), _answer()], max_steps=2)
    assert len(backend.requests) == 3
    final_prompt = backend.requests[-1]["messages"][-1]["content"]
    assert "(0 tool calls left)" in final_prompt and "Investigation over" in final_prompt
    assert [s.action.split(":")[0] for s in record.answer.reasoning_trace] == [
        "evidence index ranking", "log search", "trace analysis", "decision"]
    assert record.answer.reasoning_trace[1].observation.startswith("Connection refused")
    assert record.answer.reasoning_trace[2].observation.startswith("frontend->cartservice p95")


def test_react_final_answer_is_constrained_to_components_of_the_data():
    record, backend, toolbox = _react([_act("get_logs"), _act("final_answer"),
                                       _answer("paymentservice"), _answer("redis-cart", "network loss")])
    action = backend.requests[0]["json_schema"]["properties"]
    assert action["tool"]["enum"] == toolbox.names + ["final_answer"]
    assert action["args"]["properties"]["component"] == {"type": "string"}
    assert toolbox.action_schema(component_enum=True)["properties"]["args"]["properties"]["component"][
        "enum"] == toolbox.components
    final_schema = backend.requests[2]["json_schema"]
    offered = [b["properties"]["component"]["const"] for b in final_schema["anyOf"]]
    assert offered[:2] == ["cartservice", "frontend"]  # the index's top first
    assert "redis-cart" in offered and "paymentservice" not in offered  # named by the logs; never seen
    assert set(offered) <= set(toolbox.components)
    assert "Your reply was invalid: component: 'paymentservice' is not one of the candidates" in \
        backend.requests[3]["messages"][-1]["content"]
    assert record.answer.component == "redis-cart" and record.repaired


def test_react_answer_outside_the_data_fails_after_repair():
    with pytest.raises(DecisionError):
        _react([_act("final_answer"), _answer("paymentservice"), _answer("checkout")])


def _team(replies: list[str], *, max_rounds: int = 2):
    toolbox, ranked = _open()
    backend = RecordedBackend(replies)
    record = run_team(_case(), toolbox=toolbox, ranked=ranked, llm=backend, knowledge=StaticKnowledge(), rules=EARLY,
                      max_rounds=max_rounds, temperature=0.0, system=bundled_system())
    return record, backend


PLAN = json.dumps({"order": ["trace", "metric", "log"], "focus": "cartservice"})


def _finding(text: str, suspect: str) -> str:
    return json.dumps({"finding": text, "suspect": suspect})


def test_team_accepts_in_one_round_with_one_step_per_finding():
    record, backend = _team([
        PLAN,
        _finding("frontend->cartservice latency up 10x", "cartservice"),
        _finding("pod_cpu_usage of cartservice-0 up 5x", "cartservice-0"),
        _finding("redis-cart logs connection refused", "redis-cart-0"),
        _answer(verdict="accept"),
    ])
    trace = record.answer.reasoning_trace
    assert [s.action.split(":")[0] for s in trace] == ["trace specialist", "metric specialist", "log specialist", "judge"]
    assert trace[0].observation.startswith("frontend->cartservice p95")
    assert trace[1].observation.startswith("pod_cpu_usage up")
    assert trace[2].observation.startswith("Connection refused")
    judge_prompt = backend.requests[-1]["messages"][0]["content"]
    assert "- metric: pod_cpu_usage of cartservice-0 up 5x (suspect: cartservice-0)" in judge_prompt
    assert backend.requests[-1]["json_schema"]["anyOf"][0]["properties"]["verdict"]["enum"] == ["accept", "more"]
    run = RunRecord.model_validate_json(record.model_dump_json())  # as read back from its file
    assert run.mode == "team" and run.usage.calls == 5
    assert [c.agent for c in run.agent_calls] == ["code", "controller", "trace", "metric", "log"]


def test_team_judge_sends_the_controller_back_for_one_more_round():
    record, backend = _team([
        PLAN,
        _finding("frontend->cartservice latency up 10x", "cartservice"),
        _finding("pod_cpu_usage of cartservice-0 up 5x", "cartservice-0"),
        _finding("redis-cart logs connection refused", "redis-cart-0"),
        _answer(verdict="more"),
        json.dumps({"specialist": "metric", "component": "cartservice"}),
        _finding("pod_cpu_usage up on cartservice-0 only", "cartservice-0"),
        _answer("cartservice-0", verdict="accept"),
    ])
    assert record.answer.component == "cartservice-0"
    last_schema = backend.requests[-1]["json_schema"]
    assert last_schema["anyOf"][0]["properties"]["verdict"]["enum"] == ["accept"]  # the last round must accept
    recheck_prompt = backend.requests[5]["messages"][0]["content"]
    assert "Judge: maybe cpu stress on cartservice" in recheck_prompt
    trace = record.answer.reasoning_trace
    assert len(trace) == 5
    assert trace[3].action == "metric specialist: metric analysis: get_metrics(component=cartservice, limit=6)"
    assert trace[4].action == "judge: root cause accepted (round 2)"
    run = RunRecord.model_validate_json(record.model_dump_json())  # as read back from its file
    assert run.usage.calls == 8
    judge_calls = [c for c in run.agent_calls if c.agent == "judge"]
    assert len(judge_calls) == 1 and judge_calls[0].observation.startswith("more:")


def test_team_specialist_with_nothing_to_report_costs_no_model_call():
    toolbox, ranked = _open()
    toolbox.invoke("get_logs", {})  # score the window once, so the patched frame is used
    backend = RecordedBackend([
        json.dumps({"order": ["metric", "log", "trace"], "focus": "cartservice"}),
        _finding("pod_cpu_usage up", "cartservice-0"),
        _finding("latency up", "cartservice"),
        _answer(verdict="accept"),
    ])
    empty_logs = toolbox._tools["get_logs"]  # a window with no log change at all
    empty_logs.window.scored.core["log"] = empty_logs.window.scored.core["log"].head(0)
    record = run_team(_case(), toolbox=toolbox, ranked=ranked, llm=backend, knowledge=StaticKnowledge(), rules=EARLY, max_rounds=1,
                      temperature=0.0, system=bundled_system())
    assert len(backend.requests) == 4
    assert record.answer.reasoning_trace[1].observation.startswith("all components: no log lines")


def test_mentioned_components_are_whole_names_in_order():
    known = ["cartservice", "cartservice-0", "frontend", "redis-cart", "aiops-k8s-01"]
    assert mentioned(["frontend->cartservice p95", "pod_cpu_usage on cartservice-0; node aiops-k8s-01"], known, system=bundled_system()) == [
        "frontend", "cartservice", "cartservice-0", "aiops-k8s-01"]


def test_diagnoser_runs_agent_modes_resumably(tmp_path: Path):
    settings = Settings.model_validate({"diagnose": {"mode": "react", "react_max_steps": 1},
                                        "paths": {"runs_dir": str(tmp_path / "runs")}})
    backend = RecordedBackend([_act("final_answer"), _answer()])
    diagnoser = Diagnoser(settings=settings, evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge(),
                          llm=backend, telemetry=MemoryTelemetry())
    out = tmp_path / "result.jsonl"
    summary = diagnoser.run([_case()], out=out, show_progress=False)
    assert summary.done == ["case-1"]
    assert json.loads(out.read_text())["component"] == "cartservice"
    run = RunRecord.load(tmp_path / "runs" / "result" / "case-1.json")
    assert run.mode == "react" and run.agent_calls
    again = diagnoser.run([_case()], out=out, show_progress=False)  # resumed: nothing left to do
    assert again.skipped == ["case-1"] and not backend.replies


def test_agent_mode_without_telemetry_is_a_clear_error():
    settings = Settings.model_validate({"diagnose": {"mode": "team"}})
    diagnoser = Diagnoser(settings=settings, evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge(),
                          llm=RecordedBackend([]))
    with pytest.raises(ValueError, match="needs raw telemetry"):
        diagnoser.diagnose(_case())


def test_version_1_run_records_still_load(tmp_path: Path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema_version": 1, "uuid": "u", "window": {"start": "a", "end": "b"}}))
    record = RunRecord.load(path)
    assert record.mode == "pipeline" and record.agent_calls == []


class _ScriptedEndpoint:
    """A tiny OpenAI-compatible server on 127.0.0.1 answering scripted replies in order."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                payload = json.dumps({
                    "id": "c", "object": "chat.completion", "created": 0, "model": "remote-model",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": outer.replies.pop(0)}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_team_over_a_remote_json_object_endpoint():
    endpoint = _ScriptedEndpoint([
        PLAN,
        _finding("frontend->cartservice latency up 10x", "cartservice"),
        _finding("pod_cpu_usage of cartservice-0 up 5x", "cartservice-0"),
        _finding("redis-cart logs connection refused", "redis-cart-0"),
        _answer(verdict="accept"),
    ])
    backend = OpenAIBackend(base_url=endpoint.url, api_key="EMPTY", model="remote-model", response_format="json_object",
                            timeout_s=5.0, max_retries=0)
    try:
        toolbox, ranked = _open()
        record = run_team(_case(), toolbox=toolbox, ranked=ranked, llm=backend, knowledge=StaticKnowledge(),
                          max_rounds=2, temperature=0.0, rules=EARLY, system=bundled_system())
    finally:
        backend.close()
        endpoint.close()
    assert record.answer.component == "cartservice"
    assert record.usage.model == "remote-model"
    assert all(r["response_format"] == {"type": "json_object"} for r in endpoint.requests)
    assert '"verdict"' in endpoint.requests[-1]["messages"][-1]["content"]  # json_object: the schema is in the prompt
