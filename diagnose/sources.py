"""The production evidence source of the diagnoser: the on-disk evidence index.

(The production knowledge source is ``knowledge.base.KnowledgeBase`` itself.)

``IndexEvidence`` scores a window once (``index.query.score_window``) with the configured
``IndexParams`` and the other incidents' windows excluded, and serves that one scoring to the
ranking (``query``), the agent tools and the case report (``score``).
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from diagnose.cases import input_case_windows
from index import store
from index.models import WindowQueryResult
from index.params import IndexParams
from index.query import ScoredWindow, rank_or_relax, score_window
from rca.errors import IndexMissing
from rca.settings import Settings
from rca.system import system_from_settings
from rca.timeutil import as_utc


class IndexEvidence:
    """Candidates and scored events for a window from the on-disk evidence index.

    ``case_windows`` are the windows of every case of the input file (input, not ground
    truth): each query leaves the other incidents' minutes out of its baseline.
    """

    def __init__(self, index_dir: Path, *, params: IndexParams,
                 case_windows: Sequence[tuple[datetime, datetime]] = (), require: bool = True) -> None:
        # ``require=False`` (the case report): a missing index scores to no rows, which the page says.
        if require and not index_dir.is_dir():
            raise IndexMissing(f"evidence index {index_dir} does not exist: run `rca preprocess` first")
        store.load_manifest(index_dir)  # a corrupt or foreign manifest fails here, once, naming the file
        self.index_dir = index_dir
        self.params = params
        self.case_windows = list(case_windows)
        # The last window scored: a case is ranked, then looked at by its tools and its report,
        # which read the scoring its candidates came from (``_last``: relaxed where they were).
        self._usual: ScoredWindow | None = None
        self._last: ScoredWindow | None = None

    @classmethod
    def from_settings(cls, settings: Settings, *, case_windows: Sequence[tuple[datetime, datetime]] | None = None,
                      require: bool = True) -> IndexEvidence:
        """The configured index and ``[index]`` parameters; ``case_windows`` None reads the
        configured input file's windows (when it exists)."""
        windows = input_case_windows(settings.paths.input_file) if case_windows is None else list(case_windows)
        params = IndexParams.from_settings(settings.index, system=system_from_settings(settings))
        return cls(settings.paths.index_dir, params=params, case_windows=windows, require=require)

    def score(self, *, start: datetime, end: datetime) -> ScoredWindow:
        """Every detector's events for the window, under this source's parameters and exclusions
        (relaxed ones where ``query`` took its candidates from them)."""
        start, end = as_utc(start), as_utc(end)
        last = self._last
        if last is not None and (last.start, last.end) == (start, end):
            return last
        self._last = self._usual_scoring(start=start, end=end)
        return self._last

    def _usual_scoring(self, *, start: datetime, end: datetime) -> ScoredWindow:
        usual = self._usual
        if usual is None or (usual.start, usual.end) != (start, end):
            usual = self._usual = self._scored(start=start, end=end, params=self.params)
        return usual

    def _scored(self, *, start: datetime, end: datetime, params: IndexParams) -> ScoredWindow:
        others = [(a, b) for a, b in self.case_windows if (as_utc(a), as_utc(b)) != (start, end)]
        return score_window(self.index_dir, start=start, end=end, params=params, exclude_windows=others)

    def query(self, *, start: datetime, end: datetime, top_k: int) -> WindowQueryResult:
        """The window's candidates, from relaxed thresholds where the usual ones found none although
        telemetry was there (``index.query.rank_or_relax``); the scoring they came from is kept as the last."""
        start, end = as_utc(start), as_utc(end)
        result, self._last = rank_or_relax(self._usual_scoring(start=start, end=end), top_k=top_k,
                                           rescore=lambda relaxed: self._scored(start=start, end=end, params=relaxed))
        return result
