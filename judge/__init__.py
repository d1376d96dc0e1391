"""Scoring of result files: the 2025 challenge rules (``judge.challenge``) and the
keyword + similarity QA judge (``judge.qa``). Nothing here may import ``diagnose``."""
