"""Cross-cutting pieces: the ``rca`` CLI, Settings, time rules, the taxonomy vocabulary,
atomic writes and the LLM backends (``rca.llm``, shared by diagnose/ and judge/)."""
