"""What the diagnoser asks of the knowledge base: relevant SOPs and the fault catalogue.

``search`` embeds an evidence summary, scores every chunk of the collection and returns
whole documents ranked by their best chunks. ``fault_catalogue`` gives one entry per fault
type for the static prompt part. ``knowledge.base.KnowledgeBase`` holds what these need.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import chromadb
from pydantic import BaseModel, ConfigDict

from knowledge.documents import DocumentError, FrontMatter, SopDocument
from knowledge.embedding import Embedder
from knowledge.signatures import Signal, parse_signals
from rca.taxonomy import FAULT_TYPES

log = logging.getLogger(__name__)

# Document score = mean cosine of its best two chunks (a document that matches in two
# places beats one that matches a single sentence), plus a small bonus for each of its
# KPI names or log signatures quoted verbatim in the query (exact names matter in RCA).
# Tuned on tests/test_kb_queries.json: top-3 0.96 -> 0.98, top-1 0.78 -> 0.89.
_BEST_CHUNKS = 2
_LEXICAL_BONUS = 0.03
_LEXICAL_MAX_MATCHES = 4


class RetrievedDoc(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    title: str
    kind: str
    fault_type: str | None
    score: float  # mean cosine of the two best chunks plus the lexical bonus (see above)
    best_section: str
    text: str  # the document body (markdown, without front matter)
    excerpt: str  # the best-matching section on one line (the whole body for the header chunk)
    key_metrics: list[str]
    reason_template: str | None


class CatalogueEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    fault_type: str
    fault_category: str
    levels: list[str]
    key_metrics: list[str]
    reason_template: str



def search(collection: chromadb.Collection, embedder: Embedder, documents: Mapping[str, SopDocument],
           summary: str, *, hints: Sequence[str] = (), k: int = 3) -> list[RetrievedDoc]:
    """The ``k`` documents most relevant to an evidence summary, best first.

    ``hints`` (component kinds, KPI names, suspected fault types) are appended to the
    query text. ``documents`` (by id) must be what the collection was indexed from.
    """
    if not summary.strip() and not any(h.strip() for h in hints):
        raise ValueError("search() needs a non-empty summary or hints")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    query = summary.strip() if not hints else f"{summary.strip()}\n{'; '.join(hints)}"
    vector = embedder.embed([query])
    # The collection is small (a few hundred chunks): score every chunk, then aggregate.
    result = collection.query(query_embeddings=vector, n_results=collection.count(),
                              include=["metadatas", "distances"])
    chunk_scores: dict[str, list[tuple[float, str]]] = {}
    for metadata, distance in zip((result["metadatas"] or [[]])[0], (result["distances"] or [[]])[0]):
        similarity = 1.0 - float(distance)  # cosine space: distance = 1 - cosine
        chunk_scores.setdefault(str(metadata["doc_id"]), []).append((similarity, str(metadata["section"])))
    scored: list[tuple[float, str, str]] = []
    for doc_id, scores in chunk_scores.items():
        if doc_id not in documents:  # indexed by a concurrent writer after the documents were read
            continue
        scores.sort(reverse=True)
        top = [value for value, _ in scores[:_BEST_CHUNKS]]
        score = sum(top) / len(top) + _lexical_bonus(documents[doc_id].meta, query)
        scored.append((score, doc_id, scores[0][1]))
    scored.sort(reverse=True)
    ranked = [(doc_id, (score, section)) for score, doc_id, section in scored[:k]]
    hits: list[RetrievedDoc] = []
    for doc_id, (score, section) in ranked:
        document = documents[doc_id]
        meta = document.meta
        hits.append(RetrievedDoc(id=doc_id, title=meta.title, kind=meta.kind, fault_type=meta.fault_type,
                                 score=round(score, 4), best_section=section, text=document.body,
                                 excerpt=document.excerpt(section),
                                 key_metrics=list(meta.key_metrics), reason_template=meta.reason_template))
    log.debug("retrieve %r -> %s", query[:80], [(h.id, h.score) for h in hits])
    return hits


def _lexical_bonus(meta: FrontMatter, query: str) -> float:
    lowered = query.lower()
    signatures = [*meta.key_metrics, *meta.log_keywords]
    matches = sum(1 for signature in signatures if signature.lower() in lowered)
    return _LEXICAL_BONUS * min(matches, _LEXICAL_MAX_MATCHES)


def fault_catalogue(documents: Sequence[SopDocument], *, source: str) -> list[CatalogueEntry]:
    """One entry per fault type, in taxonomy order; every fault type must have a document.

    ``source`` (the document directory) names the set in the error.
    """
    by_type = {}
    for document in documents:
        meta = document.meta
        if meta.kind == "fault" and meta.fault_type is not None and meta.fault_type not in by_type:
            by_type[meta.fault_type] = CatalogueEntry(
                fault_type=meta.fault_type, fault_category=meta.fault_category or "",
                levels=list(meta.levels), key_metrics=list(meta.key_metrics),
                reason_template=meta.reason_template or "")
    missing = [name for name in FAULT_TYPES if name not in by_type]
    if missing:
        raise DocumentError(source=source, message=f"no fault document for {missing}")
    return [by_type[name] for name in FAULT_TYPES]


def fault_signatures(documents: Sequence[SopDocument]) -> dict[str, list[Signal]]:
    """The checkable signals of every fault type, from its document's front matter."""
    return {
        document.meta.fault_type: parse_signals(document.meta.signals)
        for document in documents
        if document.meta.kind == "fault" and document.meta.fault_type
    }
