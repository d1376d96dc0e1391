"""The simulated cloud: the right action mitigates, a wrong one does not (and costs errors)."""
import asyncio
from datetime import UTC, datetime

import pytest

from bench.cloud import SimCloud
from bench.interface import CloudTools, SessionTools
from bench.problems import CaseTruth
from bench.session import run_session
from bench.tasks import task_named
from diagnose.cases import Case
from diagnose.tools import Param, Toolbox, ToolSpec
from judge.groundtruth import TruthCase


def _record(fault_type, instance, *, source="", destination=""):
    return {"uuid": "m-1", "fault_type": fault_type, "instance": instance, "source": source,
            "destination": destination, "start_time": "2025-06-05T17:10:00Z", "end_time": "2025-06-05T17:20:00Z",
            "instance_type": "pod"}


class Scripted:
    def __init__(self, replies):
        self.replies = list(replies)

    async def get_action(self, state):
        return self.replies.pop(0)


def _mitigate(record, replies):
    case = Case(uuid="m-1", description="x", start=datetime(2025, 6, 5, 17, 10, tzinfo=UTC),
                end=datetime(2025, 6, 5, 17, 20, tzinfo=UTC))
    instance = record["instance"] if isinstance(record["instance"], list) else [record["instance"]]
    truth = TruthCase(uuid="m-1", fault_type=record["fault_type"], instance=instance)
    task = task_named("mitigation")
    problem = task.problem(CaseTruth(case=case, fault=True, truth=truth, record=record))
    cloud = SimCloud(record=record, seed=5)
    tools = SessionTools([CloudTools(cloud)], submit_doc=task.submit_doc)
    return asyncio.run(run_session(problem, task, Scripted(replies), agent_name="scripted", tools=tools,
                                   max_steps=8, env=cloud))


@pytest.mark.parametrize("record,right,wrong", [
    (_record("cpu stress", "emailservice-1"), 'restart_pod({"pod": "emailservice-1"})',
     'restart_pod({"pod": "emailservice-0"})'),
    (_record("code error", "cartservice"), 'rollback_deployment({"service": "cartservice"})',
     'restart_deployment({"service": "cartservice"})'),
    (_record("target port misconfig", "emailservice"), 'fix_target_port({"service": "emailservice"})',
     'restart_deployment({"service": "emailservice"})'),
    (_record("node cpu stress", "aiops-k8s-03"), 'cordon_drain_node({"node": "aiops-k8s-03"})',
     'cordon_drain_node({"node": "aiops-k8s-05"})'),
    (_record("network delay", ["frontend", "productcatalogservice"], source="frontend",
             destination="productcatalogservice"), 'restart_deployment({"service": "frontend"})',
     'restart_deployment({"service": "productcatalogservice"})'),
    (_record("io fault", "tidb-tikv-0"), 'restart_tidb({"component": "tidb-tikv"})',
     'restart_tidb({"component": "tidb-pd"})'),
])
def test_right_action_mitigates_and_wrong_one_does_not(record, right, wrong):
    fixed = _mitigate(record, ["get_status()", right, 'wait({"minutes": 2})', "get_status()", "submit({})"])
    assert fixed.outcome == "submitted"
    assert "unhealthy" in fixed.steps[0].observation  # the fault is visible before acting
    assert "all services, pods, nodes and TiDB components healthy" in fixed.steps[3].observation
    assert fixed.evaluation.correct == 1.0 and fixed.evaluation.details["minutes_to_mitigate"] > 0

    failed = _mitigate(record, [wrong, "submit({})"])
    assert failed.evaluation.correct == 0.0 and failed.evaluation.details["unhealthy"]


def test_restarting_a_healthy_pod_costs_a_burst_of_errors():
    cloud = SimCloud(record=_record("cpu stress", "emailservice-1"), seed=5)
    t0 = cloud.now
    cloud.restart_pod(pod="cartservice-0")
    burst = cloud.health(t0, t0 + (cloud.now - t0) / 2)
    assert any("->cartservice" in edge and "failed calls" in edge for edge in burst.edges)


def test_bad_actions_are_observations():
    cloud = SimCloud(record=_record("cpu stress", "emailservice-1"), seed=5)
    tools = CloudTools(cloud)
    assert "valid:" in tools.call("restart_tidb", {"component": "mysql"})
    assert "missing argument 'pod'" in tools.call("restart_pod", {})
    assert "unknown tool 'reboot'" in tools.call("reboot", {})
    assert "replicas must be an integer from 0 to 10" in tools.call("scale_deployment", {"service": "cartservice",
                                                                                      "replicas": "3"})
    assert not tools.call("scale_deployment", {"service": "cartservice", "replicas": 0}).startswith("error")  # 0 is in range


def test_cloud_actions_and_diagnoser_tools_share_one_contract():
    """The harness's actions are ``diagnose.tools`` tools: a ToolSpec whose arguments are Params,
    checked by the same Toolbox as the diagnoser's observation tools."""
    tools = CloudTools(SimCloud(record=_record("cpu stress", "emailservice-1"), seed=5))
    assert isinstance(tools.toolbox, Toolbox)
    specs = [tools.spec(name) for name in tools.names]
    assert all(isinstance(spec, ToolSpec) for spec in specs)
    assert tools.spec("scale_deployment").params == (
        Param(name="service", description="a service name", required=True),
        Param(name="replicas", description="replica count", kind="integer", required=True, minimum=0, maximum=10))
    assert tools.spec("wait").params[0].required is False  # wait() waits a minute
    assert tools.spec("get_status").params == ()
    assert tools.toolbox.invoke("restart_tidb", {"component": "mysql"}).ok is False  # a refusal is an Observation


def test_scaling_to_zero_is_an_outage_until_scaled_back():
    cloud = SimCloud(record=_record("pod kill", "frontend-0"), seed=5)
    cloud.scale_deployment(service="cartservice", replicas=0)
    assert not cloud.settle().healthy
    cloud.scale_deployment(service="cartservice", replicas=3)
    assert cloud.settle().healthy
