"""The persistent Chroma collection of SOP chunks and its incremental reindexing.

Each document becomes several chunks: a header chunk (title, fault type, key metrics,
log and trace signatures, reason) and one chunk per ``## `` section, each prefixed
with the title so it stands on its own. Every chunk carries its document's content
hash; reindexing embeds only documents whose hash changed, deletes chunks of removed
documents and leaves the rest alone.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import chromadb
from chromadb.config import Settings as ChromaSettings

from knowledge.documents import SopDocument
from knowledge.embedding import ChromaEmbeddingFunction, Embedder

log = logging.getLogger(__name__)

# Bump when chunking changes so that every document is re-embedded once.
CHUNKER_VERSION = "2"
# Sections describing *other* faults (look-alikes) are returned with the document but not
# embedded: their wording would pull queries about those other faults to this document.
# Mitigation sections are for acting agents (bench/), not evidence: kept out of retrieval too.
UNINDEXED_SECTION_PREFIXES = ("look-alike", "mitigation")


@dataclass(frozen=True)
class Chunk:
    chunk_id: str
    text: str
    metadata: dict[str, str | int]


@dataclass
class ReindexReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    chunks_embedded: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)


def document_chunks(document: SopDocument, *, index_hash: str) -> list[Chunk]:
    """The chunks indexed for one document."""
    meta = document.meta
    base = {"doc_id": meta.id, "doc_hash": index_hash, "kind": meta.kind,
            "fault_type": meta.fault_type or "", "title": meta.title}
    header_lines = [meta.title]
    if meta.fault_type:
        header_lines.append(f"Fault type: {meta.fault_type} ({meta.fault_category}); levels: {', '.join(meta.levels)}.")
    if meta.key_metrics:
        header_lines.append(f"Key metrics: {', '.join(meta.key_metrics)}.")
    if meta.log_keywords:
        header_lines.append(f"Log signatures: {'; '.join(meta.log_keywords)}.")
    if meta.trace_signatures:
        header_lines.append(f"Trace signatures: {'; '.join(meta.trace_signatures)}.")
    if meta.tags:
        header_lines.append(f"Also known as: {', '.join(meta.tags)}.")
    if meta.reason_template:
        header_lines.append(f"Reason: {meta.reason_template}")
    chunks = [Chunk(f"{meta.id}#0", "\n".join(header_lines), {**base, "section": "header", "position": 0})]
    for position, section in enumerate(document.sections, start=1):
        if section.heading.lower().startswith(UNINDEXED_SECTION_PREFIXES):
            continue
        text = f"{meta.title} - {section.heading}\n{section.text}"
        chunks.append(Chunk(f"{meta.id}#{position}", text, {**base, "section": section.heading, "position": position}))
    return chunks


def open_client(kb_dir: Path) -> chromadb.ClientAPI:
    """The persistent Chroma client of a store directory (created if missing), telemetry off."""
    kb_dir.mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(kb_dir.resolve()),
                                     settings=ChromaSettings(anonymized_telemetry=False, allow_reset=False))


def open_collection(client: chromadb.ClientAPI, *, name: str, embedder: Embedder) -> chromadb.Collection:
    """The SOP collection (cosine space, our offline embedding function), created if missing."""
    return client.get_or_create_collection(
        name=name,
        # chromadb types the function over text-or-image inputs; ours embeds text only.
        embedding_function=ChromaEmbeddingFunction(embedder),  # type: ignore[arg-type]
        configuration={"hnsw": {"space": "cosine"}},
    )


def _index_hash(document: SopDocument, *, model: str) -> str:
    # The stored hash covers the model and the chunker as well as the text, so that
    # changing either re-embeds everything instead of mixing incompatible vectors.
    return f"{model}:{CHUNKER_VERSION}:{document.content_hash}"


def indexed_hashes(collection: chromadb.Collection) -> dict[str, str]:
    """doc_id -> stored hash of what is in the collection now."""
    stored = collection.get(include=["metadatas"])
    hashes: dict[str, str] = {}
    for metadata in stored["metadatas"] or []:
        hashes[str(metadata["doc_id"])] = str(metadata["doc_hash"])
    return hashes


def reindex(collection: chromadb.Collection, *, documents: list[SopDocument], embedder: Embedder) -> ReindexReport:
    """Bring the collection in line with ``documents``; embeds only what changed."""
    stored = indexed_hashes(collection)
    report = ReindexReport()
    current_ids = {document.id for document in documents}

    for doc_id in sorted(set(stored) - current_ids):
        collection.delete(where={"doc_id": doc_id})
        report.removed.append(doc_id)

    for document in documents:
        index_hash = _index_hash(document, model=embedder.name)
        previous = stored.get(document.id)
        if previous == index_hash:
            report.unchanged.append(document.id)
            continue
        if previous is not None:
            # Delete first: the new version may have fewer sections than the old one.
            collection.delete(where={"doc_id": document.id})
        chunks = document_chunks(document, index_hash=index_hash)
        vectors = embedder.embed([chunk.text for chunk in chunks])
        # upsert, not add: a concurrent reindex of the same directory must not fail on duplicate ids.
        collection.upsert(
            ids=[chunk.chunk_id for chunk in chunks],
            documents=[chunk.text for chunk in chunks],
            metadatas=[chunk.metadata for chunk in chunks],
            embeddings=vectors,
        )
        report.chunks_embedded += len(chunks)
        (report.updated if previous is not None else report.added).append(document.id)
    if report.changed:
        log.info("knowledge index: %d added, %d updated, %d removed, %d unchanged (%d chunks embedded)",
                 len(report.added), len(report.updated), len(report.removed), len(report.unchanged),
                 report.chunks_embedded)
    return report
