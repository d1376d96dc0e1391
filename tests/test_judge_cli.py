"""The judge commands: clean errors, exit codes, JSON reports (fake embedder, no LLM)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import judge.cli as judge_cli
from judge.qa import KeywordCache

runner = CliRunner()
TRUTH = {"uuid": "u1", "fault_type": "pod failure", "instance_type": "service", "instance": "cartservice",
         "key_observations": [{"type": "log", "keyword": ["Connection refused"]}],
         "key_metrics": ["client_error"], "fault_description": ["pod crash"]}
ANSWER = {"uuid": "u1", "component": "cartservice", "reason": "client_error spike, pod failure",
          "time": "2025-06-05 16:10:02",
          "reasoning_trace": [{"step": 1, "action": "LogSearch", "observation": "Connection refused in logs"}]}


class OnesEmbedder:
    def embed(self, texts):
        return np.ones((len(texts), 4), dtype=np.float32)


@pytest.fixture()
def judge_files(tmp_path: Path) -> tuple[Path, Path]:
    gt, pred = tmp_path / "gt.jsonl", tmp_path / "pred.jsonl"
    gt.write_text(json.dumps(TRUTH) + "\n")
    pred.write_text(json.dumps(ANSWER) + "\n")
    return gt, pred


def test_rca_command_writes_report(judge_files, tmp_path: Path) -> None:
    gt, pred = judge_files
    out = tmp_path / "report.json"
    result = runner.invoke(judge_cli.app, ["rca", "--gt", str(gt), "--pred", str(pred), "--keyword-only", "-o", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["overall"]["la"] == 1.0 and report["overall"]["explainability"] == 1.0
    assert report["overall"]["final"] == pytest.approx(100.0)


def test_rca_command_invalid_format_exits_1(judge_files) -> None:
    gt, pred = judge_files
    result = runner.invoke(judge_cli.app, ["rca", "--gt", str(gt), "--pred", str(pred), "--rules", "late", "--keyword-only"])
    assert result.exit_code == 1
    assert "not allowed by rules late" in result.output


@pytest.mark.parametrize("args", [
    ["rca", "--gt", "/nonexistent/gt.jsonl", "--pred", "/nonexistent/p.jsonl", "--keyword-only"],
    ["qa", "-d", "/nonexistent-dir"],
])
def test_missing_files_fail_cleanly(args) -> None:
    result = runner.invoke(judge_cli.app, args)
    assert result.exit_code == 2
    assert "error:" in result.output and result.exception is not None
    assert isinstance(result.exception, SystemExit)  # typer.Exit, not a traceback


def test_qa_command_with_cached_keywords(tmp_path: Path, monkeypatch) -> None:
    rows = [{"id": 1, "query": "q", "answer": "pod failure of cartservice"}]
    (tmp_path / "ground_truth.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "result.jsonl").write_text(json.dumps({"id": 1, "query": "q", "answer": "cartservice died", "label": 1}) + "\n")
    cache_dir = tmp_path / "cache"
    monkeypatch.setattr(judge_cli, "_load_embedder", lambda settings: OnesEmbedder())
    from judge.qa import evaluation_model_id
    from rca.settings import load_settings

    model_id = evaluation_model_id(load_settings().llm)  # as the command builds it
    KeywordCache(cache_dir / "qa_keywords.json", model_id=model_id).put(
        rows[0]["answer"], ["pod failure", "cartservice"], dropped=[])
    out = tmp_path / "qa.json"
    result = runner.invoke(judge_cli.app, ["qa", "-d", str(tmp_path), "--cache-dir", str(cache_dir), "-o", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["score"] == pytest.approx(0.6 * 0.5 + 0.4 * 1.0)
