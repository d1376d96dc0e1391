"""Validation of SOP documents: schema, error messages naming file, field and line."""
from __future__ import annotations

from pathlib import Path

import pytest

from knowledge.documents import (
    SHIPPED_DOCS_DIR,
    DocumentError,
    load_documents,
    parse_document,
    read_document,
    split_sections,
    validate_directory,
)
from rca.taxonomy import FAULT_TYPES

VALID = '''+++
id = "demo-fault"
title = "Demo fault document"
kind = "fault"
fault_type = "cpu stress"
fault_category = "stress test"
levels = ["service", "pod"]
key_metrics = ["pod_cpu_usage"]
reason_template = "cpu stress: pod_cpu_usage of {component} saturated"
+++
# Demo fault document

## Metrics
pod_cpu_usage goes up.

## Logs
Nothing.
'''


def _with(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


def test_valid_document_parses_into_sections() -> None:
    document = parse_document(VALID, source="demo-fault.md", expected_id="demo-fault")
    assert document.meta.fault_type == "cpu stress"
    assert [s.heading for s in document.sections] == ["Metrics", "Logs"]
    assert len(document.content_hash) == 64


@pytest.mark.parametrize(("old", "new", "field", "line"), [
    ('fault_type = "cpu stress"\n', "", "fault_type", None),                      # missing
    ('fault_type = "cpu stress"', 'fault_type = "cpu melt"', "fault_type", 5),      # unknown type
    ('fault_category = "stress test"', 'fault_category = "node fault"', "fault_category", 6),
    ('kind = "fault"', 'kind = "recipe"', "kind", 4),
    ('levels = ["service", "pod"]', 'levels = ["cluster"]', "levels.0", 7),
    ('key_metrics = ["pod_cpu_usage"]', "key_metrics = []", "key_metrics", 8),
    ('title = "Demo fault document"\n', "", "title", None),
    ('id = "demo-fault"', 'id = "Demo Fault"', "id", 2),
    ('+++\n# Demo', 'colour = "red"\n+++\n# Demo', "colour", 10),                # unknown field
])
def test_invalid_field_is_named_with_file_and_line(old: str, new: str, field: str, line: int | None) -> None:
    with pytest.raises(DocumentError) as info:
        parse_document(_with(VALID, old, new), source="docs/demo-fault.md")
    assert info.value.field == field
    assert info.value.line == line
    assert "docs/demo-fault.md" in str(info.value) and f"field '{field}'" in str(info.value)


def test_bad_toml_names_file_and_line() -> None:
    broken = _with(VALID, 'levels = ["service", "pod"]', 'levels = ["service", "pod"')
    with pytest.raises(DocumentError) as info:
        parse_document(broken, source="x/demo-fault.md")
    assert "x/demo-fault.md" in str(info.value) and "invalid TOML" in str(info.value)
    assert info.value.line is not None and info.value.line >= 7


@pytest.mark.parametrize(("text", "needle"), [
    ("no front matter\n", "must start"),
    ('+++\nid = "a"\n', "not closed"),
    (VALID.split("# Demo")[0], "body is empty"),
])
def test_structural_errors(text: str, needle: str) -> None:
    with pytest.raises(DocumentError, match=needle):
        parse_document(text, source="f.md")


def test_guide_must_not_name_fault_type() -> None:
    guide = _with(VALID, 'kind = "fault"', 'kind = "guide"')
    with pytest.raises(DocumentError) as info:
        parse_document(guide, source="g.md")
    assert info.value.field == "fault_type"


def test_id_must_match_file_name(tmp_path: Path) -> None:
    path = tmp_path / "other-name.md"
    path.write_text(VALID, encoding="utf-8")
    with pytest.raises(DocumentError) as info:
        read_document(path)
    assert info.value.field == "id" and str(path) in str(info.value)


def test_validate_directory_reports_every_bad_file(tmp_path: Path) -> None:
    (tmp_path / "demo-fault.md").write_text(VALID, encoding="utf-8")
    (tmp_path / "bad-one.md").write_text(_with(VALID, 'id = "demo-fault"', 'id = "bad-one"').replace("cpu stress", "x"), encoding="utf-8")
    (tmp_path / "bad-two.md").write_text("oops", encoding="utf-8")
    problems = validate_directory(tmp_path)
    assert sorted(Path(p.source).name for p in problems) == ["bad-one.md", "bad-two.md"]


def test_split_sections_keeps_preamble_as_overview() -> None:
    sections = split_sections("# Title\nintro line\n## A\ntext a\n## B\ntext b")
    assert [(s.heading, s.text) for s in sections] == [("Overview", "intro line"), ("A", "text a"), ("B", "text b")]


def test_shipped_documents_cover_every_fault_type_once() -> None:
    documents = load_documents(SHIPPED_DOCS_DIR)
    fault_types = [d.meta.fault_type for d in documents if d.meta.kind == "fault"]
    assert sorted(fault_types) == sorted(FAULT_TYPES)
    guides = {d.id for d in documents if d.meta.kind == "guide"}
    assert {"guide-locating-level", "guide-root-cause-vs-victim", "guide-background-noise",
            "guide-network-direction"} <= guides
    for document in documents:
        if document.meta.kind == "fault":
            # the canonical reason names the fault type and at least one of its KPIs
            reason = document.meta.reason_template or ""
            assert reason.startswith(document.meta.fault_type + ":")
            assert any(metric.lower() in reason.lower() for metric in document.meta.key_metrics), document.id


def test_look_alike_notes_name_the_fault_types_a_bullet_is_about() -> None:
    text = VALID + '''
## Look-alikes
- node cpu stress: `node_cpu_usage_rate` of one node is the headline.
- network delay / network corrupt: latency on one call edge
  while the callee's CPU stays flat.
- The victim is the caller: not a fault type, so no note.
'''
    notes = parse_document(text, source="demo-fault.md").look_alike_notes()
    assert notes == {
        "node cpu stress": "`node_cpu_usage_rate` of one node is the headline.",
        "network delay": "latency on one call edge while the callee's CPU stays flat.",
        "network corrupt": "latency on one call edge while the callee's CPU stays flat.",
    }
    assert "cpu stress" not in notes  # inside "node cpu stress", not a mention of its own


def test_the_shipped_runbooks_say_how_the_often_confused_pairs_differ() -> None:
    """Pairs the rules' signal counts often tie on (docs/generalisation.md): each has a note
    the model is shown when both are open."""
    notes = {d.meta.fault_type: d.look_alike_notes() for d in load_documents(SHIPPED_DOCS_DIR) if d.meta.fault_type}
    for fault, other in [("pod failure", "pod kill"), ("pod failure", "target port misconfig"),
                         ("network loss", "dns error"), ("dns error", "network loss"),
                         ("network loss", "network delay"), ("network corrupt", "cpu stress"),
                         ("io fault", "pod failure"), ("cpu stress", "jvm cpu")]:
        assert other in notes[fault], f"{fault}: no look-alike note on {other}"
