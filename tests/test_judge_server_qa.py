"""A QA-kind contest: keywords fixed at creation (from the keyword cache, so no LLM starts here), answers
scored by the server with the real embedding model exactly as `rca judge qa` scores them."""
from __future__ import annotations

import json
from datetime import UTC, datetime

import typer
from typer.testing import CliRunner

from judge.cli import app as judge_app
from judge.qa import KeywordCache, evaluation_model_id, load_qa_file, score_qa
from judge.server.app import create_app
from judge.server.store import add_team, open_database
from judge.server.worker import ScoringWorker
from knowledge.embedding import load_embedder
from rca.clisupport import root_callback
from rca.settings import EmbeddingSettings, JudgeSettings, LLMSettings
from tests.judge_server_support import HTTP, REPO, ManualClock, serve_app, server_settings, wait_until_scored

PLAYGROUND = REPO / "judge" / "playground"


def test_qa_contest_scores_like_the_library(tmp_path) -> None:
    references = load_qa_file(PLAYGROUND / "ground_truth.jsonl")
    cache = KeywordCache(tmp_path / "cache" / "qa_keywords.json", model_id=evaluation_model_id(LLMSettings()))
    for record in references:  # what the evaluation LLM would have extracted: words of the reference
        cache.put(record.answer, record.answer.split()[2:6], dropped=[])
    db = f"sqlite:///{tmp_path / 'qa.sqlite'}"
    cli = typer.Typer()
    cli.callback()(root_callback)
    cli.add_typer(judge_app, name="judge")
    created = CliRunner().invoke(cli, ["-q", "judge", "contest", "create", "--name", "qa", "--kind", "qa", "--gt",
                                       str(PLAYGROUND / "ground_truth.jsonl"), "--cache-dir", str(tmp_path / "cache"),
                                       "--db", db])
    assert created.exit_code == 0, created.output
    assert json.loads(created.stdout) == {"contest": "qa", "kind": "qa", "rules": "qa", "cases": len(references)}

    engine = open_database(db)
    ticket = add_team(engine, contest="qa", name="readers", now=datetime.now(UTC))
    clock = ManualClock(datetime(2025, 6, 1, tzinfo=UTC))
    settings = server_settings()
    worker = ScoringWorker(engine, server=settings, judge=JudgeSettings(), clock=clock,
                           embedder_factory=lambda: load_embedder(EmbeddingSettings()))
    answers = [{"id": r.id, "query": r.query, "answer": r.answer}
               for r in load_qa_file(PLAYGROUND / "result.jsonl")]
    headers = {"ticket": ticket, "contest": "qa", "Content-Type": "application/json"}
    with serve_app(create_app(engine, settings=settings, worker=worker, clock=clock)) as url:
        labelled = [dict(a, label=1) for a in answers]
        response = HTTP.post(url + "/", content=json.dumps({"data": labelled}).encode(), headers=headers)
        assert (response.status_code, response.json()["detail"]) == (400, "Invalid submission format")
        response = HTTP.post(url + "/", content=json.dumps({"data": answers[:-1]}).encode(), headers=headers)
        assert (response.status_code, response.json()["detail"]) == (400, "Submission length mismatch")
        response = HTTP.post(url + "/", content=json.dumps({"data": answers}).encode(), headers=headers)
        assert response.status_code == 200
        wait_until_scored(url, timeout=120)
        status = HTTP.get(url + "/status", headers={**headers, "submission": response.json()["submission_id"]}).json()
        listed = HTTP.get(url + "/api/submissions", headers=headers).json()["submissions"]
    engine.dispose()
    expected = score_qa(references, load_qa_file(PLAYGROUND / "result.jsonl"), cache=cache,
                        embedder=load_embedder(EmbeddingSettings()), keyword_weight=0.6, similarity_weight=0.4)
    assert status["status"] == "done" and status["score"] == expected.score
    assert "per_question" not in listed[0]["summary"]  # the reference keywords stay on the server
