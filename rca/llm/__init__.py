"""LLM backends behind one interface (``base``): open one with ``factory.open_backend(settings)``.

``openai_backend`` talks to any OpenAI-compatible endpoint; ``embedded`` serves a local GGUF
model in-process (assembled from PyPI part packages by ``models``) through the same client.
"""
