"""The agent-cloud interface: the agent contract, the action syntax and the session's tool set.

Agent contract (AIOpsLab's own, so its agents port with an import change)::

    class MyAgent:
        def init_context(self, problem_desc: str, instructions: str, apis: str) -> None: ...  # optional
        async def get_action(self, state: str) -> str: ...

Action syntax, one action per reply: ``tool_name({"json": "object"})`` or ``tool_name()``,
optionally inside a fenced block (AIOpsLab's ```` ``` ```` form) or after ``Action:``.
Arguments are a JSON object (never Python keyword syntax); a reply that does not parse,
an unknown tool and bad arguments all come back as an observation that lists the valid
choices. Observation tools come from a ``Toolbox`` (``describe() -> str``,
``call(name, args) -> str``, ``names``; ``diagnose.tools.Toolbox``); this
module adds the mitigation actions (``CloudTools``, tools of the same contract:
``diagnose.tools.ToolSpec`` / ``Param`` / ``Observation``) and ``submit``.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from bench.cloud import ActionError, SimCloud
from diagnose.tools import FunctionTool, Observation, Param, ToolSpec, bound  # one tool contract, one clipping rule
from diagnose.tools import Toolbox as DiagnoseToolbox
from rca.errors import InputError

MAX_OBSERVATION_CHARS = 4000  # an agent must never receive megabytes


@runtime_checkable
class Agent(Protocol):
    async def get_action(self, state: str) -> str: ...


class Toolbox(Protocol):
    """What a session needs from a tool set."""

    @property
    def names(self) -> list[str]: ...

    def describe(self) -> str: ...

    def call(self, name: str, args: dict[str, Any]) -> str: ...


@dataclass(frozen=True)
class Action:
    name: str
    args: dict[str, Any]


class ActionSyntaxError(InputError):
    """A reply that is not ``tool_name({...})``; the message shows the expected form."""


SYNTAX_HELP = 'Reply with exactly one action: tool_name({"arg": "value"}) or tool_name() ; e.g. get_candidates({})'


def parse_action(reply: str) -> Action:
    """The one action of an agent's reply (see the module doc for the accepted forms)."""
    text = reply.strip()
    if "```" in text:
        inside = text.split("```")[1]
        first_line, _, rest = inside.partition("\n")
        # A language tag line (```python) carries no call.
        text = rest if first_line.strip().isidentifier() and "(" not in first_line else inside
    if "Action:" in text:
        text = text.rsplit("Action:", 1)[1]
    text = text.strip()
    open_at, close_at = text.find("("), text.rfind(")")
    if open_at <= 0 or close_at < open_at:
        raise ActionSyntaxError(f"could not read an action in {bound(reply, 200)!r}. {SYNTAX_HELP}")
    name = text[:open_at].strip().splitlines()[-1].strip() if text[:open_at].strip() else ""
    if not name.isidentifier():
        raise ActionSyntaxError(f"{name!r} is not a tool name. {SYNTAX_HELP}")
    inner = text[open_at + 1:close_at].strip()
    if not inner:
        return Action(name, {})
    try:
        args = json.loads(inner)
    except json.JSONDecodeError as exc:
        raise ActionSyntaxError(f"arguments of {name} are not a JSON object ({exc.msg}). {SYNTAX_HELP}") from exc
    if not isinstance(args, dict):
        raise ActionSyntaxError(f"arguments of {name} must be a JSON object, got {type(args).__name__}. {SYNTAX_HELP}")
    return Action(name, args)


def _action(name: str, doc: str, run: Callable[..., str], *params: Param) -> FunctionTool:
    """A cloud action as a tool of the shared contract: ``doc`` (its usage, then what it does) is its
    description; a refusal of the cloud comes back as an observation."""
    def call(args: dict[str, Any]) -> Observation | str:
        try:
            return run(**args)
        except ActionError as exc:
            text = f"{name} refused: {exc}"
            return Observation(text=text, lead=text, ok=False)
    return FunctionTool(spec=ToolSpec(name=name, description=doc, params=params), fn=call)


def _text(name: str, description: str, *, required: bool = True) -> Param:
    return Param(name=name, description=description, required=required)


class CloudTools:
    """The mitigation actions and ``get_status`` over one ``SimCloud``: tools of the diagnoser's
    contract (``ToolSpec``, ``Param``, ``Observation``) in a ``diagnose.tools.Toolbox``, which
    checks their arguments before the cloud sees them."""

    def __init__(self, cloud: SimCloud) -> None:
        self.cloud = c = cloud
        pod, service = _text("pod", "a pod name"), _text("service", "a service name")
        self.toolbox = DiagnoseToolbox([
            _action("get_status", "get_status() - health of the cluster over the last minute: failing or slow "
                    "call edges and KPIs off their baseline; cordoned nodes; changed replicas.", c.status),
            _action("get_pods", "get_pods() - which pods run on which node.", c.describe_world),
            _action("restart_pod", 'restart_pod({"pod": "cartservice-1"}) - delete the pod; its deployment '
                    "starts a fresh one (~45 s without it).", c.restart_pod, pod),
            _action("delete_pod", 'delete_pod({"pod": "cartservice-1"}) - same as restart_pod.', c.restart_pod, pod),
            _action("restart_deployment", 'restart_deployment({"service": "cartservice"}) - rolling restart of '
                    "every pod of the service.", c.restart_deployment, service),
            _action("rollback_deployment", 'rollback_deployment({"service": "cartservice"}) - roll back to the '
                    "previous release (undoes a bad code change); pods are replaced.", c.rollback_deployment, service),
            _action("fix_target_port", 'fix_target_port({"service": "emailservice"}) - set the Kubernetes '
                    "service's targetPort back to the container port.", c.fix_target_port, service),
            _action("scale_deployment", 'scale_deployment({"service": "cartservice", "replicas": 3}) - set the '
                    "replica count (0 stops the service).", c.scale_deployment, service,
                    Param(name="replicas", description="replica count", kind="integer", required=True, minimum=0,
                          maximum=10)),
            _action("cordon_drain_node", 'cordon_drain_node({"node": "aiops-k8s-03"}) - stop scheduling on the '
                    "node and move its pods elsewhere (they restart).", c.cordon_drain_node,
                    _text("node", "a node name")),
            _action("restart_tidb", 'restart_tidb({"component": "tidb-tikv"}) - restart a TiDB component '
                    "(tidb-tidb, tidb-pd, tidb-tikv); ~30 s unavailable.", c.restart_tidb,
                    _text("component", "a TiDB component")),
            _action("wait", 'wait({"minutes": 2}) - let time pass (1-10 minutes).', c.wait,
                    Param(name="minutes", description="minutes to wait", kind="integer", maximum=10)),
        ], max_chars=MAX_OBSERVATION_CHARS, system=c.system)

    @property
    def names(self) -> list[str]:
        return self.toolbox.names

    def spec(self, name: str) -> ToolSpec:
        return self.toolbox.spec(name)

    def describe(self) -> str:
        """Each action's usage line (JSON arguments, as the action syntax wants them)."""
        return "\n".join(self.spec(name).description for name in self.names)

    def call(self, name: str, args: dict[str, Any]) -> str:
        return self.toolbox.call(name, args)


class SessionTools:
    """Observation tools + task tools (cloud actions) + ``submit``, behind one ``call``."""

    def __init__(self, parts: list[Toolbox], *, submit_doc: str) -> None:
        self.parts = parts
        self.submit_doc = submit_doc
        owners: dict[str, Toolbox] = {}
        for part in parts:
            for name in part.names:
                owners.setdefault(name, part)
        self._owner = owners

    @property
    def names(self) -> list[str]:
        return [*self._owner, "submit"]

    def describe(self) -> str:
        return "\n\n".join(p.describe() for p in self.parts) + f"\n\n{self.submit_doc}"

    def call(self, name: str, args: dict[str, Any]) -> str:
        owner = self._owner.get(name)
        if owner is None:
            return f"unknown tool {name!r}; valid tools: {', '.join(self.names)}"
        try:
            return bound(owner.call(name, args), MAX_OBSERVATION_CHARS)
        except (ValueError, LookupError, TypeError) as exc:  # a tool's own bad-input error: the agent may retry
            return f"{name} failed: {exc}"
