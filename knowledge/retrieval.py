"""What the diagnoser asks of the knowledge base: relevant SOPs and the fault catalogue.

``retrieve`` embeds an evidence summary, searches the chunk collection (refreshing it
first if documents changed) and returns whole documents ranked by their best chunk.
``fault_catalogue`` gives one compact line per fault type for the static prompt part.
"""
from __future__ import annotations

import logging
from typing import Sequence

from pydantic import BaseModel, ConfigDict

from knowledge.documents import docs_dir, load_documents
from knowledge.embedding import load_embedder
from knowledge.store import open_collection, reindex
from rca.settings import Settings
from rca.taxonomy import FAULT_TYPES

log = logging.getLogger(__name__)

# Chunks fetched per requested document: documents have ~6 chunks, and several chunks
# of one strong document must not crowd out the runners-up.
_CHUNKS_PER_DOC = 8


class RetrievedDoc(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    title: str
    kind: str
    fault_type: str | None
    score: float  # cosine similarity of the best-matching chunk, in [-1, 1]
    best_section: str
    text: str  # the document body (markdown, without front matter)
    key_metrics: list[str]
    reason_template: str | None


class CatalogueEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    fault_type: str
    fault_category: str
    levels: list[str]
    key_metrics: list[str]
    reason_template: str

    @property
    def line(self) -> str:
        return (f"{self.fault_type} [{'/'.join(self.levels)}] key metrics: {', '.join(self.key_metrics)}"
                f" | reason: {self.reason_template}")


def retrieve(settings: Settings, summary: str, *, hints: Sequence[str] = (), k: int = 3) -> list[RetrievedDoc]:
    """The ``k`` documents most relevant to an evidence summary, best first.

    ``hints`` (component kinds, KPI names, suspected fault types) are appended to the
    query text. The index is refreshed first when documents were added, changed or removed.
    """
    if not summary.strip() and not any(h.strip() for h in hints):
        raise ValueError("retrieve() needs a non-empty summary or hints")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    documents = {document.id: document for document in load_documents(docs_dir(settings))}
    reindex(settings, documents=list(documents.values()))
    collection = open_collection(settings)
    query = summary.strip() if not hints else f"{summary.strip()}\n{'; '.join(hints)}"
    vector = load_embedder(settings.embedding).embed([query])
    n_results = min(collection.count(), k * _CHUNKS_PER_DOC)
    result = collection.query(query_embeddings=vector, n_results=n_results, include=["metadatas", "distances"])

    best: dict[str, tuple[float, str]] = {}
    for metadata, distance in zip(result["metadatas"][0], result["distances"][0]):
        doc_id = str(metadata["doc_id"])
        similarity = 1.0 - float(distance)  # cosine space: distance = 1 - cosine
        if doc_id not in best or similarity > best[doc_id][0]:
            best[doc_id] = (similarity, str(metadata["section"]))
    ranked = sorted(best.items(), key=lambda item: item[1][0], reverse=True)[:k]
    hits: list[RetrievedDoc] = []
    for doc_id, (score, section) in ranked:
        meta = documents[doc_id].meta
        hits.append(RetrievedDoc(id=doc_id, title=meta.title, kind=meta.kind, fault_type=meta.fault_type,
                                 score=round(score, 4), best_section=section, text=documents[doc_id].body,
                                 key_metrics=list(meta.key_metrics), reason_template=meta.reason_template))
    log.debug("retrieve %r -> %s", query[:80], [(h.id, h.score) for h in hits])
    return hits


def fault_catalogue(settings: Settings) -> list[CatalogueEntry]:
    """One entry per fault type, in taxonomy order; every fault type must have a document."""
    by_type = {}
    for document in load_documents(docs_dir(settings)):
        meta = document.meta
        if meta.kind == "fault" and meta.fault_type not in by_type:
            by_type[meta.fault_type] = CatalogueEntry(
                fault_type=meta.fault_type, fault_category=meta.fault_category or "",
                levels=list(meta.levels), key_metrics=list(meta.key_metrics),
                reason_template=meta.reason_template or "")
    missing = [name for name in FAULT_TYPES if name not in by_type]
    if missing:
        raise LookupError(f"{docs_dir(settings)}: no fault document for {missing}")
    return [by_type[name] for name in FAULT_TYPES]
