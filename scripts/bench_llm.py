"""Benchmark the embedded model: load time, prefill/generation speed, prefix-cache effect, RSS.

    .venv/bin/python scripts/bench_llm.py --model 0.5b      # or 1.5b (the default model)

Two calls share a ~2k-token evidence prefix and differ only in the final question, the way
the diagnoser asks; the second shows what llama.cpp's prompt cache saves. Figures only:
speed depends on what else runs on the machine, so nothing here asserts a target.
"""
from __future__ import annotations

import argparse
import json
import logging
import time

import psutil

from rca.llm.factory import build_backend, model_cache_dir
from rca.llm.models import ensure_model, model_spec
from rca.settings import EmbeddedModel, LLMSettings, Settings

MODEL_NAMES: dict[str, EmbeddedModel] = {"0.5b": "qwen2.5-coder-0.5b", "1.5b": "qwen2.5-coder-1.5b"}
SERVICES = ["frontend", "cartservice", "checkoutservice", "currencyservice", "emailservice",
            "paymentservice", "productcatalogservice", "recommendationservice", "shippingservice", "adservice"]
SCHEMA = {
    "type": "object",
    "properties": {
        "component": {"type": "string", "enum": SERVICES},
        "reason": {"type": "string", "maxLength": 120},
    },
    "required": ["component", "reason"],
    "additionalProperties": False,
}


def evidence_prompt(approx_tokens: int) -> str:
    """Synthetic evidence lines (~32 tokens each with the Qwen tokenizer) in the diagnoser's style."""
    lines = []
    for i in range(approx_tokens // 32):
        service = SERVICES[i % len(SERVICES)]
        lines.append(f"- {service}-{i % 3}: metric rrt p99 {100 + i * 7} ms vs baseline {90 + i % 13} ms; "
                     f"log template E{i % 17} x{i % 9 + 1}")
    return "Evidence for the incident window:\n" + "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODEL_NAMES), default="1.5b")
    parser.add_argument("--prompt-tokens", type=int, default=2000)
    parser.add_argument("--max-tokens", type=int, default=60)
    parser.add_argument("--threads", type=int, default=psutil.cpu_count() or 2)
    parser.add_argument("--n-ctx", type=int, default=4096)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    settings = Settings(llm=LLMSettings(
        embedded_model=MODEL_NAMES[args.model], threads=args.threads, n_ctx=args.n_ctx, max_tokens=args.max_tokens,
    ))
    process = psutil.Process()
    figures: dict[str, object] = {"model": settings.llm.embedded_model, "threads": args.threads}

    started = time.perf_counter()
    ensure_model(model_spec(settings.llm.embedded_model), cache_dir=model_cache_dir(settings))
    figures["ensure_model_s"] = round(time.perf_counter() - started, 2)

    started = time.perf_counter()
    llm = build_backend(settings)
    try:
        figures["load_s"] = round(time.perf_counter() - started, 2)
        prefix = [{"role": "system", "content": "You are an SRE. Pick the root-cause component."},
                  {"role": "user", "content": evidence_prompt(args.prompt_tokens)}]
        for label, question in (("first_call", "Which component is the root cause?"),
                                ("same_prefix_call", "Which single component failed first?")):
            messages = prefix[:1] + [{"role": "user", "content": prefix[1]["content"] + "\n\n" + question}]
            reply = llm.chat(messages, json_schema=SCHEMA)
            timings = reply.extra.get("server_timings", {})
            figures[label] = {
                "seconds": round(reply.latency_s, 2),
                "prompt_tokens": reply.prompt_tokens,
                "prompt_tokens_evaluated": timings.get("prompt_n"),
                "prompt_tokens_from_cache": timings.get("cache_n"),
                "completion_tokens": reply.completion_tokens,
                "prefill_tok_s": round(timings.get("prompt_per_second", 0.0), 1),
                "generate_tok_s": round(timings.get("predicted_per_second", 0.0), 1),
                "valid_json": _is_json(reply.text),
            }
        figures["rss_gb"] = round(process.memory_info().rss / 1e9, 2)
    finally:
        llm.close()
    print(json.dumps(figures, indent=2))


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


if __name__ == "__main__":
    main()
