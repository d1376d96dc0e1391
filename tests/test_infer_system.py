"""`rca system infer`: a system description drafted from a simulated dataset recovers the simulator's system."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from preprocess.infer_system import InferError, infer_system, node_pattern, render_toml
from rca.system import TraceNaming, bundled_system, load_system
from simulate.simulator import SimulationOptions, simulate
from simulate.topology import APP_SERVICES, CLIENT_ONLY_SERVICES, TEMPLATES

runner = CliRunner()
# The simulator's world is HipsterShop: its spans name their peers by the bundled [traces] rules.
BUNDLED_FILE = str(resources.files("rca") / "system.toml")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("infer") / "data"
    simulate(SimulationOptions(out_dir=out, cases=1, seed=5, scale="small"))
    return out


def _simulator_edges() -> set[tuple[str, str]]:
    """(caller, callee) of every call the simulator's request templates make."""
    edges = set()
    for template in TEMPLATES:
        for node in template.nodes:
            if node.kind != "client":
                continue
            # The redis client span is reported by the cache itself; its caller is the parent span's service.
            caller = template.nodes[node.parent].service if node.service == "redis" else node.service
            edges.add((caller, node.callee))
    return edges


def test_infer_recovers_the_simulated_system(dataset: Path) -> None:
    inferred = infer_system(dataset, spec=bundled_system())
    assert set(inferred.services) == set(APP_SERVICES)
    assert set(inferred.stateful) == {"redis-cart", "tidb-tidb", "tidb-pd", "tidb-tikv"}
    assert set(inferred.client_only) == set(CLIENT_ONLY_SERVICES)
    assert set(inferred.edges) == _simulator_edges()
    assert inferred.runtimes.get("adservice") == "java"  # its Java stack traces in the logs
    assert inferred.pods["checkoutservice-1"] == "checkoutservice"
    assert all(inferred.placement[pod] for pod in ("frontend-0", "cartservice-2"))
    assert "aiops-k8s-01" in inferred.nodes


def test_without_a_description_the_draft_lists_the_tags_no_rule_names(dataset: Path) -> None:
    """HipsterShop's spans name their callees by rpc.service and db.system only: read with no rules (a system
    not yet described), those calls are listed for the user, with the lines that would name them."""
    inferred = infer_system(dataset)
    assert inferred.trace == TraceNaming()
    assert "redis" in inferred.unnamed_peers["db.system"]
    assert "redis" in inferred.stateful  # the cache's spans name their service so; no alias says it is redis-cart
    assert "hipstershop.CartService" in inferred.unnamed_peers["rpc.service"]
    text = render_toml(inferred, data_dir=dataset, name="Shop")
    assert "# db.system values no peer names: redis (" in text
    assert "-> rpc_service = '^hipstershop\\.([A-Za-z0-9]+)$'" in text


def test_the_bundled_description_states_every_call_the_simulator_makes() -> None:
    # HipsterShop's calls are written twice, as the simulator's request templates (code) and as
    # the bundled description's [calls] edges (the fact the ranker reads): they must agree.
    assert set(bundled_system().calls) == _simulator_edges()


def test_the_written_description_loads_and_says_the_same(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "system.toml"
    result = runner.invoke(app, ["system", "infer", "--data-dir", str(dataset), "--out", str(out), "--name", "Shop",
                                 "--system", BUNDLED_FILE])
    assert result.exit_code == 0, result.output
    spec = load_system(out)
    assert spec.name == "Shop" and set(spec.services) == set(APP_SERVICES)
    assert spec.trace == bundled_system().trace  # the rules the spans were read with are kept
    assert ("cartservice", "redis-cart") in spec.storage_calls
    # Every call seen is in the description, the storage calls once, as storage.
    assert set(spec.calls) | set(spec.storage_calls) == _simulator_edges()
    assert not set(spec.calls) & set(spec.storage_calls)
    assert spec.is_node("aiops-k8s-05") and spec.is_node("k8s-master2") and not spec.is_node("frontend-0")
    assert spec.service_of("frontend-2") == "frontend"
    assert spec.call_chains and all(" -> " in chain for chain in spec.call_chains)
    assert "jvm gc" in spec.applicable_fault_types("adservice") and "jvm gc" not in spec.applicable_fault_types("frontend")
    assert render_toml(infer_system(dataset, spec=bundled_system()), data_dir=dataset,
                       name="Shop") == out.read_text(encoding="utf-8")
    again = runner.invoke(app, ["system", "infer", "--data-dir", str(dataset), "--out", str(out)])
    assert again.exit_code == 2 and "--force" in again.output


def test_stores_no_traced_call_reaches_are_named_for_the_user(dataset: Path, tmp_path: Path) -> None:
    """The release traces no call into TiDB: the draft says so, where the user adds the callers, and the
    TOML loads as drafted; once the calls are added the store is reached and nothing is said."""
    inferred = infer_system(dataset, spec=bundled_system())
    assert inferred.unreached_stateful == ["tidb-pd", "tidb-tidb", "tidb-tikv"]  # redis-cart is traced
    out = tmp_path / "system.toml"
    result = runner.invoke(app, ["system", "infer", "--data-dir", str(dataset), "--out", str(out),
                                 "--system", BUNDLED_FILE])
    assert result.exit_code == 0, result.output
    assert "no call seen reaches tidb-pd, tidb-tidb, tidb-tikv" in result.output
    text = out.read_text(encoding="utf-8")
    assert "# No call seen reaches tidb-pd, tidb-tidb, tidb-tikv: add who calls them above" in text
    assert load_system(out).storage_calls == (("cartservice", "redis-cart"),)
    inferred.edges += [("productcatalogservice", "tidb-tidb"), ("tidb-tidb", "tidb-pd"), ("tidb-tidb", "tidb-tikv")]
    assert inferred.unreached_stateful == []
    assert "No call seen reaches" not in render_toml(inferred, data_dir=dataset, name="Shop")


def test_node_pattern_generalises_only_the_ordinal() -> None:
    import re

    pattern = re.compile(node_pattern(["aiops-k8s-01", "k8s-master1", "worker-a"]))
    assert pattern.match("aiops-k8s-17") and pattern.match("k8s-master3") and pattern.match("worker-a")
    assert not pattern.match("aiops-k9s-01")


def test_without_spans_it_says_the_calls_are_the_users_to_write(dataset: Path, tmp_path: Path) -> None:
    import shutil

    bare = tmp_path / "data"
    shutil.copytree(dataset, bare)
    for folder in bare.glob("*/trace-parquet"):
        shutil.rmtree(folder)
    out = tmp_path / "system.toml"
    result = runner.invoke(app, ["system", "infer", "--data-dir", str(bare), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "[calls] edges" in result.output and "no call graph" in result.output
    assert "holds no spans" in out.read_text(encoding="utf-8")
    spec = load_system(out)
    assert spec.calls == () and set(spec.services) >= {"frontend", "checkoutservice"}


def test_an_empty_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(InferError, match=str(tmp_path)):
        infer_system(tmp_path)


def test_runtimes_a_person_knows_fill_what_the_data_hid(dataset: Path, tmp_path: Path) -> None:
    """TrainTicket runs on the JVM throughout, but most of its services never log a stack trace."""
    out = tmp_path / "system.toml"
    result = runner.invoke(app, ["system", "infer", "--data-dir", str(dataset), "--out", str(out),
                                 "--runtime", "frontend=go", "--runtime", "*=java"])
    assert result.exit_code == 0, result.output
    spec = load_system(out)
    assert "jvm exception" in spec.applicable_fault_types("cartservice")  # given by '*=java'
    assert "jvm exception" not in spec.applicable_fault_types("frontend")  # given first, kept
    assert "given: --runtime frontend=go" in out.read_text(encoding="utf-8")
    assert "adservice" in out.read_text(encoding="utf-8")


@pytest.mark.parametrize(("given", "named"), [("java", "SERVICE=RUNTIME"), ("nosuchservice=java", "nosuchservice")])
def test_a_bad_runtime_is_named(dataset: Path, tmp_path: Path, given: str, named: str) -> None:
    result = runner.invoke(app, ["system", "infer", "--data-dir", str(dataset), "--out", str(tmp_path / "s.toml"),
                                 "--runtime", given])
    assert result.exit_code == 2 and named in result.output, result.output


def test_show_says_what_the_description_declares(tmp_path: Path) -> None:
    result = runner.invoke(app, ["system", "show"])
    assert result.exit_code == 0, result.output
    assert "HipsterShop" in result.output and "15 calls and 3 storage calls declared" in result.output
    bad = tmp_path / "system.toml"
    bad.write_text('[services]\napp = ["a"]\n[calls]\nedges = ["a -> nowhere"]\n', encoding="utf-8")
    result = runner.invoke(app, ["system", "show", "--file", str(bad)])
    assert result.exit_code == 2 and "calls.edges" in result.output and str(bad) in result.output
