"""Offline sentence embeddings (all-MiniLM-L6-v2, int8 ONNX) and the Chroma wrapper.

Placeholder interface; implemented by the knowledge-base work.
"""
