"""The knowledge base as one object: documents, Chroma collection, embedder, catalogue, signals.

    kb = KnowledgeBase.from_settings(settings)        # reads the documents, brings the index up to date
    kb.catalogue()                                    # one entry per fault type (static prompt part)
    kb.retrieve(summary, hints=[...], k=2)            # the SOPs relevant to an evidence summary
    kb.signature_matches(evidence, fault_types=[...]) # which fault types' signals the evidence fits

Built with the system under diagnosis (``system=``; ``from_settings`` passes the configured one),
the text it hands out for prompts (catalogue, SOP excerpts and titles, key metrics, look-alike
notes) names no component that system lacks: the shipped runbooks describe HipsterShop, and
``knowledge.localize.RunbookText`` renders them for another system. The documents themselves,
their index and ``rca kb`` curation are unchanged.

Everything is loaded once, when the object is opened: the documents are read and validated,
the embedding model is loaded and the collection is brought in line with the documents
(only changed documents are embedded). Retrieval then only embeds the query. A changed
document directory is picked up by opening a new object, or by :meth:`reindex` (which the
``rca kb`` curation commands run). The object owns its Chroma client: ``close()`` (or a
``with`` block) releases the store's SQLite handles; the embedder is shared by the process.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from types import TracebackType

import chromadb

from knowledge.documents import SHIPPED_DOCS_DIR, SopDocument, docs_dir, load_documents
from knowledge.embedding import Embedder, load_embedder
from knowledge.localize import RunbookText
from knowledge.retrieval import CatalogueEntry, RetrievedDoc, fault_catalogue, fault_signatures, search
from knowledge.signatures import Observation, Signal, SignatureMatch, rank_signatures
from knowledge.store import ReindexReport, open_client, open_collection, reindex
from rca.settings import EmbeddingSettings, Settings
from rca.system import SystemSpec, bundled_system, system_from_settings

log = logging.getLogger(__name__)


class KnowledgeBase:
    """The SOP documents of one directory, indexed in one Chroma collection with one embedder."""

    def __init__(self, *, docs_dir: Path, collection: chromadb.Collection, embedder: Embedder,
                 client: chromadb.ClientAPI | None = None, system: SystemSpec | None = None) -> None:
        self.docs_dir = docs_dir
        self.system = system  # the system under diagnosis (None: the text is handed out as written)
        self.collection = collection
        self.embedder = embedder
        self._client = client  # closed with this object (None: the caller owns the collection's client)
        self._documents: dict[str, SopDocument] = {}
        self.index_report = self.reindex()

    @classmethod
    def open(cls, *, docs_dir: Path, kb_dir: Path, collection: str, embedding: EmbeddingSettings,
             system: SystemSpec | None = None) -> KnowledgeBase:
        """Read ``docs_dir``, load the embedder and bring collection ``collection`` under ``kb_dir`` up to date;
        ``system``: the system under diagnosis, for whom prompt text is rendered (None: as written)."""
        embedder = load_embedder(embedding)
        client = open_client(kb_dir)
        try:
            chroma = open_collection(client, name=collection, embedder=embedder)
            return cls(docs_dir=docs_dir, collection=chroma, embedder=embedder, client=client, system=system)
        except BaseException:
            # nobody else holds it: a failed open must not leak the store's handles. (chromadb's
            # ClientAPI type omits the close() every concrete 1.x client has.)
            client.close()  # type: ignore[attr-defined]
            raise

    @classmethod
    def from_settings(cls, settings: Settings) -> KnowledgeBase:
        return cls.open(docs_dir=docs_dir(settings.knowledge), kb_dir=settings.paths.kb_dir,
                        collection=settings.knowledge.collection, embedding=settings.embedding,
                        system=system_from_settings(settings))

    def close(self) -> None:
        """Release the Chroma client (idempotent); the object cannot retrieve afterwards."""
        if self._client is not None:
            self._client.close()  # type: ignore[attr-defined]  # see open()
            self._client = None

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def reindex(self) -> ReindexReport:
        """Re-read the document directory and embed what changed since the collection was last indexed."""
        documents = load_documents(self.docs_dir)
        report = reindex(self.collection, documents=documents, embedder=self.embedder)
        self._documents = {document.id: document for document in documents}
        for derived in ("_catalogue", "_signatures", "_look_alikes", "prompt_text"):
            self.__dict__.pop(derived, None)  # computed again from the new documents on first use
        return report

    @property
    def documents(self) -> list[SopDocument]:
        return list(self._documents.values())

    @cached_property
    def prompt_text(self) -> RunbookText | None:
        """How prompt text is rendered for ``system`` (None: no system given, text as written).

        The shipped runbooks were written for the bundled HipsterShop; a user's ``docs_dir`` for
        the user's own system (only names its front matter lists and the system lacks are foreign).
        """
        if self.system is None:
            return None
        shipped = self.docs_dir.resolve() == SHIPPED_DOCS_DIR.resolve()
        return RunbookText.for_documents(self.documents, system=self.system,
                                         written_for=bundled_system() if shipped else None)

    @cached_property
    def _catalogue(self) -> list[CatalogueEntry]:
        entries = fault_catalogue(self.documents, source=str(self.docs_dir))
        return self.prompt_text.catalogue(entries) if self.prompt_text is not None else entries

    @cached_property
    def _look_alikes(self) -> dict[str, dict[str, str]]:
        return {d.meta.fault_type: d.look_alike_notes() for d in self.documents if d.meta.fault_type}

    @cached_property
    def _signatures(self) -> dict[str, list[Signal]]:
        return fault_signatures(self.documents)

    def catalogue(self) -> list[CatalogueEntry]:
        """One entry per fault type, in taxonomy order; a missing fault document raises ``DocumentError``."""
        return self._catalogue

    def key_metrics(self, fault_type: str) -> list[str]:
        return next((list(e.key_metrics) for e in self._catalogue if e.fault_type == fault_type), [])

    def distinctions(self, fault_types: Sequence[str]) -> list[str]:
        """What the runbooks say separates each pair of ``fault_types`` (from each one's
        look-alike notes), as ``"b rather than a: what b shows"`` lines, in the order given."""
        notes = self._look_alikes
        lines = [f"{b} rather than {a}: {notes[a][b]}" for a in fault_types for b in fault_types
                 if a != b and b in notes.get(a, {})]
        if self.prompt_text is None:
            return lines
        rendered = (self.prompt_text.distinction(line) for line in lines)
        return [line for line in rendered if line is not None]

    def retrieve(self, summary: str, *, hints: Sequence[str] = (), k: int = 3) -> list[RetrievedDoc]:
        """The ``k`` documents most relevant to an evidence summary, best first (their text rendered for ``system``)."""
        hits = search(self.collection, self.embedder, self._documents, summary, hints=hints, k=k)
        return [self.prompt_text.retrieved(hit) for hit in hits] if self.prompt_text is not None else hits

    def signature_matches(self, observations: Sequence[Observation], *, fault_types: Sequence[str]) -> list[SignatureMatch]:
        """``fault_types`` ranked by how well their signals fit ``observations``, best first."""
        return rank_signatures(self._signatures, observations, fault_types=fault_types)
