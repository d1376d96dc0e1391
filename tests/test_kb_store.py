"""Chroma indexing: incremental by content hash, add/remove, search, CLI curation."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowledge.base import KnowledgeBase
from knowledge.documents import DocumentError
from rca.settings import KnowledgeSettings, PathSettings, Settings
from rca.taxonomy import FAULT_TYPES

TEMPLATE = '''+++
id = "{id}"
title = "{title}"
kind = "fault"
fault_type = "{fault_type}"
fault_category = "{category}"
levels = ["node"]
key_metrics = ["{metric}"]
reason_template = "{fault_type}: {metric} of {{component}} abnormal"
+++
# {title}

## Metrics
{metrics_text}

## Logs
{logs_text}
'''

SMALL_SET = {
    "node-cpu": ("node cpu stress", "node_cpu_usage_rate", "The node CPU usage rate is saturated.", "No logs."),
    "node-disk": ("node disk fill", "node_filesystem_usage_rate", "The filesystem of the node is nearly full.", "no space left on device"),
    "dns": ("dns error", "error_ratio", "Error ratio rises.", "lookup shippingservice: server misbehaving"),
}


def _write(directory: Path, doc_id: str, fault_type: str, metric: str, metrics_text: str, logs_text: str) -> Path:
    path = directory / f"{doc_id}.md"
    path.write_text(TEMPLATE.format(id=doc_id, title=f"Doc {doc_id}", fault_type=fault_type,
                                    category=FAULT_TYPES[fault_type], metric=metric,
                                    metrics_text=metrics_text, logs_text=logs_text), encoding="utf-8")
    return path


@pytest.fixture
def kb_small(tmp_path: Path) -> Settings:
    docs = tmp_path / "docs"
    docs.mkdir()
    for doc_id, spec in SMALL_SET.items():
        _write(docs, doc_id, *spec)
    return Settings(paths=PathSettings(kb_dir=tmp_path / "kb"), knowledge=KnowledgeSettings(docs_dir=docs))


def _indexed_ids(settings: Settings) -> set[str]:
    collection = KnowledgeBase.from_settings(settings).collection
    return {m["doc_id"] for m in collection.get(include=["metadatas"])["metadatas"]}


def test_reindex_is_incremental(kb_small: Settings) -> None:
    kb = KnowledgeBase.from_settings(kb_small)
    first = kb.index_report
    assert sorted(first.added) == sorted(SMALL_SET) and first.chunks_embedded == 3 * 3
    second = kb.reindex()
    assert second.chunks_embedded == 0 and not second.changed and len(second.unchanged) == 3

    docs = kb_small.knowledge.docs_dir
    _write(docs, "dns", "dns error", "error_ratio", "Error ratio rises a lot.", "no such host")
    third = kb.reindex()
    assert third.updated == ["dns"] and third.added == [] and third.chunks_embedded == 3

    (docs / "node-disk.md").unlink()
    fourth = kb.reindex()
    assert fourth.removed == ["node-disk"] and fourth.chunks_embedded == 0
    assert {d.id for d in kb.documents} == {"node-cpu", "dns"} == _indexed_ids(kb_small)


def test_index_persists_across_opens(kb_small: Settings) -> None:
    assert KnowledgeBase.from_settings(kb_small).index_report.chunks_embedded == 3 * 3
    # A second object (as a new process would) finds everything indexed and embeds nothing.
    again = KnowledgeBase.from_settings(kb_small)
    assert again.index_report.chunks_embedded == 0 and len(again.index_report.unchanged) == 3
    assert _indexed_ids(kb_small) == set(SMALL_SET)


def test_retrieve_does_not_reindex(kb_small: Settings) -> None:
    kb = KnowledgeBase.from_settings(kb_small)
    (kb_small.knowledge.docs_dir / "dns.md").unlink()
    # The open object answers from what it indexed; only reindex() (or a new open) sees the change.
    assert "dns" in [hit.id for hit in kb.retrieve("lookup emailservice server misbehaving", k=3)]
    assert kb.reindex().removed == ["dns"]
    assert "dns" not in [hit.id for hit in kb.retrieve("lookup emailservice server misbehaving", k=3)]


@pytest.mark.parametrize(("query", "expected"), [
    ("node_filesystem_usage_rate of aiops-k8s-04 near 100%", "node-disk"),
    ("node cpu usage rate pegged at 99% on a worker", "node-cpu"),
    ("checkoutservice logs: lookup emailservice server misbehaving", "dns"),
])
def test_search_finds_the_matching_document(kb_small: Settings, query: str, expected: str) -> None:
    hits = KnowledgeBase.from_settings(kb_small).retrieve(query, k=2)
    assert hits[0].id == expected
    assert hits[0].key_metrics and hits[0].reason_template and "## " in hits[0].text
    assert hits[0].score >= hits[1].score


def test_retrieve_rejects_empty_query(kb_small: Settings) -> None:
    with pytest.raises(ValueError):
        KnowledgeBase.from_settings(kb_small).retrieve("  ")


def test_fault_catalogue_of_shipped_docs(tmp_path: Path) -> None:
    entries = KnowledgeBase.from_settings(Settings(paths=PathSettings(kb_dir=tmp_path / "kb"))).catalogue()
    assert [e.fault_type for e in entries] == list(FAULT_TYPES)
    node_disk = entries[list(FAULT_TYPES).index("node disk fill")]
    assert "node_filesystem_usage_rate" in node_disk.key_metrics and node_disk.levels == ["node"]


def test_fault_catalogue_requires_every_fault_type(kb_small: Settings) -> None:
    with pytest.raises(DocumentError, match="no fault document"):
        KnowledgeBase.from_settings(kb_small).catalogue()


def test_excerpt_is_the_best_section_or_the_whole_body(kb_small: Settings) -> None:
    kb = KnowledgeBase.from_settings(kb_small)
    (dns,) = [d for d in kb.documents if d.id == "dns"]
    assert dns.excerpt("logs") == "lookup shippingservice: server misbehaving"
    assert dns.excerpt("header") == dns.excerpt("Overview") == " ".join(dns.body.split())
    assert dns.excerpt("header").startswith("# Doc dns ## Metrics Error ratio rises.")


# ---- CLI -------------------------------------------------------------------------------

@pytest.fixture
def kb_cli(kb_small: Settings, monkeypatch: pytest.MonkeyPatch):
    from app import cli
    if not cli.app.registered_groups:  # sub-commands are attached lazily by app.cli.main()
        cli._register()
    monkeypatch.setenv("RCA_PATHS__KB_DIR", str(kb_small.paths.kb_dir))
    monkeypatch.setenv("RCA_KNOWLEDGE__DOCS_DIR", str(kb_small.knowledge.docs_dir))
    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(cli.app, ["kb", *args])
    return run, kb_small


def test_cli_add_search_remove(kb_cli, tmp_path: Path) -> None:
    run, settings = kb_cli
    docs = settings.knowledge.docs_dir
    assert run("reindex").exit_code == 0
    new = _write(tmp_path, "io", "io fault", "io_util", "TiKV io_util and region_pending rise.", "Region is unavailable")
    result = run("add", str(new))
    assert result.exit_code == 0, result.output
    assert (docs / "io.md").is_file() and "io" in _indexed_ids(settings)
    result = run("search", "tikv io_util region_pending high", "-k", "1")
    assert result.exit_code == 0 and "io fault" in result.output
    assert run("add", str(new)).exit_code != 0  # duplicate id without --replace
    assert run("remove", "io").exit_code == 0
    assert not (docs / "io.md").exists() and "io" not in _indexed_ids(settings)
    assert run("list").exit_code == 0 and run("show", "dns").exit_code == 0
    assert run("show", "nope").exit_code != 0


def test_cli_failed_add_changes_nothing(kb_cli, tmp_path: Path) -> None:
    run, settings = kb_cli
    docs = settings.knowledge.docs_dir
    before = sorted(p.name for p in docs.iterdir())
    bad = _write(tmp_path, "bad", "io fault", "io_util", "x", "y")
    bad.write_text(bad.read_text().replace('fault_type = "io fault"', 'fault_type = "disk melt"'))
    result = run("add", str(bad))
    assert result.exit_code != 0
    assert "fault_type" in result.output and "bad.md" in result.output
    assert sorted(p.name for p in docs.iterdir()) == before


def test_cli_validate(kb_cli, tmp_path: Path) -> None:
    run, settings = kb_cli
    assert run("validate").exit_code == 0
    broken = tmp_path / "broken.md"
    broken.write_text('+++\nid = "broken"\ntitle = \n+++\nbody\n')
    result = run("validate", str(broken))
    assert result.exit_code == 1 and "broken.md:3" in result.output and "invalid TOML" in result.output
