"""Runbook text as the system under diagnosis reads it: no component of another system reaches a prompt.

The shipped runbooks (``knowledge/docs``) were written for the challenge's HipsterShop and quote
its components in titles, key metrics, reason templates and prose ("adservice's GetRandomAds",
"tidb-tikv disk I/O errors", "aiops-k8s-01 .. 08"). Their *knowledge* (which signals a fault
shows, how look-alikes differ) holds for any system; their *names* do not, and a small model
copies whatever names it reads. ``RunbookText`` renders a runbook set's prompt-facing text for
another system:

- a name is *foreign* when the system the runbooks were written for knows it (a component, one of
  its pods or nodes, a stem of those names such as ``tidb`` or ``redis``, the system's own name,
  or a name the runbooks' front matter ``components`` lists) and the system under diagnosis does not;
- prose (excerpts, look-alike notes) drops the sentences naming a foreign name;
- lists (key metrics) drop the items naming one;
- reason templates and titles keep their sentence: a foreign component becomes ``{component}``
  (as the other templates already say it) or "a service", a compound naming one is dropped.

For the system the runbooks were written for nothing changes (the shipped runbooks under the
bundled description, or a user's ``[knowledge] docs_dir`` under the user's own ``[system] file``:
only names their front matter lists and the system lacks are foreign there).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from knowledge.documents import SopDocument
from knowledge.retrieval import CatalogueEntry, RetrievedDoc
from rca.system import SystemSpec

# A name as text quotes it: words joined by hyphens (``tidb-tikv-0``, ``adservice-getrandomads-exception``).
_NAME = re.compile(r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*")
# Sentence ends inside one line of prose (a runbook excerpt is a section on one line).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# Parts of component names too generic to mark a system (``redis-master`` says nothing about "master").
_GENERIC_PARTS = frozenset({
    "service", "services", "server", "servers", "master", "worker", "node", "nodes", "pod", "pods", "cache",
    "store", "storage", "proxy", "gateway", "backend", "api", "app", "web", "main", "primary", "replica",
    "leader", "follower", "default", "system", "cluster",
})
_MIN_STEM = 4  # shorter parts ("pd", "db", "ts") are dropped from the stems: too ambiguous


def _parts(name: str) -> list[str]:
    return [part for part in name.split("-") if part]


def _stems(spec: SystemSpec) -> frozenset[str]:
    """Words that mark ``spec``'s names besides the names themselves: the system's name, the
    distinctive parts of its component and node names, the database kinds its traces name."""
    stems: set[str] = {w for w in _NAME.findall(spec.name.lower()) if len(w) >= _MIN_STEM and not w.isdigit()}
    nodes = [t for t in _NAME.findall(spec.node_description.lower()) if spec.is_node(t)]
    for name in (*spec.components, *nodes):
        stems |= {p for p in _parts(name.lower())
                  if len(p) >= _MIN_STEM and any(c.isalpha() for c in p) and p not in _GENERIC_PARTS}
    stems |= {k.lower() for k in (*spec.trace.db_system, *spec.trace.service_aliases)}
    return frozenset(stems)


def front_matter_names(documents: Iterable[SopDocument]) -> frozenset[str]:
    """Component names the documents' front matter ``components`` lists: an entry that is one
    name, or the hyphenated / numbered names inside a longer entry ("aiops-k8s-01 .. aiops-k8s-08")."""
    names: set[str] = set()
    for document in documents:
        for entry in document.meta.components:
            tokens = [t.lower() for t in _NAME.findall(entry)]
            if len(tokens) == 1:
                names |= set(tokens)
            else:
                names |= {t for t in tokens if ("-" in t or any(c.isdigit() for c in t)) and any(c.isalpha() for c in t)}
    return frozenset(names)


def _same(a: SystemSpec, b: SystemSpec) -> bool:
    return a is b or a.model_dump() == b.model_dump()


@dataclass(frozen=True)
class RunbookText:
    """Renders runbook text written for ``written_for`` (plus the ``listed`` front-matter names) for ``system``."""

    system: SystemSpec
    written_for: SystemSpec
    listed: frozenset[str] = frozenset()

    @classmethod
    def for_documents(cls, documents: Sequence[SopDocument], *, system: SystemSpec,
                      written_for: SystemSpec | None = None) -> RunbookText:
        """``written_for``: the system the documents describe (None: ``system`` itself, e.g. a user's own runbooks)."""
        return cls(system=system, written_for=system if written_for is None else written_for,
                   listed=front_matter_names(documents))

    # ----------------------------------------------------------------- names

    @cached_property
    def _source_stems(self) -> frozenset[str]:
        return _stems(self.written_for)

    @cached_property
    def _target_stems(self) -> frozenset[str]:
        return _stems(self.system)

    @cached_property
    def active(self) -> bool:
        """False when nothing can be foreign (the runbooks' own system): every method returns its input."""
        return not _same(self.system, self.written_for) or any(not self._target_knows(n) for n in self.listed)

    def _source_component(self, name: str) -> bool:
        spec = self.written_for
        return (name in spec.components or spec.is_node(name) or name in self.listed
                or (spec.level_of(name) == "pod" and spec.service_of(name) in spec.components))

    def _target_knows(self, name: str) -> bool:
        spec = self.system
        return (name in spec.components or spec.is_node(name) or spec.service_of(name) in spec.components
                or name in self._target_stems)

    def _foreign_name(self, name: str) -> bool:
        """A whole name (one component, pod or node) of the runbooks' system that ``system`` lacks."""
        return self._source_component(name) and not self._target_knows(name)

    @cached_property
    def _verdicts(self) -> dict[str, bool]:
        return {}  # name -> foreign; runbook prose repeats few words, so this stays small

    def is_foreign(self, token: str) -> bool:
        """Whether a name as the text writes it (any case, hyphenated) names something ``system`` lacks."""
        name = token.lower()
        if not self.active:
            return False
        verdict = self._verdicts.get(name)
        if verdict is None:
            verdict = not self._target_knows(name) and (
                self._foreign_name(name) or name in self._source_stems
                or any((p in self._source_stems or self._source_component(p)) and not self._target_knows(p)
                       for p in _parts(name)))
            self._verdicts[name] = verdict
        return verdict

    def foreign_names(self, text: str) -> list[str]:
        """The foreign names ``text`` quotes, in order, each once."""
        return list(dict.fromkeys(t for t in _NAME.findall(text) if self.is_foreign(t)))

    # ----------------------------------------------------------------- text

    def prose(self, text: str) -> str:
        """``text`` without the sentences that name something ``system`` lacks (line structure kept)."""
        if not self.active:
            return text
        lines: list[str] = []
        for line in text.split("\n"):
            if not line.strip():
                lines.append(line)
                continue
            kept = [s for s in _SENTENCE_END.split(line) if not self.foreign_names(s)]
            if kept:
                lines.append(" ".join(kept))
        return "\n".join(lines)

    def items(self, values: Iterable[str]) -> list[str]:
        """The values (KPI names, log keywords) that name nothing ``system`` lacks."""
        return [v for v in values if not self.active or not self.foreign_names(v)]

    def phrase(self, text: str, *, placeholder: str = "{component}") -> str:
        """A one-line phrase (reason template, title) with each foreign component said as ``placeholder``
        and each compound or stem naming one dropped."""
        if not self.active or not self.foreign_names(text):
            return text

        def replace(match: re.Match[str]) -> str:
            token = match.group(0)
            if not self.is_foreign(token):
                return token
            return placeholder if self._foreign_name(token.lower()) else ""

        out = _NAME.sub(replace, text)
        out = re.sub(r"[,;]\s*\)", ")", out)  # a list in parentheses that lost its last item
        out = re.sub(r"\(\s*[,;]?\s*\)", "", out)  # a parenthesis left empty
        out = re.sub(rf"({re.escape(placeholder)})(?:\s*(?:/|,|or|and)\s*{re.escape(placeholder)})+", r"\1", out)
        out = re.sub(r"\s+([,;:.)'])", r"\1", out)
        return " ".join(out.split())

    # ----------------------------------------------------------------- knowledge objects

    def catalogue(self, entries: Sequence[CatalogueEntry]) -> list[CatalogueEntry]:
        if not self.active:
            return list(entries)
        return [e.model_copy(update={"key_metrics": self.items(e.key_metrics),
                                     "reason_template": self.phrase(e.reason_template)}) for e in entries]

    def retrieved(self, doc: RetrievedDoc) -> RetrievedDoc:
        if not self.active:
            return doc
        return doc.model_copy(update={
            "title": self.phrase(doc.title, placeholder="a service"),
            "text": self.prose(doc.text),
            # A section that named only foreign components leaves nothing: the rest of the runbook stands in.
            "excerpt": self.prose(doc.excerpt) or " ".join(self.prose(doc.text).split()),
            "key_metrics": self.items(doc.key_metrics),
            "reason_template": self.phrase(doc.reason_template) if doc.reason_template else doc.reason_template,
        })

    def distinction(self, line: str) -> str | None:
        """A look-alike note (``"b rather than a: what b shows"``) without foreign sentences; None when nothing is left."""
        if not self.active:
            return line
        head, colon, note = line.partition(": ")
        kept = self.prose(note).strip()
        return f"{head}{colon}{kept}" if kept else None
