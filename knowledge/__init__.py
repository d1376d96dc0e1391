"""SOP knowledge base: fault-type documents, their validation, the Chroma index and retrieval.

Public entry point: :class:`knowledge.base.KnowledgeBase` (``from_settings`` / ``open``;
``catalogue``, ``key_metrics``, ``retrieve``, ``signature_matches``, ``reindex``). See README.md.
"""
