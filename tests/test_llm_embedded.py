"""The embedded llama.cpp backend: the one-model guard, load errors, and a real 0.5B model run."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rca.llm import embedded
from rca.llm.base import LLMError
from rca.llm.embedded import EmbeddedBackend
from rca.llm.factory import model_cache_dir, open_backend
from rca.llm.models import ensure_model, model_spec
from rca.settings import LLMSettings, Settings


def _open(model_path: Path) -> EmbeddedBackend:
    return EmbeddedBackend(model_path=model_path, model_name="m", n_ctx=512, threads=1)


def test_missing_model_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(LLMError, match=r"embedded model file .*nothing\.gguf does not exist"):
        _open(tmp_path / "nothing.gguf")


def test_second_model_in_process_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    # Pretend a model is open, without paying for loading one.
    assert embedded._ONE_MODEL_PER_PROCESS.acquire(blocking=False)
    try:
        with pytest.raises(LLMError, match="already loaded in this process"):
            _open(model)
    finally:
        embedded._ONE_MODEL_PER_PROCESS.release()


def test_unloadable_file_is_an_error_and_releases_the_guard(tmp_path: Path) -> None:
    model = tmp_path / "garbage.gguf"
    model.write_bytes(b"this is not a gguf file" * 100)
    with pytest.raises(LLMError, match="could not load"):
        _open(model)
    assert embedded._ONE_MODEL_PER_PROCESS.acquire(blocking=False)  # free again
    embedded._ONE_MODEL_PER_PROCESS.release()


ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "component": {"type": "string", "enum": ["checkoutservice", "cartservice", "tidb-pd"]},
        "reason": {"type": "string", "enum": ["network delay", "cpu stress", "pod failure"]},
    },
    "required": ["component", "reason"],
    "additionalProperties": False,
}


@pytest.mark.slow
def test_real_small_model_answers_schema_valid_json() -> None:
    # Uses the real cache dir: the 0.5B model is assembled there once and reused.
    settings = Settings(llm=LLMSettings(embedded_model="qwen2.5-coder-0.5b", n_ctx=1024, max_tokens=60))
    with open_backend(settings) as llm:
        assert llm.name == "embedded"
        with pytest.raises(LLMError, match="already loaded"):
            with open_backend(settings):
                pass
        reply = llm.chat(
            [
                {"role": "system", "content": "You are an SRE. Answer in JSON."},
                {"role": "user", "content": "checkoutservice p99 latency rose 40x, network packets delayed. "
                                            "Which component and reason?"},
            ],
            json_schema=ANSWER_SCHEMA,
        )
        _, first_tokens = llm.next_token_logprobs(
            [{"role": "system", "content": "Answer with one letter."},
             {"role": "user", "content": "Which of these is a fruit?\nA) car\nB) apple\nC) rock\nAnswer:"}], top=5)
    answer = json.loads(reply.text)
    assert answer["component"] in ANSWER_SCHEMA["properties"]["component"]["enum"]
    assert answer["reason"] in ANSWER_SCHEMA["properties"]["reason"]["enum"]
    assert set(answer) == {"component", "reason"}
    assert reply.prompt_tokens > 10 and reply.completion_tokens > 0
    assert len(first_tokens) == 5 and all(lp <= 0 for lp in first_tokens.values())
    # A real distribution over the options: the three letters hold most of the mass. (Which letter
    # wins is the model's business; the 0.5B model leans to the first, which is why options are scored
    # in more than one order: scripts/probe_option_scores.py.)
    assert sum(math.exp(first_tokens.get(letter, -math.inf)) for letter in "ABC") > 0.5
    with pytest.raises(LLMError, match="closed"):
        llm.chat([{"role": "user", "content": "hi"}])


@pytest.mark.slow
def test_the_prompt_prefix_is_saved_and_restored_by_the_next_run(tmp_path: Path) -> None:
    """A new process's first call reuses the static prefix the previous run evaluated: the file is
    saved after the first call, restored into the slot at the next start, and a prompt that
    shares the prefix evaluates only its own tail."""
    settings = Settings(llm=LLMSettings(embedded_model="qwen2.5-coder-0.5b", n_ctx=1024, max_tokens=4))
    model_path = ensure_model(model_spec("qwen2.5-coder-0.5b"), cache_dir=model_cache_dir(settings))
    system = {"role": "system", "content": "You are an SRE. " + "Faults propagate up the call graph. " * 40}
    cache = tmp_path / "prefix-cache"

    def run(question: str) -> tuple[EmbeddedBackend, int, int]:
        backend = EmbeddedBackend(model_path=model_path, model_name="small", n_ctx=1024, threads=2, max_tokens=4,
                                  prefix_cache_dir=cache)
        try:
            reply = backend.chat([system, {"role": "user", "content": question}])
        finally:
            backend.close()
        assert reply.server_timings is not None
        return backend, reply.server_timings.prompt_evaluated, reply.server_timings.prompt_cached

    first, evaluated, cached = run("Which component failed first?")
    assert first.prefix_restored == 0 and cached == 0 and evaluated > 300
    assert [p.name for p in cache.iterdir()] == ["small.prefix-kv"]  # saved whole, no temporary left
    second, evaluated, cached = run("Which fault type is it?")
    assert second.prefix_restored > 300
    assert cached > 300 and evaluated < 30  # only the new question and the chat template's tail
    # A file this llama.cpp cannot read is reported, the run goes on cold and saves a good one.
    (cache / "small.prefix-kv").write_bytes(b"not a llama.cpp state file")
    third, evaluated, cached = run("Which component failed first?")
    assert third.prefix_restored == 0 and cached == 0 and evaluated > 300
    assert (cache / "small.prefix-kv").stat().st_size > 1000
