"""Issue 26.1: prompts, runbook text, schemas and checks are rendered from the configured system.

With a TrainTicket-like description (tests/data/trainticket_system.toml: ts-* Java services, no
storage, nodes named by IP) no HipsterShop name reaches any message sent to the model, in
pipeline or react mode, and the decision schema offers JVM faults for the Java services and no
disk I/O fault (no storage). Under the bundled description the runbook text is unchanged.
"""
from __future__ import annotations

import hashlib
import json
import re
import uuid as uuid_lib
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
import polars as pl
import pytest

from diagnose.cases import Case
from diagnose.pipeline import one_level_per_service, prepare_case
from diagnose.prompt import build_prompt, decision_schema
from diagnose.service import Diagnoser
from diagnose.templates import PROMPTS_DIR
from diagnose.tools import Toolbox
from index.models import Candidate, EvidenceItem
from knowledge.base import KnowledgeBase
from knowledge.documents import SHIPPED_DOCS_DIR, load_documents
from knowledge.localize import RunbookText, front_matter_names
from knowledge.retrieval import fault_catalogue
from preprocess.detect_metric import SERIES_SCHEMA
from preprocess.schema import LOG_SCHEMA, SPAN_SCHEMA
from rca.settings import Settings, load_settings
from rca.system import SystemSpec, bundled_system, load_system
from tests.fakes import START, RecordedBackend, StaticEvidence

TRAINTICKET = Path(__file__).parent / "data" / "trainticket_system.toml"
HIPSTERSHOP_NAMES = ("hipstershop", "frontend", "checkoutservice", "cartservice", "adservice", "redis-cart", "tidb",
                     "aiops-k8s")


def _leaks(texts: Sequence[str]) -> list[str]:
    text = "\n".join(texts).lower()
    return [name for name in HIPSTERSHOP_NAMES if name in text]


def _sent(backend: RecordedBackend) -> list[str]:
    return [m["content"] for request in backend.requests for m in request["messages"]]


class WordEmbedder:
    """Offline stand-in for MiniLM: hashed bag of words, so retrieval still prefers shared words."""

    name = "test-words"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = np.zeros((len(texts), 384), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9_]+", text.lower()):
                rows[row, int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little") % 384] += 1.0
            rows[row] /= max(float(np.linalg.norm(rows[row])), 1e-9)
        return rows


def _shipped_kb(system: SystemSpec | None) -> KnowledgeBase:
    """The real KnowledgeBase over the shipped runbooks, on an in-memory collection with ``WordEmbedder``."""
    collection = chromadb.EphemeralClient().get_or_create_collection(
        name=f"sops-{uuid_lib.uuid4().hex[:8]}", configuration={"hnsw": {"space": "cosine"}})
    return KnowledgeBase(docs_dir=SHIPPED_DOCS_DIR, collection=collection, embedder=WordEmbedder(),  # type: ignore[arg-type]
                         system=system)


@pytest.fixture(scope="module")
def trainticket() -> SystemSpec:
    return load_system(TRAINTICKET)


@pytest.fixture(scope="module")
def tt_kb(trainticket: SystemSpec) -> KnowledgeBase:
    return _shipped_kb(trainticket)


class EmptyTelemetry:
    """Raw telemetry with no rows (the agent tools then fall back on the index's candidates)."""

    def metric_series(self, *, start: Any, end: Any) -> pl.DataFrame:
        return pl.DataFrame(schema=SERIES_SCHEMA)

    def logs(self, *, start: Any, end: Any) -> pl.DataFrame:
        return pl.DataFrame(schema=LOG_SCHEMA)

    def spans(self, *, start: Any, end: Any) -> pl.DataFrame:
        return pl.DataFrame(schema=SPAN_SCHEMA)


def _tt_candidates() -> list[Candidate]:
    err = EvidenceItem(modality="metric", signal="level", key="error_ratio", component="ts-order-service",
                       text="error_ratio up 9.0x (z=12.0) on ts-order-service from 10:01", magnitude=12.0)
    exc = EvidenceItem(modality="log", signal="burst", key="java.lang.NullPointerException", component="ts-order-service",
                       example="java.lang.NullPointerException at OrderServiceImpl.create",
                       text="java.lang.NullPointerException x40 on ts-order-service-5b8c7d9f4-x7k2q", magnitude=8.0)
    edge = EvidenceItem(modality="trace", signal="errors", key="ts-ui-dashboard->ts-order-service",
                        component="ts-order-service", caller="ts-ui-dashboard", callee="ts-order-service",
                        text="ts-ui-dashboard->ts-order-service errors 0%->35%", magnitude=7.0)
    rrt = EvidenceItem(modality="metric", signal="level", key="rrt", component="ts-travel-service",
                       text="rrt up 3.0x (z=6.0) on ts-travel-service", magnitude=6.0)
    node = EvidenceItem(modality="metric", signal="level", key="node_cpu_usage_rate", component="10.0.0.11",
                        text="node_cpu_usage_rate up 1.4x (z=3.0) on 10.0.0.11", magnitude=3.0)
    return [
        Candidate(component="ts-order-service", level="service", score=0.9, evidence=[err, exc, edge]),
        Candidate(component="ts-order-service-5b8c7d9f4-x7k2q", level="pod", score=0.8, evidence=[exc]),
        Candidate(component="ts-travel-service", level="service", score=0.7, evidence=[rrt]),
        Candidate(component="10.0.0.11", level="node", score=0.3, evidence=[node]),
    ]


def _settings(tmp_path: Path, **diagnose: Any) -> Settings:
    return load_settings(environ={}, overrides={
        "system": {"file": TRAINTICKET}, "paths": {"runs_dir": tmp_path / "runs"},
        "diagnose": {"confirm_fault_type": False, "show_rules_reading": True, **diagnose}})


def _case() -> Case:
    return Case(uuid="tt-1", description="x", start=START, end=START + timedelta(minutes=10))


def _schema_types(schema: dict[str, Any], *, case_text: str = "") -> dict[str, list[str]]:
    """Candidate -> its allowed fault types; a schema that asks for numbers is read through the
    case text's numbered candidate lines (``2. name level score``)."""
    branches = schema.get("anyOf", [schema])
    shown = dict(re.findall(r"^(\d+)\. (\S+) ", case_text, flags=re.MULTILINE))
    return {(b["properties"]["component"]["const"] if "component" in b["properties"]
             else shown[str(b["properties"]["candidate"]["const"])]): b["properties"]["fault_type"]["enum"]
            for b in branches}


# --------------------------------------------------------------------------- the whole prompt


@pytest.mark.parametrize("decide_among", ["candidates", "contenders"])
def test_pipeline_prompt_of_another_system_names_nothing_of_hipstershop(
        tmp_path: Path, tt_kb: KnowledgeBase, decide_among: str) -> None:
    backend = RecordedBackend([json.dumps({"component": "ts-order-service", "fault_type": "jvm exception",
                                           "reason": "NullPointerException burst"})])
    with Diagnoser(settings=_settings(tmp_path, decide_among=decide_among), evidence=StaticEvidence(_tt_candidates()),
                   knowledge=tt_kb, llm=backend) as diagnoser:
        diagnoser.diagnose(_case(), mode="pipeline")
    sent = _sent(backend)
    assert _leaks(sent) == []
    assert "System: TrainTicket." in sent[0] and "ts-ui-dashboard -> ts-order-service" in sent[0]
    assert "- jvm exception |" in sent[0] and "- io fault |" not in sent[0]  # no storage: no I/O fault in the catalogue
    allowed = _schema_types(backend.requests[0]["json_schema"], case_text=sent[1])
    assert "jvm exception" in allowed["ts-order-service"] or decide_among == "contenders"
    assert all("io fault" not in types for types in allowed.values())
    # one level per service, by TrainTicket's pod naming: the pod gives way to its service
    assert "ts-order-service-5b8c7d9f4-x7k2q" not in allowed


def test_decision_schema_follows_the_configured_system(trainticket: SystemSpec) -> None:
    names = ["ts-order-service", "ts-order-service-5b8c7d9f4-x7k2q", "10.0.0.11"]
    allowed = _schema_types(decision_schema(names, system=trainticket))
    assert "jvm exception" in allowed["ts-order-service"] and "io fault" not in allowed["ts-order-service"]
    assert "jvm gc" in allowed["ts-order-service-5b8c7d9f4-x7k2q"]
    assert allowed["10.0.0.11"] == ["node cpu stress", "node memory stress", "node disk fill"]
    # The bundled HipsterShop knows neither: no JVM outside adservice, an IP is not a node there.
    bundled = _schema_types(decision_schema(names, system=bundled_system()))
    assert "jvm exception" not in bundled["ts-order-service"] and "node cpu stress" not in bundled["10.0.0.11"]


def test_runbook_excerpts_in_the_case_part_name_nothing_of_hipstershop(tt_kb: KnowledgeBase,
                                                                       trainticket: SystemSpec) -> None:
    sops = tt_kb.retrieve("jvm exception error_ratio up, NullPointerException, adservice GetRandomAds", k=3)
    assert sops and any(s.excerpt for s in sops)
    prompt = build_prompt(catalogue=tt_kb.catalogue(), uuid="u", window="w", candidates=_tt_candidates(), sops=sops,
                          max_tokens=4000, case_tokens=2000, sop_chars=400, system=trainticket,
                          distinctions=tt_kb.distinctions(["jvm exception", "code error", "jvm latency", "io fault"]))
    assert "Runbooks (background, not evidence):" in prompt.messages[1]["content"]
    assert _leaks([m["content"] for m in prompt.messages]) == []


def test_react_prompts_of_another_system_name_nothing_of_hipstershop(tmp_path: Path, tt_kb: KnowledgeBase) -> None:
    backend = RecordedBackend([
        json.dumps({"thought": "ts-order-service stands out", "tool": "search_sops", "args": {"query": "jvm exception"}}),
        json.dumps({"thought": "enough", "tool": "final_answer", "args": {}}),
        json.dumps({"component": "ts-order-service", "fault_type": "jvm exception", "reason": "NullPointerException"}),
    ])
    with Diagnoser(settings=_settings(tmp_path), evidence=StaticEvidence(_tt_candidates()), knowledge=tt_kb,
                   llm=backend, telemetry=EmptyTelemetry()) as diagnoser:
        diagnoser.diagnose(_case(), mode="react")
    first = [m["content"] for m in backend.requests[0]["messages"]]
    assert "System: TrainTicket." in first[0] and "ts-order-service" in first[-1]
    assert "- jvm exception:" in first[0] and "- io fault:" not in first[0]  # the catalogue offers what can happen
    assert _leaks(first) == []
    assert _leaks(_sent(backend)) == []  # the runbook search's observation too
    allowed = _schema_types(backend.requests[-1]["json_schema"])
    assert "jvm exception" in allowed["ts-order-service"] and all("io fault" not in t for t in allowed.values())


def test_no_prompt_template_names_hipstershop() -> None:
    templates = {path.name: path.read_text(encoding="utf-8") for path in PROMPTS_DIR.glob("*.md")}
    assert {"system.md", "react_system.md", "team_controller.md", "team_judge.md"} <= set(templates)
    assert {name: _leaks([text]) for name, text in templates.items() if _leaks([text])} == {}


# --------------------------------------------------------------------------- spec plumbing


def test_pods_and_nodes_follow_the_configured_system(trainticket: SystemSpec) -> None:
    ranked = one_level_per_service(_tt_candidates(), system=trainticket)
    assert [c.component for c in ranked] == ["ts-order-service", "ts-travel-service", "10.0.0.11"]
    box = Toolbox(components=["ts-order-service-5b8c7d9f4-x7k2q", "ts-travel-service", "10.0.0.11"], system=trainticket)
    hint = box._check_component("get_metrics", "component", "payment")
    assert hint is not None and "services: ts-order-service, ts-travel-service" in hint


def test_prepare_reads_the_system_from_settings(tmp_path: Path, tt_kb: KnowledgeBase) -> None:
    prepared = prepare_case(_case(), settings=_settings(tmp_path, decide_among="contenders"),
                            evidence=StaticEvidence(_tt_candidates()), knowledge=tt_kb)
    assert prepared.choices is not None and "io fault" not in prepared.choices["ts-order-service"]
    assert prepared.reading.fault_type in bundled_system().faults  # a real type of the taxonomy


# --------------------------------------------------------------------------- runbook text


def test_runbook_text_is_unchanged_for_the_system_it_was_written_for() -> None:
    documents = load_documents(SHIPPED_DOCS_DIR)
    text = RunbookText.for_documents(documents, system=bundled_system(), written_for=bundled_system())
    assert not text.active
    entries = fault_catalogue(documents, source="shipped")
    assert text.catalogue(entries) == entries
    body = documents[0].body
    assert text.prose(body) == body and text.phrase("jvm cpu: JVM threads burn CPU in adservice") == \
        "jvm cpu: JVM threads burn CPU in adservice"


def test_runbook_text_drops_what_names_another_systems_components(trainticket: SystemSpec) -> None:
    text = RunbookText(system=trainticket, written_for=bundled_system())
    assert text.prose("Errors rise on the callee. frontend warns `failed to retrieve ads`. Callers are victims.") == \
        "Errors rise on the callee. Callers are victims."
    assert text.prose("TiKV reports io_util up.\nThe pod restarts.") == "The pod restarts."
    assert text.items(["adservice-getrandomads-exception", "error_ratio", "redis-cart-0 latency"]) == ["error_ratio"]
    assert text.phrase("jvm exception: adservice GetRandomAds throws exceptions (adservice-getrandomads-exception)") == \
        "jvm exception: {component} GetRandomAds throws exceptions"
    assert text.phrase("Pod failure: a pod or a TiDB component stops serving", placeholder="a service") == \
        "Pod failure: a pod or a component stops serving"
    # Its own names, pods and nodes stay; so do generic words.
    kept = "ts-order-service-5b8c7d9f4-x7k2q on 10.0.0.11 logs a NullPointerException; the service and its pods suffer."
    assert text.prose(kept) == kept
    assert text.foreign_names("hipstershop.AdService/GetAds on aiops-k8s-03 via tidb-tidb") == \
        ["hipstershop", "AdService", "aiops-k8s-03", "tidb-tidb"]


def test_a_users_own_runbooks_keep_their_text_under_their_system(tmp_path: Path, trainticket: SystemSpec) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    source = (SHIPPED_DOCS_DIR / "cpu-stress.md").read_text(encoding="utf-8")
    own = re.sub(r"^components = .*$", 'components = ["ts-order-service", "ts-legacy-service"]', source, flags=re.M)
    (docs / "cpu-stress.md").write_text(own + "\nts-legacy-service was retired. ts-order-service saturates first.\n",
                                        encoding="utf-8")
    documents = load_documents(docs)
    assert front_matter_names(documents) == {"ts-order-service", "ts-legacy-service"}
    text = RunbookText.for_documents(documents, system=trainticket)  # written for the user's own system
    body = documents[0].body
    # Only the name its front matter lists and the system lacks goes; HipsterShop's words are not judged.
    assert text.prose(body).endswith("ts-order-service saturates first.")
    assert "ts-legacy-service" not in text.prose(body) and text.prose("frontend pods") == "frontend pods"


def test_knowledge_base_renders_its_prompt_text_for_its_system(tt_kb: KnowledgeBase) -> None:
    catalogue = tt_kb.catalogue()
    assert _leaks([e.model_dump_json() for e in catalogue]) == []
    jvm = next(e for e in catalogue if e.fault_type == "jvm exception")
    assert jvm.reason_template.startswith("jvm exception: {component}") and "error_ratio" in jvm.key_metrics
    assert _leaks(tt_kb.key_metrics("jvm exception")) == []
    hits = tt_kb.retrieve("frontend -> cartservice -> redis-cart latency, TiDB tikv io_util, adservice exceptions", k=5)
    assert _leaks([h.model_dump_json() for h in hits]) == []
    notes = tt_kb.distinctions(["jvm exception", "code error", "jvm latency", "pod failure", "pod kill"])
    assert notes and _leaks(notes) == []
    # The documents themselves are unchanged (curation, `rca kb`): only the prompt-facing text is rendered.
    assert "adservice" in next(d for d in tt_kb.documents if d.id == "jvm-exception").body


def test_knowledge_base_without_a_system_or_with_the_bundled_one_hands_out_the_runbooks_as_written() -> None:
    as_written = _shipped_kb(None)
    bundled = _shipped_kb(bundled_system())
    assert bundled.catalogue() == as_written.catalogue()
    assert any("adservice" in e.reason_template for e in bundled.catalogue())
    query = "adservice GetRandomAds exceptions"
    assert bundled.retrieve(query, k=3) == as_written.retrieve(query, k=3)
    types = ["jvm exception", "code error", "jvm latency"]
    assert bundled.distinctions(types) == as_written.distinctions(types)
