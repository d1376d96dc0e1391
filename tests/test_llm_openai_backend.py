"""OpenAIBackend against a tiny fake OpenAI-compatible HTTP server on 127.0.0.1."""
from __future__ import annotations

import copy
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from rca.llm import openai_backend
from rca.llm.base import LLMError
from rca.llm.factory import open_backend
from rca.llm.openai_backend import OpenAIBackend, schema_instruction
from rca.settings import LLMSettings, Settings

SCHEMA = {
    "type": "object",
    "properties": {"component": {"type": "string", "enum": ["checkoutservice", "tidb-pd"]}},
    "required": ["component"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "system", "content": "You are an SRE."}, {"role": "user", "content": "Which component?"}]


@dataclass
class Scripted:
    """One scripted reply: HTTP status, and seconds to stall before answering."""

    status: int = 200
    delay_s: float = 0.0


@dataclass
class FakeOpenAI:
    url: str
    script: list[Scripted] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    answer: str = '{"component": "checkoutservice"}'
    top_logprobs: list[tuple[str, float]] | None = None  # returned when a request asks for logprobs


def _logprobs(top: list[tuple[str, float]]) -> dict[str, Any]:
    entries = [{"token": token, "logprob": lp, "bytes": list(token.encode())} for token, lp in top]
    return {"content": [{**entries[0], "top_logprobs": entries}]}


def _completion(answer: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 123, "completion_tokens": 7, "total_tokens": 130},
    }


@pytest.fixture
def llm_fake_server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.requests.append(body)
            step = fake.script.pop(0) if fake.script else Scripted()
            if step.delay_s:
                time.sleep(step.delay_s)
            if step.status == 200:
                completion = _completion(fake.answer)
                if body.get("logprobs") and fake.top_logprobs:
                    completion["choices"][0]["logprobs"] = _logprobs(fake.top_logprobs)
                    completion["choices"][0]["finish_reason"] = "length"  # as llama.cpp says after max_tokens=1
                payload = json.dumps(completion).encode()
            else:
                payload = json.dumps({"error": {"message": f"scripted {step.status}"}}).encode()
            try:
                self.send_response(step.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield fake
    server.shutdown()
    server.server_close()


@pytest.fixture
def llm_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Backoff delays the backend asked for, without actually waiting."""
    delays: list[float] = []
    monkeypatch.setattr(openai_backend, "_wait", delays.append)
    return delays


def _backend(url: str, **kwargs: Any) -> OpenAIBackend:
    params: dict[str, Any] = dict(base_url=url, api_key="EMPTY", model="fake-model", timeout_s=5.0,
                                  max_retries=2, backoff_initial_s=0.01)
    params.update(kwargs)
    return OpenAIBackend(**params)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_success_records_usage_and_latency(llm_fake_server: FakeOpenAI) -> None:
    backend = _backend(llm_fake_server.url)
    reply = backend.chat(MESSAGES, json_schema=SCHEMA)
    backend.close()
    assert json.loads(reply.text) == {"component": "checkoutservice"}
    assert (reply.prompt_tokens, reply.completion_tokens) == (123, 7)
    assert reply.model == "fake-model"
    assert reply.finish_reason == "stop"
    assert reply.latency_s > 0
    assert reply.extra["attempts"] == 1


def test_json_schema_mode_sends_strict_response_format(llm_fake_server: FakeOpenAI) -> None:
    _backend(llm_fake_server.url, response_format="json_schema").chat(MESSAGES, json_schema=SCHEMA, schema_name="rca")
    sent = llm_fake_server.requests[0]
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "rca", "schema": SCHEMA, "strict": True},
    }
    assert sent["messages"] == MESSAGES  # prompt untouched


@pytest.mark.parametrize(
    "messages",
    [MESSAGES, [{"role": "user", "content": "Which component?"}]],
    ids=["with-system-message", "without-system-message"],
)
def test_json_object_mode_puts_schema_in_prompt(llm_fake_server: FakeOpenAI, messages: list[dict[str, str]]) -> None:
    original = copy.deepcopy(messages)
    _backend(llm_fake_server.url, response_format="json_object").chat(messages, json_schema=SCHEMA)
    sent = llm_fake_server.requests[0]
    assert sent["response_format"] == {"type": "json_object"}
    system = sent["messages"][0]
    assert system["role"] == "system"
    assert schema_instruction(SCHEMA) in system["content"]
    assert '"checkoutservice"' in system["content"]
    assert sent["messages"][-1] == original[-1]
    assert len(sent["messages"]) == 2
    assert messages == original  # the caller's list is not mutated


def test_no_schema_sends_no_response_format(llm_fake_server: FakeOpenAI) -> None:
    _backend(llm_fake_server.url).chat(MESSAGES, temperature=0.7, max_tokens=9, seed=5)
    sent = llm_fake_server.requests[0]
    assert "response_format" not in sent
    assert (sent["temperature"], sent["max_tokens"], sent["seed"]) == (0.7, 9, 5)


@pytest.mark.parametrize("status", [503, 500, 429])
def test_transient_status_is_retried_then_succeeds(
    llm_fake_server: FakeOpenAI, llm_sleeps: list[float], status: int
) -> None:
    llm_fake_server.script = [Scripted(status=status), Scripted(status=status)]
    reply = _backend(llm_fake_server.url, max_retries=2).chat(MESSAGES, json_schema=SCHEMA)
    assert reply.extra["attempts"] == 3
    assert len(llm_fake_server.requests) == 3
    assert llm_sleeps == [0.01, 0.02]  # exponential backoff


def test_client_error_is_not_retried(llm_fake_server: FakeOpenAI, llm_sleeps: list[float]) -> None:
    llm_fake_server.script = [Scripted(status=400)]
    with pytest.raises(LLMError, match="rejected the request: HTTP 400"):
        _backend(llm_fake_server.url).chat(MESSAGES)
    assert len(llm_fake_server.requests) == 1
    assert llm_sleeps == []


def test_persistent_5xx_gives_llm_error_after_all_attempts(llm_fake_server: FakeOpenAI, llm_sleeps: list[float]) -> None:
    llm_fake_server.script = [Scripted(status=503)] * 4
    with pytest.raises(LLMError, match=r"failed after 4 attempts: HTTP 503"):
        _backend(llm_fake_server.url, max_retries=3).chat(MESSAGES)
    assert llm_sleeps == [0.01, 0.02, 0.04]


def test_timeout_gives_llm_error_after_n_attempts(llm_fake_server: FakeOpenAI, llm_sleeps: list[float]) -> None:
    llm_fake_server.script = [Scripted(delay_s=1.0), Scripted(delay_s=1.0)]
    with pytest.raises(LLMError, match=r"failed after 2 attempts: timed out"):
        _backend(llm_fake_server.url, timeout_s=0.2, max_retries=1).chat(MESSAGES)
    assert len(llm_fake_server.requests) == 2
    assert llm_sleeps == [0.01]


def test_unreachable_endpoint_names_url_and_attempts(llm_sleeps: list[float]) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    with pytest.raises(LLMError) as caught:
        _backend(url, max_retries=2, backoff_initial_s=0.5, backoff_max_s=0.6).chat(MESSAGES)
    assert url in str(caught.value)
    assert "failed after 3 attempts: unreachable" in str(caught.value)
    assert llm_sleeps == [0.5, 0.6]  # capped at backoff_max_s


def test_open_backend_with_openai_settings(llm_fake_server: FakeOpenAI) -> None:
    settings = Settings(llm=LLMSettings(backend="openai", openai_api_base=llm_fake_server.url, llm_model="fake-model"))
    with open_backend(settings) as llm:
        replies = [llm.chat(MESSAGES, json_schema=SCHEMA) for _ in range(2)]
    assert sum(r.prompt_tokens for r in replies) == 246
    assert sum(r.completion_tokens for r in replies) == 14
    assert all(r.latency_s > 0 for r in replies)


@pytest.mark.parametrize(
    ("llm_settings", "setting_named"),
    [
        (LLMSettings(backend="openai", llm_model="m"), "llm.openai_api_base"),
        (LLMSettings(backend="openai", openai_api_base="http://127.0.0.1:9/v1"), "llm.llm_model"),
    ],
)
def test_openai_config_errors_name_the_setting(llm_settings: LLMSettings, setting_named: str) -> None:
    with pytest.raises(LLMError, match=setting_named.replace(".", r"\.")):
        with open_backend(Settings(llm=llm_settings)):
            pass


def test_next_token_logprobs_asks_for_one_token_and_keeps_each_tokens_best(
        llm_fake_server: FakeOpenAI, caplog: pytest.LogCaptureFixture) -> None:
    llm_fake_server.answer = "B"
    llm_fake_server.top_logprobs = [("B", -0.1), ("A", -2.5), (" B", -3.0), ("B", -9.0)]
    reply, found = _backend(llm_fake_server.url).next_token_logprobs(MESSAGES, top=5)
    sent = llm_fake_server.requests[0]
    assert (sent["max_tokens"], sent["logprobs"], sent["top_logprobs"], sent["temperature"]) == (1, True, 5, 0.0)
    assert "response_format" not in sent
    assert reply.text == "B"
    assert found == {"B": -0.1, "A": -2.5, " B": -3.0}
    assert "truncated" not in caplog.text  # one token is the whole reply asked for


def test_next_token_logprobs_without_logprobs_is_an_error(llm_fake_server: FakeOpenAI) -> None:
    with pytest.raises(LLMError, match="returned no logprobs"):
        _backend(llm_fake_server.url).next_token_logprobs(MESSAGES)
