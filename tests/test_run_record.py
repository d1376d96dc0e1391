"""One record per case: the diagnosis returns the RunRecord it writes, and files read back as it.

``tests/data/run_record_v2.json`` was written for the case below by the mapping this record
replaced (``CaseRecord.to_record``; prompt texts shortened), so it pins the file format.
"""
import json
from pathlib import Path
from typing import Any

import pytest

from diagnose.answer import Answer
from diagnose.decide import Decision
from diagnose.pipeline import CaseFailed, diagnose_case
from diagnose.record import RecordError, RunRecord
from index.models import Candidate
from tests.fakes import RecordedBackend, StaticEvidence, StaticKnowledge
from tests.test_diagnose_decision import _candidates, _case, _one_turn_settings, _reply

OLD_FILE = Path(__file__).parent / "data" / "run_record_v2.json"


def _diagnosed() -> RunRecord:
    return diagnose_case(_case(), settings=_one_turn_settings(), llm=RecordedBackend([_reply()]),
                         evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge())


def _filled(document: dict[str, Any]) -> set[str]:
    return {key for key, value in document.items() if value not in (None, [], {}, False)}


def test_the_diagnosis_returns_the_record_it_writes_and_reads_it_back(tmp_path: Path) -> None:
    record = _diagnosed()
    assert isinstance(record, RunRecord)
    path = tmp_path / f"{record.uuid}.json"
    path.write_text(record.model_dump_json())
    loaded = RunRecord.load(path)
    assert loaded == record
    assert isinstance(loaded.answer, Answer) and isinstance(loaded.rules_answer, Answer)
    assert isinstance(loaded.decision, Decision) and all(isinstance(c, Candidate) for c in loaded.candidates)
    assert loaded.final_answer().component == "emailservice" == loaded.decision.component == loaded.index_top
    assert loaded.agreed_with_index is True and loaded.rules_fault_type == "cpu stress"
    assert loaded.usage.calls == 1 and loaded.usage.model == "recorded" and loaded.raw_responses == [_reply()]
    assert [c.component for c in loaded.candidates] == [c.component for c in _candidates()]
    assert loaded.prompt is not None and loaded.prompt.messages[-1]["content"]
    assert {"index_s", "retrieve_s", "llm_s", "total_s"} <= set(loaded.timings_s)


def test_the_record_carries_what_the_replaced_mapping_wrote() -> None:
    old = json.loads(OLD_FILE.read_text())
    new = _diagnosed().model_dump(mode="json")
    # Same fields, same order, and one added since: how far the answer can be trusted ...
    assert new.pop("confidence") in ("high", "low")
    # ... and on every evidence line, the share its component's own fault explains (round 22)
    # and, on a slow call, the share of its added time between the spans (round 23; None here).
    for candidate in new["candidates"]:
        for line in candidate["evidence"]:
            assert line.pop("own_share") == 1.0
            assert line.pop("wait_share") is None
    assert list(new) == list(old)
    assert _filled(new) == _filled(old)
    for key in ("rules_answer", "candidates", "sops", "signature_matches", "rules_reading", "index_top", "agreed_with_index", "votes", "missing", "data_status"):
        assert new[key] == old[key], key
    # Since the reply holds no free text (issue 27), the model's words no longer follow the
    # code-built head of the reason; everything else of the answer and decision is as written.
    assert new["answer"]["reason"] == old["answer"]["reason"].split(":")[0]
    assert {**new["answer"], "reason": ""} == {**old["answer"], "reason": ""}
    assert new["decision"] == {**old["decision"], "reason": ""}
    assert {**new["usage"], "prompt_tokens": 0} == {**old["usage"], "prompt_tokens": 0}  # the prompt is shorter
    assert set(new["timings_s"]) == set(old["timings_s"])


@pytest.mark.parametrize("version", [1, 2])
def test_files_of_the_replaced_mapping_stay_readable(tmp_path: Path, version: int) -> None:
    document = json.loads(OLD_FILE.read_text())
    if version == 1:  # before the agent modes: no mode, no agent calls
        document = {k: v for k, v in document.items() if k not in ("mode", "agent_calls")} | {"schema_version": 1}
    path = tmp_path / "case.json"
    path.write_text(json.dumps(document))
    record = RunRecord.load_dir(tmp_path)[0]
    assert record.mode == "pipeline" and record.final_answer().component == "emailservice"
    assert record.decision is not None and record.decision.fault_type == "cpu stress"
    assert record.candidates[0].evidence and record.model_dump(mode="json")["answer"] == document["answer"]


def test_a_failed_case_has_a_record_without_an_answer() -> None:
    with pytest.raises(CaseFailed) as failed:
        diagnose_case(_case(), settings=_one_turn_settings(), llm=RecordedBackend(["not json", "still not json"]),
                      evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge())
    record = failed.value.record
    assert record.status == "failed" and record.answer is None and record.error
    assert record.usage.calls == 2 and record.prompt is not None and record.index_top == "emailservice"
    with pytest.raises(RecordError, match="holds no answer"):
        record.final_answer()
