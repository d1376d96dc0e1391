"""Command line of the judge: ``rca judge rca`` (challenge rules), ``rca judge qa`` and the
standalone ``judge`` console script (QA judge, ``qa_main``)."""
from __future__ import annotations

import logging
from pathlib import Path

import typer
from rich.console import Console

from judge.groundtruth import InputFileError
from rca.clisupport import build_settings, fail
from rca.settings import Settings

log = logging.getLogger(__name__)

app = typer.Typer(
    no_args_is_help=True,
    help="Score result files: challenge rules (rca) or the keyword + similarity QA judge (qa).",
)

_DIR_HELP = "Directory holding the QA files."
_REF_HELP = "Reference answers (relative paths are inside DIR)."
_ANS_HELP = "Answers to score (relative paths are inside DIR)."
_OUT_HELP = "Write the JSON report here."
_CACHE_HELP = "Keyword cache directory (default: <paths.cache_dir>/judge)."


@app.command("rca")
def rca_command(
    ctx: typer.Context,
    gt: Path = typer.Option(..., "--gt", help="Ground truth JSONL (groundtruth.jsonl)."),
    pred: Path = typer.Option(..., "--pred", help="Submission JSONL to score."),
    rules: str | None = typer.Option(None, "--rules", help="Rule version: early | late (default: [challenge] rules)."),
    threshold: float | None = typer.Option(None, "--threshold", help="Semantic reason threshold (default: settings.judge.semantic_threshold)."),
    keyword_only: bool = typer.Option(False, "--keyword-only", help="Skip the semantic reason step (no embedding model)."),
    output: Path | None = typer.Option(None, "--output", "-o", help=_OUT_HELP),
) -> None:
    """Score a submission with the 2025 challenge rules; exits 1 when its format is invalid."""
    settings = build_settings(ctx, {"challenge": {"rules": rules}, "judge": {"semantic_threshold": threshold}})
    from judge.challenge import score_challenge
    from judge.groundtruth import load_truth
    from judge.render import print_challenge, write_json_atomic
    from judge.validation import check_submission_file
    from rca.challenge import rule_version

    version = rule_version(settings.challenge.rules)
    try:
        truth = load_truth(gt)
        check = check_submission_file(pred, truth_uuids=[c.uuid for c in truth], rules=version)
    except InputFileError as exc:
        fail(str(exc))
    embedder = None if keyword_only else _load_embedder(settings)
    report = score_challenge(truth, check, rules=version, embedder=embedder,
                             semantic_threshold=settings.judge.semantic_threshold)
    print_challenge(report, Console())
    if output is not None:
        write_json_atomic(output, report.to_json())
        log.info("report written to %s", output)
    if not report.valid:
        raise typer.Exit(1)


def _load_embedder(settings: Settings):
    from knowledge.embedding import EmbeddingModelError, load_embedder

    try:
        return load_embedder(settings.embedding)
    except EmbeddingModelError as exc:
        fail(f"embedding model: {exc}")


def _run_qa(settings: Settings, *, directory: Path, reference: Path, answers: Path,
            output: Path | None, cache_dir: Path | None) -> None:
    from judge.qa import (
        KeywordCache,
        QAError,
        evaluation_model_id,
        fill_keyword_cache,
        load_qa_file,
        score_qa,
        uncached_references,
    )
    from judge.render import print_qa, write_json_atomic
    from rca.llm.base import LLMError

    if not directory.is_dir():
        fail(f"{directory}: not a directory")
    cache_path = (cache_dir or settings.paths.cache_dir / "judge") / "qa_keywords.json"
    try:
        references = load_qa_file(directory / reference)
        candidates = load_qa_file(directory / answers)
        cache = KeywordCache(cache_path, model_id=evaluation_model_id(settings.llm))
        if uncached_references(references, cache):
            # The evaluation model starts only when some reference is not cached yet.
            from rca.llm.factory import open_backend

            with open_backend(settings) as llm:
                fill_keyword_cache(references, cache=cache, llm=llm)
        report = score_qa(
            references, candidates, cache=cache, embedder=_load_embedder(settings),
            keyword_weight=settings.judge.keyword_weight, similarity_weight=settings.judge.similarity_weight,
        )
    except (InputFileError, QAError, LLMError) as exc:
        fail(str(exc))
    print_qa(report, Console())
    if output is not None:
        write_json_atomic(output, report.to_json())
        log.info("report written to %s", output)


@app.command("qa")
def qa_command(
    ctx: typer.Context,
    directory: Path = typer.Option(..., "--dir", "-d", help=_DIR_HELP),
    reference: Path = typer.Option(Path("ground_truth.jsonl"), "--reference", "-r", help=_REF_HELP),
    answers: Path = typer.Option(Path("result.jsonl"), "--answers", "-a", help=_ANS_HELP),
    output: Path | None = typer.Option(None, "--output", "-o", help=_OUT_HELP),
    cache_dir: Path | None = typer.Option(None, "--cache-dir", help=_CACHE_HELP),
) -> None:
    """Score answers against reference answers: 0.6 x keyword hits + 0.4 x embedding similarity
    (the ``judge`` console script is this command)."""
    _run_qa(build_settings(ctx), directory=directory, reference=reference, answers=answers,
            output=output, cache_dir=cache_dir)


def _register_server() -> None:
    from judge.server.cli import register

    register(app)


_register_server()
