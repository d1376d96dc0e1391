"""The production evidence source of the diagnoser: the on-disk evidence index.

(The production knowledge source is ``knowledge.base.KnowledgeBase`` itself.)
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

from index import store
from index.models import WindowQueryResult
from index.params import IndexParams
from index.query import query_window
from rca.errors import IndexMissing


class IndexEvidence:
    """Candidates for a window from the on-disk evidence index."""

    def __init__(self, index_dir: Path, *, params: IndexParams) -> None:
        if not index_dir.is_dir():
            raise IndexMissing(f"evidence index {index_dir} does not exist: run `rca preprocess` first")
        store.load_manifest(index_dir)  # a corrupt or foreign manifest fails here, once, naming the file
        self.index_dir = index_dir
        self.params = params

    def query(self, *, start: datetime, end: datetime, top_k: int) -> WindowQueryResult:
        return query_window(self.index_dir, start=start, end=end, top_k=top_k, params=self.params)
