"""SOP knowledge base: fault-type documents, their validation, the Chroma index and retrieval.

Public entry points: :func:`knowledge.retrieval.retrieve`, :func:`knowledge.retrieval.fault_catalogue`,
:func:`knowledge.store.reindex`, :func:`knowledge.embedding.load_embedder`. See README.md.
"""
