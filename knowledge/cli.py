"""``rca kb``: curate the SOP knowledge base (list, show, validate, add, remove, search, reindex)."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from knowledge.base import KnowledgeBase
from knowledge.documents import DocumentError, docs_dir, load_documents, read_document, validate_directory
from knowledge.store import ReindexReport
from rca.clisupport import build_settings, fail
from rca.errors import RcaError
from rca.settings import Settings

log = logging.getLogger(__name__)


def _reindex(settings: Settings) -> ReindexReport:
    """Open the knowledge base, which brings its collection in line with the documents."""
    with KnowledgeBase.from_settings(settings) as kb:
        return kb.index_report
app = typer.Typer(no_args_is_help=True, help="SOP knowledge base: documents, validation, Chroma index, search.")
console = Console()


@app.command("list")
def list_documents(ctx: typer.Context) -> None:
    """List the documents with their kind, fault type and title."""
    settings = build_settings(ctx)
    try:
        documents = load_documents(docs_dir(settings.knowledge))
    except DocumentError as exc:
        fail(str(exc))
    table = Table("id", "kind", "fault type", "title")
    for document in documents:
        table.add_row(document.id, document.meta.kind, document.meta.fault_type or "", document.meta.title)
    console.print(table)


def _document_path(settings: Settings, doc_id: str) -> Path:
    """The file of an existing document, or a clear error naming the directory."""
    path = docs_dir(settings.knowledge) / f"{doc_id}.md"
    if not path.is_file():
        fail(f"no document with id '{doc_id}' in {docs_dir(settings.knowledge)}")
    return path


@app.command("show")
def show(ctx: typer.Context, doc_id: str = typer.Argument(..., help="Document id (file name without .md).")) -> None:
    """Print one document (front matter and body)."""
    settings = build_settings(ctx)
    path = _document_path(settings, doc_id)
    console.print(path.read_text(encoding="utf-8"), markup=False, highlight=False)


@app.command("validate")
def validate(ctx: typer.Context,
             path: Path | None = typer.Argument(None, help="A document or a directory (default: the document directory).")) -> None:
    """Validate documents; every problem names the file, field and line."""
    settings = build_settings(ctx)
    target = path or docs_dir(settings.knowledge)
    if not target.exists():
        fail(f"{target}: no such file or directory")
    if target.is_dir():
        problems = validate_directory(target)
        count = len(list(target.glob("*.md")))
    else:
        count = 1
        try:
            read_document(target)
            problems = []
        except DocumentError as exc:
            problems = [exc]
    for problem in problems:
        typer.secho(f"invalid: {problem}", err=True, fg="red")
    if problems:
        raise typer.Exit(1)
    typer.echo(f"{count} document(s) valid in {target}")


@app.command("add")
def add(ctx: typer.Context, file: Path = typer.Argument(..., help="Markdown document to add or replace."),
        replace: bool = typer.Option(False, "--replace", help="Overwrite an existing document with the same id.")) -> None:
    """Validate a document, copy it into the document directory and reindex. A failure changes nothing."""
    settings = build_settings(ctx)
    directory = docs_dir(settings.knowledge)
    try:
        document = read_document(file)
    except DocumentError as exc:
        fail(str(exc))
    target = directory / f"{document.id}.md"
    if target.exists() and not replace:
        fail(f"{file}: a document with id '{document.id}' already exists ({target}); use --replace")
    # Validate the directory as it would be after the add, in a scratch copy, before touching it.
    with tempfile.TemporaryDirectory() as scratch:
        for existing in directory.glob("*.md"):
            shutil.copy2(existing, Path(scratch) / existing.name)
        shutil.copy2(file, Path(scratch) / target.name)
        try:
            load_documents(Path(scratch))
        except DocumentError as exc:
            fail(f"adding {file} would break the document set: {exc}")
    previous = target.read_bytes() if target.exists() else None
    staged = directory / f".{target.name}.tmp"
    shutil.copy2(file, staged)
    os.replace(staged, target)
    try:
        report = _reindex(settings)
    except RcaError as exc:
        # Put the directory back as it was; the index catches up on the next reindex.
        if previous is None:
            target.unlink()
        else:
            target.write_bytes(previous)
        fail(f"{file}: added document could not be indexed, nothing changed: {exc}")
    typer.echo(f"added {document.id} -> {target} (embedded {report.chunks_embedded} chunks)")


@app.command("remove")
def remove(ctx: typer.Context, doc_id: str = typer.Argument(..., help="Document id to delete.")) -> None:
    """Delete a document from the directory and its chunks from the index."""
    settings = build_settings(ctx)
    path = _document_path(settings, doc_id)
    path.unlink()
    try:
        report = _reindex(settings)
    except RcaError as exc:
        fail(f"{doc_id} deleted from {docs_dir(settings.knowledge)} but the index was not updated: {exc}")
    typer.echo(f"removed {doc_id} (index: {len(report.removed)} document(s) deleted)")


@app.command("search")
def search(ctx: typer.Context, text: str = typer.Argument(..., help="Evidence summary or question."),
           k: int = typer.Option(3, "-k", "--top-k", min=1, help="Number of documents.")) -> None:
    """Show the documents most relevant to a text."""
    settings = build_settings(ctx)
    try:
        with KnowledgeBase.from_settings(settings) as kb:
            hits = kb.retrieve(text, k=k)
    except RcaError as exc:
        fail(str(exc))
    table = Table("rank", "score", "id", "fault type", "best section")
    for rank, hit in enumerate(hits, start=1):
        table.add_row(str(rank), f"{hit.score:.3f}", hit.id, hit.fault_type or "-", hit.best_section)
    console.print(table)


@app.command("reindex")
def reindex_command(ctx: typer.Context) -> None:
    """Bring the Chroma collection in line with the documents (embeds only what changed)."""
    settings = build_settings(ctx)
    try:
        report = _reindex(settings)
    except RcaError as exc:
        fail(str(exc))
    typer.echo(f"added {len(report.added)}, updated {len(report.updated)}, removed {len(report.removed)}, "
               f"unchanged {len(report.unchanged)}; embedded {report.chunks_embedded} chunks "
               f"into {settings.paths.kb_dir} / {settings.knowledge.collection}")
