"""The agent-cloud observation tools: bounded, KPI-led observations; bad calls become observations."""
from __future__ import annotations

import re
from datetime import timedelta

import polars as pl
import pytest

from diagnose.cases import Case
from diagnose.tools import FunctionTool, Observation, Param, Toolbox, ToolSpec, bound, case_toolbox
from index.models import Candidate, EvidenceItem
from preprocess.detect_log import LogDetector, template_keyword
from preprocess.schema import LOG_SCHEMA
from rca.system import bundled_system
from tests.fakes import MINUTES, START, MemoryTelemetry, StaticEvidence, StaticKnowledge

END = START + timedelta(minutes=10)


def _case() -> Case:
    return Case(uuid="case-1", description="incident", start=START, end=END)


def _toolbox(**kwargs) -> tuple[Toolbox, MemoryTelemetry]:
    telemetry = MemoryTelemetry()
    candidate = Candidate(component="cartservice", level="service", score=2.0, evidence=[
        EvidenceItem(modality="metric", key="pod_cpu_usage", component="cartservice-0",
                     text="pod_cpu_usage up 5x (z=40) on cartservice-0", magnitude=40.0, signal="level")])
    toolbox = case_toolbox(_case(), telemetry=telemetry, evidence=StaticEvidence([candidate]), knowledge=StaticKnowledge(),
                           **kwargs, system=bundled_system())
    return toolbox, telemetry


def test_metrics_lead_with_the_changed_kpi_of_the_index_scoring():
    toolbox, telemetry = _toolbox()
    first = toolbox.invoke("get_metrics", {})
    assert first.ok
    assert first.lead.startswith("pod_cpu_usage up 5.0x on cartservice-0")
    assert "frontend-0" not in first.text  # unchanged series are not findings
    toolbox.call("get_metrics", {"component": "cartservice"})
    assert telemetry.reads.count("metrics") <= 1  # only to list the components: the findings are the index scoring


def test_logs_and_traces_summaries():
    toolbox, _ = _toolbox()
    logs = toolbox.invoke("get_logs", {})
    assert logs.lead.startswith("Connection refused")
    assert "NEW in window on redis-cart-0" in logs.lead
    assert "GET /product" not in logs.text  # a steady template is not a finding
    traces = toolbox.invoke("get_traces", {"component": "cartservice"})
    assert traces.lead.startswith("frontend->cartservice p95 10->100 ms (10.0x)")


class _CartUsersTelemetry(MemoryTelemetry):
    """cartservice-0 fails to load three users' carts in the window: three masked lines, one Drain template."""

    def logs(self, *, start, end) -> pl.DataFrame:
        failures = [(t, "hipstershop", "cartservice-0", "aiops-k8s-02",
                     f"could not load cart of user {user}: redis timeout")
                    for t in MINUTES if t >= START for user in ("alice", "bob", "carol")]
        return pl.concat([super().logs(start=start, end=end), pl.DataFrame(failures, schema=LOG_SCHEMA, orient="row")])


def test_logs_name_the_templates_of_the_index():
    """The tool reads the index's templates of the window (those the ranking and the case report name),
    not templates of its own masked from the raw lines (which kept one line per user)."""
    telemetry = _CartUsersTelemetry()
    evidence = StaticEvidence([], telemetry=telemetry)
    toolbox = case_toolbox(_case(), telemetry=telemetry, evidence=evidence, knowledge=StaticKnowledge(), system=bundled_system())
    logs = toolbox.invoke("get_logs", {"component": "cartservice"})
    found = [re.match(r"(.*) x(\d+) NEW in window on (.*)$", line) for line in logs.text.splitlines()[:-1]]
    assert all(found), logs.text
    scored = evidence.score(start=START, end=END)
    events = LogDetector(scored.params.log).score(scored.features, start=START, end=END,
                                                  baseline_start=scored.baseline_start, system=bundled_system())["log"]
    shown = events.filter(pl.col("component") == "cartservice-0").get_column("template").to_list()
    assert [m.group(1) for m in found] == [template_keyword(t, max_chars=60) for t in shown]
    assert set(shown) <= set(scored.features["log_templates"].get_column("template"))
    assert [(m.group(2), m.group(3)) for m in found] == [("33", "cartservice-0")]
    assert "alice" not in logs.text


def test_candidates_and_sops():
    toolbox, _ = _toolbox()
    assert toolbox.invoke("get_candidates", {}).lead.startswith("pod_cpu_usage up 5x (z=40) on cartservice-0 [#1 cartservice")
    assert toolbox.invoke("search_sops", {"query": "cpu"}).lead.startswith("CPU stress (key metrics: pod_cpu_usage)")


def test_bad_calls_come_back_as_observations_listing_the_choices():
    toolbox, _ = _toolbox()
    unknown = toolbox.invoke("get_kpis", {})
    assert not unknown.ok and "valid tools: get_metrics, get_logs, get_traces, get_candidates, search_sops" in unknown.text
    extra = toolbox.invoke("get_metrics", {"pod": "x"})
    assert not extra.ok and "unknown argument(s) pod; valid arguments: component?, limit?" in extra.text
    missing = toolbox.invoke("search_sops", {})
    assert not missing.ok and "missing argument 'query'" in missing.text
    wrong_type = toolbox.invoke("get_metrics", {"limit": "many"})
    assert not wrong_type.ok and "limit must be an integer" in wrong_type.text
    assert not toolbox.invoke("get_metrics", "cartservice").ok  # type: ignore[arg-type]


def test_component_names_are_checked_against_the_data():
    toolbox, _ = _toolbox()
    assert {"cartservice", "cartservice-0", "redis-cart-0", "aiops-k8s-01", "frontend"} <= set(toolbox.components)
    typo = toolbox.invoke("get_metrics", {"component": "cartservce"})
    assert not typo.ok
    assert "does not exist in the data" in typo.text and "closest: cartservice" in typo.text
    assert toolbox.invoke("get_logs", {"component": "redis-cart"}).ok


def test_tool_exceptions_become_observations():
    def broken(args):
        raise RuntimeError("disk on fire")

    toolbox, _ = _toolbox()
    toolbox.add(FunctionTool(ToolSpec("restart", "restart a pod", (Param("component", "pod", kind="component", required=True),)), broken))
    observation = toolbox.invoke("restart", {"component": "cartservice-0"})
    assert not observation.ok
    assert observation.text == "error: restart failed: RuntimeError: disk on fire"
    assert "restart(component): restart a pod" in toolbox.describe()
    with pytest.raises(ValueError, match="already"):
        toolbox.add(FunctionTool(ToolSpec("restart", "again"), lambda a: "x"))


def test_observations_are_bounded():
    toolbox, _ = _toolbox(max_chars=200)
    toolbox.add(FunctionTool(ToolSpec("dump", "a lot"), lambda a: Observation(text="\n".join(f"line {i} " * 5 for i in range(200)), lead="line 0")))
    text = toolbox.call("dump", {})
    assert len(text) <= 200 and text.endswith("more lines cut)")
    assert len(bound("x" * 5000, 300)) <= 300
