"""The production evidence source of the diagnoser: the on-disk evidence index.

(The production knowledge source is ``knowledge.base.KnowledgeBase`` itself.)
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from index import store
from index.models import WindowQueryResult
from index.params import IndexParams
from index.query import query_window
from rca.errors import IndexMissing


class IndexEvidence:
    """Candidates for a window from the on-disk evidence index.

    ``case_windows`` are the windows of every case of the input file (input, not ground
    truth): each query leaves the other incidents' minutes out of its baseline.
    """

    def __init__(self, index_dir: Path, *, params: IndexParams,
                 case_windows: Sequence[tuple[datetime, datetime]] = ()) -> None:
        if not index_dir.is_dir():
            raise IndexMissing(f"evidence index {index_dir} does not exist: run `rca preprocess` first")
        store.load_manifest(index_dir)  # a corrupt or foreign manifest fails here, once, naming the file
        self.index_dir = index_dir
        self.params = params
        self.case_windows = list(case_windows)

    def query(self, *, start: datetime, end: datetime, top_k: int) -> WindowQueryResult:
        others = [w for w in self.case_windows if w != (start, end)]
        return query_window(self.index_dir, start=start, end=end, top_k=top_k, params=self.params,
                            exclude_windows=others)
