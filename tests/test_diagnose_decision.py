import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from diagnose.cases import Case
from diagnose.decide import DecisionError, decide
from diagnose.pipeline import diagnose_case, names_other_fault_types
from diagnose.prompt import approx_tokens, build_prompt, decision_schema, shown_evidence, static_system_prompt
from diagnose.record import RunRecord
from diagnose.runner import finished_uuids, run_cases
from index.models import Candidate, EvidenceItem
from rca.challenge import EARLY, LATE
from rca.settings import load_settings
from rca.system import bundled_system
from tests.fakes import RecordedBackend, StaticEvidence, StaticKnowledge

T0 = datetime(2025, 6, 5, 16, 10, 2, tzinfo=UTC)
T1 = datetime(2025, 6, 5, 16, 31, 2, tzinfo=UTC)


def _candidates() -> list[Candidate]:
    cpu = EvidenceItem(modality="metric", signal="level", key="pod_cpu_usage", component="emailservice-1", text="pod_cpu_usage up 4.1x (z=9.3) on emailservice-1 from 16:11", magnitude=9.3, onset=datetime(2025, 6, 5, 16, 11, tzinfo=UTC))
    rrt = EvidenceItem(modality="metric", signal="level", key="rrt", component="emailservice", text="rrt up 2.0x (z=5.0) on emailservice", magnitude=5.0)
    edge = EvidenceItem(modality="trace", signal="latency", caller="checkoutservice", callee="emailservice", key="checkoutservice->emailservice", component="emailservice", text="checkoutservice->emailservice p95 up 3.0x", magnitude=6.0)
    noise = EvidenceItem(modality="log", signal="burst", example="Injected error", key="Injected error", component="adservice", text="Injected error x1.1 on adservice-0", magnitude=1.0)
    return [
        Candidate(component="emailservice", level="service", score=0.9, score_breakdown={"metric": 0.6, "trace": 0.3}, evidence=[cpu, rrt, edge]),
        Candidate(component="checkoutservice", level="service", score=0.4, evidence=[edge]),
        Candidate(component="adservice", level="service", score=0.1, evidence=[noise]),
    ]


def _one_turn_settings():
    return load_settings(environ={}, overrides={"diagnose": {"confirm_fault_type": False}})


def _case() -> Case:
    return Case(uuid="345fbe93-80", description="x", start=T0, end=T1)


def _reply(component="emailservice", fault_type="cpu stress", reason="cpu stress: pod_cpu_usage saturated") -> str:
    return json.dumps({"component": component, "fault_type": fault_type, "reason": reason})


def test_schema_allows_exactly_the_candidates_with_their_possible_fault_types() -> None:
    schema = decision_schema(["adservice", "aiops-k8s-03", "cartservice-1"], system=bundled_system())
    branches = {b["properties"]["component"]["const"]: b["properties"]["fault_type"]["enum"] for b in schema["anyOf"]}
    assert list(branches) == ["adservice", "aiops-k8s-03", "cartservice-1"]
    assert branches["aiops-k8s-03"] == ["node cpu stress", "node memory stress", "node disk fill"]
    assert "jvm gc" in branches["adservice"] and "jvm gc" not in branches["cartservice-1"]
    assert "io fault" not in branches["cartservice-1"] and "node cpu stress" not in branches["cartservice-1"]


def test_impossible_pair_is_repaired() -> None:
    backend = RecordedBackend([_reply(fault_type="jvm gc"), _reply()])
    prompt = build_prompt(catalogue=[], uuid="u", window="w", candidates=_candidates(), sops=[], max_tokens=3000, system=bundled_system())
    outcome = decide(backend, prompt, ["emailservice", "checkoutservice"], system=bundled_system())
    assert outcome.repaired and outcome.decision.fault_type == "cpu stress"
    assert "cannot happen to emailservice" in backend.requests[1]["messages"][-1]["content"]


def test_invalid_reply_gets_one_repair_quoting_the_error() -> None:
    backend = RecordedBackend([_reply(component="frontend"), _reply()])
    prompt = build_prompt(catalogue=StaticKnowledge().catalogue(), uuid="u", window="w", candidates=_candidates(), sops=[], max_tokens=3000, system=bundled_system())
    outcome = decide(backend, prompt, ["emailservice", "checkoutservice"], system=bundled_system())
    assert outcome.decision.component == "emailservice"
    assert outcome.repaired and outcome.calls == 2
    repair_turn = backend.requests[1]["messages"][-1]["content"]
    assert "component" in repair_turn and "emailservice, checkoutservice" in repair_turn


def test_still_invalid_after_repair_raises() -> None:
    backend = RecordedBackend(["not json", "{}"])
    prompt = build_prompt(catalogue=[], uuid="u", window="w", candidates=_candidates(), sops=[], max_tokens=3000, system=bundled_system())
    with pytest.raises(DecisionError):
        decide(backend, prompt, ["emailservice"], system=bundled_system())


def test_self_consistency_majority_vote() -> None:
    backend = RecordedBackend([_reply(component="checkoutservice"), _reply(), _reply()])
    prompt = build_prompt(catalogue=[], uuid="u", window="w", candidates=_candidates(), sops=[], max_tokens=3000, system=bundled_system())
    outcome = decide(backend, prompt, ["emailservice", "checkoutservice"], samples=3, system=bundled_system())
    assert outcome.decision.component == "emailservice"
    assert outcome.votes == {"checkoutservice|cpu stress": 1, "emailservice|cpu stress": 2}
    assert all(r["temperature"] > 0 for r in backend.requests)


def test_prompt_budget_drops_evidence_not_candidates() -> None:
    many = [c.model_copy(update={"evidence": c.evidence * 10}) for c in _candidates()]
    system_tokens = approx_tokens(static_system_prompt(StaticKnowledge().catalogue(), system=bundled_system()))
    limit = system_tokens + 120
    prompt = build_prompt(catalogue=StaticKnowledge().catalogue(), uuid="u", window="w", candidates=many, sops=[],
                          max_tokens=limit, system=bundled_system())
    assert prompt.approx_tokens <= limit
    assert prompt.dropped_evidence > 0
    assert all(c.component in prompt.messages[1]["content"] for c in many)


def test_static_prefix_identical_across_cases() -> None:
    cat = StaticKnowledge().catalogue()
    a = build_prompt(catalogue=cat, uuid="a", window="w1", candidates=_candidates(), sops=[], max_tokens=3000, system=bundled_system())
    b = build_prompt(catalogue=cat, uuid="b", window="w2", candidates=_candidates()[1:], sops=[], max_tokens=3000, system=bundled_system())
    assert a.messages[0] == b.messages[0]


def test_case_answer_follows_the_model_and_shapes_the_trace() -> None:
    settings = _one_turn_settings()
    backend = RecordedBackend([_reply(component="checkoutservice", fault_type="pod failure", reason="errors")])
    record = diagnose_case(_case(), settings=settings, llm=backend, evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge())
    answer = record.answer
    assert answer.component == "checkoutservice"  # the model's choice stands, even against the index
    assert record.agreed_with_index is False
    assert answer.reason.startswith("pod failure on checkoutservice")
    # Late rules score only the first 20 words: they must carry the fault type and a key metric.
    scored = " ".join(answer.reason.split()[:20])
    assert "pod failure" in scored and ("pod_processes" in scored or "error_ratio" in scored)
    steps = answer.reasoning_trace
    assert 2 <= len(steps) <= 5 and [s.step for s in steps] == list(range(1, len(steps) + 1))
    assert all(len(s.observation) <= 100 for s in steps)
    assert steps[0].observation.startswith("pod_cpu_usage") or steps[0].observation.startswith("rrt")
    assert steps[1].observation.startswith("checkoutservice->emailservice")
    assert steps[-1].action.startswith("decision")
    assert answer.time == "2025-06-05 16:10:02"


def test_agreement_and_time_from_onset() -> None:
    settings = _one_turn_settings()
    record = diagnose_case(_case(), settings=settings, llm=RecordedBackend([_reply()]), evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge())
    assert record.agreed_with_index is True
    assert record.answer.time == "2025-06-05 16:11:00"
    assert "pod_cpu_usage" in " ".join(record.answer.reason.split()[:20])
    assert set(record.answer.to_submission(rules=LATE)) == {"uuid", "component", "reason", "reasoning_trace"}


def test_trace_shows_the_sop_signal_check_of_the_chosen_type() -> None:
    settings = _one_turn_settings()
    record = diagnose_case(_case(), settings=settings, llm=RecordedBackend([_reply()]), evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge())
    steps = record.answer.reasoning_trace
    check = next(s for s in steps if s.action.startswith("SOP signal check"))
    assert check.observation == "pod_cpu_usage up: cpu stress signals 1/1"
    assert check.step == len(steps) - 1 and len(steps) <= 5
    assert record.model_dump(mode="json")["signature_matches"]["emailservice"] == ["cpu stress 1/1 (pod_cpu_usage up)"]


def test_reason_quotes_sop_keywords_seen_in_logs() -> None:
    rule = EvidenceItem(modality="log", signal="new_template", key="WARN [TransformListener]…adservice--gc", component="adservice-0",
                        example="WARN [TransformListener] applying rule adservice--gc (GCHelper.triggerFullGC)",
                        text="WARN [TransformListener]…rule adservice--gc (GCHelper.triggerFullGC) x39 (new) on adservice-0")
    candidates = [Candidate(component="adservice", level="service", score=1.0, evidence=[rule])]
    knowledge = StaticKnowledge({"jvm gc": ["adservice--gc", "GCHelper", "rrt"]})
    record = diagnose_case(_case(), settings=_one_turn_settings(), llm=RecordedBackend([_reply("adservice", "jvm gc", "gc pauses")]),
                           evidence=StaticEvidence(candidates), knowledge=knowledge)
    assert record.answer.reason.startswith("jvm gc on adservice (adservice--gc, GCHelper)")


def test_confirmation_turn_settles_the_fault_type_in_the_same_conversation() -> None:
    # Every type open (decide_among = "candidates"), so the first turn may guess one the second corrects.
    settings = load_settings(environ={}, overrides={"diagnose": {"confirm_fault_type": True,
                                                                 "decide_among": "candidates"}})
    backend = RecordedBackend([
        json.dumps({"component": "emailservice", "fault_type": "memory stress"}),
        json.dumps({"fault_type": "cpu stress", "reason": "cpu stress: pod_cpu_usage up 4.1x"}),
    ])
    record = diagnose_case(_case(), settings=settings, llm=backend, evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge())
    first, second = backend.requests
    assert "reason" not in first["json_schema"]["anyOf"][0]["properties"]  # the first turn only chooses
    assert second["messages"][:len(first["messages"])] == first["messages"]  # prefix reused
    assert second["messages"][-2]["role"] == "assistant"
    turn = second["messages"][-1]["content"]
    assert turn.startswith("Now settle the fault type of emailservice")
    assert "pod_cpu_usage up 4.1x" in turn and "cpu stress 1/1 (pod_cpu_usage up)" in turn
    assert set(second["json_schema"]["properties"]["fault_type"]["enum"]) >= {"cpu stress", "memory stress"}
    assert record.first_fault_type == "memory stress"
    assert record.answer.reason.startswith("cpu stress on emailservice")
    assert record.model_dump(mode="json")["usage"]["calls"] == 2


def test_invalid_confirmation_is_repaired_with_the_allowed_types() -> None:
    backend = RecordedBackend([
        json.dumps({"component": "emailservice", "fault_type": "cpu stress"}),
        json.dumps({"fault_type": "node disk fill", "reason": "disk is full"}),
        json.dumps({"fault_type": "cpu stress", "reason": "cpu stress: pod_cpu_usage"}),
    ])
    record = diagnose_case(_case(), settings=load_settings(environ={}, overrides={"diagnose": {"confirm_fault_type": True}}), llm=backend,
                           evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge())
    repair = backend.requests[2]["messages"][-1]["content"]
    assert "'node disk fill' cannot happen to emailservice" in repair and "cpu stress" in repair
    assert record.repaired and record.decision.fault_type == "cpu stress"


def test_batch_is_resumable_and_drops_torn_line(tmp_path: Path) -> None:
    settings = _one_turn_settings()
    out = tmp_path / "result.jsonl"
    cases = [Case(uuid=f"c{i}", description="x", start=T0, end=T1) for i in range(3)]
    out.write_text(json.dumps({"uuid": "c0"}) + "\n" + '{"uuid": "c1", "comp')  # c1 torn by a kill
    backend = RecordedBackend([_reply(), _reply()])
    summary = run_cases(
        cases,
        diagnose_one=lambda c: diagnose_case(c, settings=settings, llm=backend, evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge()),
        out_path=out, runs_dir=tmp_path / "runs", rules=EARLY, show_progress=False,
    )
    assert summary.skipped == ["c0"] and sorted(summary.done) == ["c1", "c2"]
    assert finished_uuids(out) == {"c0", "c1", "c2"}
    run = json.loads((tmp_path / "runs" / "c2.json").read_text())
    assert run["agreed_with_index"] is True and run["usage"]["calls"] == 1 and run["raw_responses"]


def test_one_level_per_service_keeps_the_best_ranked_sibling() -> None:
    from diagnose.pipeline import one_level_per_service

    names = ["cartservice", "cartservice-1", "aiops-k8s-03", "emailservice-2", "emailservice", "paymentservice-0"]
    ranked = [Candidate(component=n, level="service", score=1.0) for n in names]
    assert [c.component for c in one_level_per_service(ranked, system=bundled_system())] == ["cartservice", "aiops-k8s-03", "emailservice-2", "paymentservice-0"]


def test_prepare_offers_distinct_services(tmp_path: Path) -> None:
    from diagnose.pipeline import prepare_case

    settings = _one_turn_settings()
    prepared = prepare_case(_case(), settings=settings, evidence=StaticEvidence(_candidates() + [Candidate(component="emailservice-1", level="pod", score=0.05)]), knowledge=StaticKnowledge())
    assert [c.component for c in prepared.candidates] == ["emailservice", "checkoutservice", "adservice"]


def test_trace_reports_a_signal_check_that_found_nothing() -> None:
    reply = _reply(component="emailservice", fault_type="pod failure", reason="pod failure: errors")
    every_type = load_settings(environ={}, overrides={"diagnose": {"decide_among": "candidates"}})
    record = diagnose_case(_case(), settings=every_type, llm=RecordedBackend([reply]),
                           evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge())
    steps = record.answer.reasoning_trace
    assert 3 <= len(steps) <= 5
    check = next(s for s in steps if s.action.startswith("SOP signal check"))
    assert check.observation == "pod_cpu_usage: no documented pod failure signal in the evidence"


def test_record_keeps_the_rules_only_answer_beside_the_model_answer() -> None:
    # The model overrules the index; the record still says what the rules alone would answer.
    settings = _one_turn_settings()
    reply = _reply(component="checkoutservice", fault_type="pod failure", reason="errors towards emailservice")
    record = diagnose_case(_case(), settings=settings, llm=RecordedBackend([reply]),
                           evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge())
    saved = RunRecord.model_validate_json(record.model_dump_json())  # as read back from its file
    assert saved.answer.component == "checkoutservice"
    assert saved.rules_answer.component == "emailservice" and saved.rules_fault_type == "cpu stress"
    assert saved.rules_answer.reason.startswith("cpu stress on emailservice (pod_cpu_usage")
    assert 2 <= len(saved.rules_answer.reasoning_trace) <= 5


def test_late_rules_shape_the_answer_the_judge_accepts() -> None:
    # One setting drives both sides: the diagnoser's answer under [challenge] rules = "late"
    # passes the judge's own parser under the same rule version, and each observation is
    # within the 20 words late rules score.
    from judge.validation import check_submission

    settings = load_settings(config_path=None, environ={}, overrides={
        "diagnose": {"confirm_fault_type": False}, "challenge": {"rules": "late"}})
    backend = RecordedBackend([_reply(component="checkoutservice", fault_type="pod failure", reason="errors")])
    record = diagnose_case(_case(), settings=settings, llm=backend, evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge())
    line = record.answer.to_submission(rules=LATE)
    assert "time" not in line
    assert all(len(step["observation"].split()) <= 20 for step in line["reasoning_trace"])
    check = check_submission([json.dumps(line)], truth_uuids=[record.uuid], rules=LATE)
    assert check.valid, check
    early = check_submission([json.dumps(record.answer.to_submission(rules=EARLY))], truth_uuids=[record.uuid], rules=EARLY)
    assert early.valid and "time" in record.answer.to_submission(rules=EARLY)


def test_schema_narrows_each_candidate_to_its_open_fault_types() -> None:
    schema = decision_schema(["adservice", "cartservice-1"], fault_types={"adservice": ["jvm gc", "jvm cpu"]}, system=bundled_system())
    branches = {b["properties"]["component"]["const"]: b["properties"]["fault_type"]["enum"] for b in schema["anyOf"]}
    assert branches["adservice"] == ["jvm gc", "jvm cpu"]
    assert "cpu stress" in branches["cartservice-1"]  # not narrowed: every type it can suffer


def test_a_type_outside_the_open_ones_is_repaired() -> None:
    backend = RecordedBackend([_reply(fault_type="memory stress"), _reply()])
    prompt = build_prompt(catalogue=[], uuid="u", window="w", candidates=_candidates(), sops=[], max_tokens=3000, system=bundled_system())
    outcome = decide(backend, prompt, ["emailservice", "checkoutservice"],
                     fault_types={"emailservice": ["cpu stress", "pod failure"]}, system=bundled_system())
    assert outcome.repaired and outcome.decision.fault_type == "cpu stress"
    assert "choose from cpu stress, pod failure" in backend.requests[1]["messages"][-1]["content"]


def test_contenders_setting_narrows_the_choice_and_records_it() -> None:
    # emailservice (0.9) leads checkoutservice (0.4) 2.25x and adservice (0.1) 9x: with
    # decide_among = "contenders" the model chooses between the first two only.
    settings = load_settings(environ={}, overrides={"diagnose": {"decide_among": "contenders"}})
    backend = RecordedBackend([_reply()])
    record = diagnose_case(_case(), settings=settings, llm=backend, evidence=StaticEvidence(_candidates()),
                           knowledge=StaticKnowledge())
    # The pipeline asks for the candidates' numbers in the prompt (1 and 2), not their names.
    branches = [b["properties"]["candidate"]["const"] for b in backend.requests[0]["json_schema"]["anyOf"]]
    assert branches == [1, 2]
    assert backend.requests[0]["messages"][1]["content"].splitlines()[-1].startswith(
        "Choose: 1 (cpu stress")
    # The grammar holds the same open types, best first.
    assert backend.requests[0]["json_schema"]["anyOf"][0]["properties"]["fault_type"]["enum"][0] == "cpu stress"
    saved = RunRecord.model_validate_json(record.model_dump_json())  # as read back from its file
    assert list(saved.choices) == ["emailservice", "checkoutservice"]
    assert saved.choices["emailservice"][0] == "cpu stress"  # the rules' best fit is always open
    assert saved.answer.component == "emailservice"
    # "candidates" offers every candidate.
    every = RecordedBackend([_reply()])
    diagnose_case(_case(), settings=load_settings(environ={}, overrides={"diagnose": {"decide_among": "candidates"}}),
                  llm=every, evidence=StaticEvidence(_candidates()), knowledge=StaticKnowledge())
    assert len(every.requests[0]["json_schema"]["anyOf"]) == 3


def test_the_prompt_shows_a_log_line_even_when_stronger_metrics_would_crowd_it_out() -> None:
    """A runtime's own error wording is what the model reads better than the SOP keywords;
    ranked by z alone, the one log line below is the fifth item and was cut at four."""
    metrics = [
        EvidenceItem(modality="metric", signal="level", key=f"kpi_{i}", component="checkoutservice",
                     text=f"kpi_{i} up (z={20 - i}) on checkoutservice", magnitude=20.0 - i)
        for i in range(4)
    ]
    log = EvidenceItem(modality="log", signal="new_template", key="name resolver error", component="checkoutservice-0",
                       text="could not retrieve cart: name resolver error: produced zero addresses x6 (new)", magnitude=3.0)
    candidate = Candidate(component="checkoutservice", level="service", score=2.0, evidence=[*metrics, log])
    shown = shown_evidence(candidate, 4)
    assert len(shown) == 4 and log in shown
    assert shown == [metrics[0], metrics[1], metrics[2], log]  # the candidate's own order is kept
    assert shown_evidence(candidate, 10) == candidate.evidence
    prompt = build_prompt(catalogue=[], uuid="u", window="w", candidates=[candidate], sops=[], max_tokens=3000, system=bundled_system())
    assert "name resolver error" in prompt.messages[1]["content"]


def test_the_decision_reply_is_component_and_fault_type_only() -> None:
    """Every reply token is a decode step (~90 ms on 2 cores): the schema asks for no free text,
    and the answer's reason is the code-built head from the chosen candidate's evidence."""
    schema = decision_schema(["emailservice", "checkoutservice"], system=bundled_system())
    assert all(branch["required"] == ["component", "fault_type"] for branch in schema["anyOf"])
    backend = RecordedBackend([_reply(component="emailservice", fault_type="cpu stress", reason="ignored words")])
    record = diagnose_case(_case(), settings=_one_turn_settings(), llm=backend, evidence=StaticEvidence(_candidates()),
                           knowledge=StaticKnowledge())
    assert record.answer.reason == "cpu stress on emailservice (pod_cpu_usage, rrt)"


@pytest.mark.parametrize(("model_reason", "kept"), [
    ("emailservice: cpu stress or network loss or pod failure", False),  # the open choices, copied
    ("cpu stress: pod_cpu_usage saturated, mails time out", True),
    ("network loss: packets to emailservice dropped", False),  # names another fault than answered
])
def test_a_reason_naming_other_fault_types_keeps_only_the_code_built_head(model_reason: str, kept: bool) -> None:
    # The confirmation turn (``confirm_fault_type``) is where the model still writes a reason.
    settings = load_settings(environ={}, overrides={"diagnose": {"confirm_fault_type": True}})
    backend = RecordedBackend([_reply(component="emailservice", fault_type="cpu stress"),
                               json.dumps({"fault_type": "cpu stress", "reason": model_reason})])
    record = diagnose_case(_case(), settings=settings, llm=backend, evidence=StaticEvidence(_candidates()),
                           knowledge=StaticKnowledge())
    reason = record.answer.reason
    assert reason.startswith("cpu stress on emailservice")
    assert ("time out" in reason) is kept
    assert "network loss" not in reason and "pod failure" not in reason


def test_fault_type_names_inside_longer_ones_are_told_apart() -> None:
    assert names_other_fault_types("node cpu stress on aiops-k8s-03", "node cpu stress") == []
    assert names_other_fault_types("cpu stress, not node cpu stress", "cpu stress") == ["node cpu stress"]
    assert names_other_fault_types("jvm gc pauses", "cpu stress") == ["jvm gc"]


def test_the_runbooks_distinctions_between_open_fault_types_close_the_prompt() -> None:
    # Both cpu stress (pod_cpu_usage) and memory stress (rrt, in this fake) fit emailservice one
    # signal each, so both are open: the runbook note on how they differ follows the choice.
    knowledge = StaticKnowledge({"cpu stress": ["pod_cpu_usage"], "memory stress": ["rrt"]},
                                notes={("cpu stress", "memory stress"): "pod_memory_working_set_bytes moves instead of CPU."})
    settings = load_settings(environ={}, overrides={"diagnose": {"decide_among": "contenders"}})
    backend = RecordedBackend([_reply()])
    record = diagnose_case(_case(), settings=settings, llm=backend, evidence=StaticEvidence(_candidates()),
                           knowledge=knowledge)
    assert record.choices["emailservice"] == ["cpu stress", "memory stress"]
    user = backend.requests[0]["messages"][1]["content"]
    note = "- memory stress rather than cpu stress: pod_memory_working_set_bytes moves instead of CPU."
    assert note in user and user.index(note) < user.index("Choose: ")
    quiet = RecordedBackend([_reply()])
    diagnose_case(_case(), settings=load_settings(environ={}, overrides={"diagnose": {"max_distinctions": 0}}),
                  llm=quiet, evidence=StaticEvidence(_candidates()), knowledge=knowledge)
    assert "rather than" not in quiet.requests[0]["messages"][1]["content"]


def test_a_numbered_reply_names_the_candidate_shown_under_that_number() -> None:
    """The model answers a number; the decision is the candidate shown under it, and a number
    outside the open choices is repaired like any invalid reply."""
    numbers = {"emailservice": 1, "checkoutservice": 2, "adservice": 3}
    backend = RecordedBackend([json.dumps({"candidate": 3, "fault_type": "cpu stress"}),
                               json.dumps({"candidate": 2, "fault_type": "cpu stress"})])
    prompt = build_prompt(catalogue=[], uuid="u", window="w", candidates=_candidates(), sops=[], max_tokens=3000, system=bundled_system())
    outcome = decide(backend, prompt, ["emailservice", "checkoutservice"], numbers=numbers, system=bundled_system())
    assert outcome.repaired and outcome.decision.component == "checkoutservice"
    assert "candidate must be one of: 1, 2" in backend.requests[1]["messages"][-1]["content"]
    schema = backend.requests[0]["json_schema"]
    assert [b["properties"]["candidate"] for b in schema["anyOf"]] == [{"type": "integer", "const": 1},
                                                                      {"type": "integer", "const": 2}]
    # A provider that only reads the schema from the prompt may still name the candidate.
    named = decide(RecordedBackend([_reply(component="emailservice")]), prompt, ["emailservice", "checkoutservice"],
                   numbers=numbers, system=bundled_system())
    assert named.decision.component == "emailservice" and not named.repaired


def test_the_pipeline_maps_the_number_it_showed_back_to_that_candidate() -> None:
    """Through diagnose_case: the reply's number is the candidate the prompt showed under it."""
    settings = load_settings(environ={}, overrides={"diagnose": {"decide_among": "candidates",
                                                                  "confirm_fault_type": False}})
    backend = RecordedBackend([json.dumps({"candidate": 3, "fault_type": "jvm gc"})])
    record = diagnose_case(_case(), settings=settings, llm=backend, evidence=StaticEvidence(_candidates()),
                           knowledge=StaticKnowledge())
    case_text = backend.requests[0]["messages"][1]["content"]
    assert "\n3. adservice " in case_text and case_text.splitlines()[-1] == "Choose: 1 or 2 or 3."
    assert record.answer.component == "adservice" and record.decision.fault_type == "jvm gc"
    assert not record.repaired


def test_a_reply_whose_number_and_name_disagree_is_repaired() -> None:
    numbers = {"emailservice": 1, "checkoutservice": 2}
    backend = RecordedBackend([json.dumps({"candidate": 1, "component": "checkoutservice", "fault_type": "cpu stress"}),
                               json.dumps({"candidate": 2, "fault_type": "cpu stress"})])
    prompt = build_prompt(catalogue=[], uuid="u", window="w", candidates=_candidates(), sops=[], max_tokens=3000, system=bundled_system())
    outcome = decide(backend, prompt, ["emailservice", "checkoutservice"], numbers=numbers, system=bundled_system())
    assert outcome.repaired and outcome.decision.component == "checkoutservice"
    assert "candidate: 1 is emailservice, not checkoutservice" in backend.requests[1]["messages"][-1]["content"]
    with pytest.raises(DecisionError, match="adservice have no number"):
        decide(RecordedBackend([]), prompt, ["emailservice", "adservice"], numbers=numbers, system=bundled_system())


@pytest.mark.parametrize(("first_score", "model_pick", "expected"), [
    (5.0, "emailservice", "high"),  # the index's first, strongly backed
    (5.0, "checkoutservice", "low"),  # away from the index's first: less evidence than the first had
    (0.9, "emailservice", "low"),  # the index's first, weakly backed
], ids=["first-strong", "other", "first-weak"])
def test_the_record_says_how_far_the_answer_can_be_trusted(first_score, model_pick, expected) -> None:
    candidates = _candidates()
    candidates[0] = candidates[0].model_copy(update={"score": first_score})
    record = diagnose_case(_case(), settings=_one_turn_settings(), llm=RecordedBackend([_reply(component=model_pick)]),
                           evidence=StaticEvidence(candidates), knowledge=StaticKnowledge())
    assert record.answer.component == model_pick
    assert record.confidence == expected
