"""Typed results of index queries: what the diagnoser receives about a window."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

# What an evidence item says happened; knowledge signals match on it (``knowledge.signatures``).
# metric: level (moved up or down) | silent; log: burst | new_template | silent | fell (a
# template stopped while its pod kept logging);
# trace: latency | errors | calls_stopped (on a call edge) | wait (calls slow between the two
# sides of the call, not in the callee's own span) | fanout (a caller pod failing towards
# several callees at once).
EvidenceSignal = Literal["level", "silent", "latency", "errors", "calls_stopped", "calls_dropped", "stopped_after",
                         "wait", "fanout", "burst", "new_template", "fell"]



class EvidenceItem(BaseModel):
    """One anomaly as data, plus ``text``, its observation line (``index.evidence.render``).

    ``text`` is at most 100 characters and starts with its ``key``: the KPI name
    (``pod_cpu_usage``), the log line's words (``connection refused``; a long line is cut
    in the middle, shorter in the key than in the text) or the call edge
    (``frontend->cartservice``), e.g.
    ``pod_cpu_usage up 4.1x (z=9.3) on emailservice-1 from 16:11``. Code that checks
    evidence reads the structured fields (``signal``, ``caller``/``callee``, ``example``),
    never the wording of ``text``.
    """

    modality: Literal["metric", "log", "trace"]
    signal: EvidenceSignal
    key: str
    component: str
    text: str = Field(max_length=100)
    direction: Literal["up", "down", "silent", "new"] = "up"
    magnitude: float = 0.0  # robust z (or equivalent) against baseline, 2 decimals; larger = stronger
    z: float = 0.0  # the same z unrounded (the figure the text quotes)
    ratio: float | None = None  # window value / baseline value where meaningful
    onset: datetime | None = None
    caller: str | None = None  # trace: the calling service of the edge
    callee: str | None = None  # trace: the called service (fanout: the strongest of its callees)
    example: str = ""  # log: the line the evidence quotes (most frequent masked line, else the template)
    value: float | None = None  # metric: the window level
    count: int | None = None  # log: lines in the window
    baseline_count: int | None = None  # log: lines in the baseline
    fanout_signal: Literal["errors", "latency"] | None = None  # fanout: what the caller pod's calls showed
    more_callees: int = 0  # fanout: callees beyond ``callee`` that went wrong too
    # trace latency: the share of the added time spent between the caller's and the callee's spans
    # (small: the callee's own spans slowed); None where the spans do not tell (no server span).
    wait_share: float | None = None
    # The share of this line the component's own fault explains, as the ranker reads it: below 1
    # where another component's fault explains the rest (callers that stopped calling starve it,
    # it echoes a callee's errors, its clients wait on a slow answer). What fault it shows is judged
    # on that share (``knowledge.signatures``).
    own_share: float = Field(default=1.0, ge=0.0, le=1.0)


class Candidate(BaseModel):
    component: str  # exact answer string: service, pod or node name
    level: Literal["service", "pod", "node"]
    score: float
    score_breakdown: dict[str, float] = Field(default_factory=dict)  # e.g. metric/log/trace/propagation
    evidence: list[EvidenceItem] = Field(default_factory=list)


class LostFile(BaseModel):
    """A raw file the nightly job could not read: its rows are absent from the index."""

    path: str
    reason: str
    source: str  # apm | infra | log | trace
    hour: int | None = None  # CST hour of an hourly file; None for a daily metric file

    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


class ModalityStatus(BaseModel):
    """How complete one modality's data is for a window: "no data" is a value, not an absent key.

    ``gaps`` are the UTC minute ranges of the window the index holds nothing for (a missing
    partition, a lost hour file); ``lost_files`` are the unreadable raw files behind them, or
    behind a daily metric file's KPI missing all day.
    """

    modality: Literal["metric", "log", "trace"]
    state: Literal["ok", "partial", "no_data"]
    gaps: list[tuple[datetime, datetime]] = Field(default_factory=list)
    missing_partitions: list[str] = Field(default_factory=list)  # "<day>/<table>"
    lost_files: list[LostFile] = Field(default_factory=list)
    # Minutes with data before the window, in its baseline (None: not measured), and whether
    # they are too few for a baseline (recording just started): the window was then judged
    # against the same hour a day earlier, the minutes after it or its peers: weaker evidence.
    baseline_minutes: int | None = None
    baseline_thin: bool = False

    def describe(self) -> str:
        """Words for the prompt, e.g. ``no trace data 16:00-16:30 UTC`` or
        ``metric data partial: 1 file unreadable (pod_cpu_usage ...)``."""
        label = {"metric": "metric", "log": "log", "trace": "trace"}[self.modality]
        thin = self._thin_words()
        if self.state == "ok":
            return thin or f"{label} data complete"
        if self.state == "no_data":
            return f"no {label} data in the window" + (f"; {thin}" if thin else "")
        parts: list[str] = []
        if self.gaps:
            spans = ", ".join(f"{a:%H:%M}-{b:%H:%M}" for a, b in self.gaps[:4])
            parts.append(f"no {label} data {spans} UTC" + (f" and {len(self.gaps) - 4} more gaps" if len(self.gaps) > 4 else ""))
        if self.lost_files:
            names = ", ".join(f.name() for f in self.lost_files[:3])
            more = f" and {len(self.lost_files) - 3} more" if len(self.lost_files) > 3 else ""
            parts.append(f"{label} data partial: {len(self.lost_files)} file(s) unreadable ({names}{more})")
        if thin:
            parts.append(thin)
        return "; ".join(parts) or f"{label} data partial"

    def brief(self) -> str:
        """The same status in a few words, for a prompt that explains the shorthand once:
        ``no log data``, ``trace baseline 2 min``, ``no metric data 16:00-16:30``."""
        label = self.modality
        thin = f"{label} baseline {self.baseline_minutes or 0} min" if self.baseline_thin else ""
        if self.state == "ok":
            return thin or f"{label} data complete"
        if self.state == "no_data":
            return "; ".join(filter(None, [f"no {label} data", thin]))
        parts: list[str] = []
        if self.gaps:
            spans = ", ".join(f"{a:%H:%M}-{b:%H:%M}" for a, b in self.gaps[:2])
            parts.append(f"no {label} data {spans}" + (f" +{len(self.gaps) - 2} more" if len(self.gaps) > 2 else ""))
        if self.lost_files:
            parts.append(f"{len(self.lost_files)} {label} file(s) unreadable")
        if thin:
            parts.append(thin)
        return "; ".join(parts) or f"{label} data partial"

    def _thin_words(self) -> str:
        if not self.baseline_thin:
            return ""
        minutes = self.baseline_minutes or 0
        reference = {
            "metric": "the window was compared with the same hour a day earlier, the minutes after it "
                      "or peer pods and nodes",
            "log": "few log lines to compare the window's with",
            "trace": "few calls to compare the window's latency and errors with",
        }[self.modality]
        return (f"{self.modality} baseline thin: only {minutes} minute(s) of data before the window "
                f"(recording just started?); {reference}")


# How far an answer naming the first candidate can be trusted (index.confidence).
Confidence = Literal["high", "low"]


class WindowQueryResult(BaseModel):
    start: datetime
    end: datetime
    candidates: list[Candidate]
    data_status: list[ModalityStatus] = Field(default_factory=list)  # one per modality
    parameters: dict[str, Any] = Field(default_factory=dict)  # the IndexParams the result was made with
    # Why there are no candidates, in words (None when there are some): never an unexplained empty list.
    empty_reason: str | None = None
    # Nothing passed the detectors' thresholds, and the candidates come from a second scoring with
    # relaxed ones (IndexParams.relaxed): weak evidence, said so to the reader.
    relaxed: bool = False
    # How far the first candidate can be trusted (index.confidence): "low" when it scored below
    # RankWeights.confident_score, led its first rival by less than RankWeights.confident_margin, or
    # the candidates rest on relaxed thresholds; None: no candidate.
    confidence: Confidence | None = None

    def data_gaps(self, *, brief: bool = False) -> list[str]:
        """The data status in words, one line per incomplete modality or thin baseline (empty when all is
        complete), and whether the candidates rest on relaxed thresholds. ``brief``: a few words each
        (``ModalityStatus.brief``), for the model's prompt, which explains the shorthand once."""
        gaps = [s.brief() if brief else s.describe() for s in self.data_status if s.state != "ok" or s.baseline_thin]
        if self.relaxed:
            gaps.append("weak evidence (relaxed thresholds)" if brief else
                        "weak evidence: no anomaly passed the usual thresholds; candidates from relaxed ones")
        return gaps
