"""The case page of a simulated case, opened in headless Debian Chromium with the network blocked.

Simulator -> nightly index -> the real window query -> a recorded model reply (tests/fakes.py)
-> run record -> page. Chromium must render it offline, every figure must carry ink, and the
screenshot goes to the test's output directory.
"""
from __future__ import annotations

import base64
import io
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from app.cli import _register, app
from diagnose.cases import load_cases
from diagnose.record import RunRecord
from diagnose.report.browser import CHROMIUM, dump_dom, screenshot
from diagnose.report.case import render_case_page, write_case_report
from diagnose.report.evidence import load_case_evidence
from diagnose.report.plots import ink_fraction
from diagnose.service import Diagnoser
from diagnose.sources import IndexEvidence
from diagnose.tools import RawTelemetry, case_toolbox
from index.build import run_nightly
from index.params import IndexParams
from preprocess.detect_log import template_keyword
from rca.settings import load_settings
from rca.system import bundled_system
from simulate.simulator import SimulationOptions, simulate
from tests.fakes import RecordedBackend, StaticKnowledge

# HipsterShop's [traces] (the bundled system): the simulated and released spans' peer rules.
NAMING = bundled_system().trace

needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium not installed")


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory) -> tuple[Path, RunRecord]:
    """A simulated case diagnosed over its real index; the model's reply is recorded (no model needed)."""
    root = tmp_path_factory.mktemp("report")
    simulate(SimulationOptions(out_dir=root / "data", cases=1, seed=5, scale="small"))
    assert all(o.status == "written" for o in run_nightly(naming=NAMING, data_dir=root / "data", index_dir=root / "index"))
    settings = load_settings(environ={}, overrides={
        "paths": {"index_dir": root / "index", "runs_dir": root / "runs", "input_file": root / "data" / "input.json"},
        "diagnose": {"confirm_fault_type": False, "self_consistency": 1},
    })
    case = load_cases(settings.paths.input_file)[0]
    evidence = IndexEvidence(settings.paths.index_dir, params=IndexParams.from_settings(settings.index, system=bundled_system()))
    reply = RecordedBackend([])
    diagnoser = Diagnoser(settings=settings, evidence=evidence, knowledge=StaticKnowledge(), llm=reply)
    top = diagnoser.prepare(case).candidates[0].component
    fault_type = bundled_system().applicable_fault_types(top)[0]
    reply.replies.append(json.dumps({"component": top, "fault_type": fault_type,
                                     "reason": f"{fault_type}: latency and errors start on {top}"}))
    diagnoser.diagnose_adhoc(case)
    return root, RunRecord.load(root / "runs" / "adhoc" / f"{case.uuid}.json")


def _scorer(index_dir: Path) -> IndexEvidence:
    return IndexEvidence(index_dir, params=IndexParams(), require=False)


class _Page(HTMLParser):
    """Figures and every external reference of a rendered DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: list[dict[str, str]] = []
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        for key in ("src", "href"):
            if values.get(key) and not values[key].startswith(("data:", "#")) and not values[key].endswith(".html"):
                self.external.append(values[key])
        if tag == "img" and "fig" in values.get("class", ""):
            self.figures.append(values)


def _png(data_uri: str) -> bytes:
    assert data_uri.startswith("data:image/png;base64,")
    return base64.b64decode(data_uri.split(",", 1)[1])


# Test-only probe: after load, each figure records where Chromium laid it out and whether it decoded.
_PROBE = """<script>addEventListener("load", () => {
  for (const img of document.querySelectorAll("img.fig")) {
    const r = img.getBoundingClientRect();
    img.setAttribute("data-rect", [r.left, r.top + scrollY, r.width, r.height, img.naturalWidth].join(","));
  }
  document.body.setAttribute("data-height", document.documentElement.scrollHeight);
});</script>"""
WIDTH = 1280


@needs_chromium
def test_case_page_renders_offline_with_every_figure(diagnosed, tmp_path: Path) -> None:
    root, record = diagnosed
    page = write_case_report(record, scorer=_scorer(root / "index"), out=tmp_path / "case.html", system=bundled_system())

    # The DOM Chromium built with every host unresolvable and a dead proxy.
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
    rendered = dump_dom(probe, width=WIDTH, height=1000)
    dom = _Page()
    dom.feed(rendered)
    assert dom.external == []  # nothing to fetch: CSS and images are inline
    names = [f["data-name"] for f in dom.figures]
    assert "call-graph" in names and "log-templates" in names
    chosen = record.answer.component
    assert any(n.startswith(f"series-{chosen}-") for n in names)
    runner_ups = [c.component for c in record.candidates if c.component != chosen]
    assert any(n.startswith(f"series-{runner_ups[0]}-") for n in names)
    for figure in dom.figures:
        png = _png(figure["src"])
        with Image.open(io.BytesIO(png)) as image:
            assert image.size == (int(figure["width"]), int(figure["height"]))
        assert ink_fraction(png) > 0.04, figure["data-name"]  # the PNG itself: axes, lines, shading

    # The screenshot of the whole page; each figure's painted area must carry ink too.
    height = int(re.search(r'data-height="(\d+)"', rendered).group(1))
    shot = screenshot(page, out=tmp_path / "case-report.png", width=WIDTH, height=height)
    print(f"screenshot ({WIDTH}x{height}): {shot}")
    with Image.open(shot) as image:
        assert image.size == (WIDTH, height)
        pixels = image.convert("RGB")
        for figure in dom.figures:
            left, top, width, height_px, natural = (float(v) for v in figure["data-rect"].split(","))
            assert natural > 0, f"{figure['data-name']} did not decode"
            assert width > 300 and height_px > 150, figure["data-name"]
            crop = pixels.crop((int(left) + 2, int(top) + 2, int(left + width) - 2, int(top + height_px) - 2))
            buffer = io.BytesIO()
            crop.save(buffer, format="PNG")
            assert ink_fraction(buffer.getvalue()) > 0.04, f"{figure['data-name']} blank in the screenshot"
    assert ink_fraction(shot.read_bytes(), background=(246, 248, 250)) > 0.3


def test_a_setting_moves_the_ranking_the_tools_and_the_report_together(diagnosed) -> None:
    """Issue 28.1: one scoring path. Deafening the metric and trace detectors (``[index.metric]``,
    ``[index.trace]``) takes their evidence out of the ranking, the agent tools and the page at once."""
    root, record = diagnosed
    case = load_cases(root / "data" / "input.json")[0]

    def look(index: dict) -> tuple[list, str, str, list]:
        settings = load_settings(environ={}, overrides={"index": index, "paths": {
            "index_dir": root / "index", "input_file": root / "data" / "input.json", "data_dir": root / "data"}})
        evidence = IndexEvidence.from_settings(settings)
        ranked = evidence.query(start=case.start, end=case.end, top_k=5).candidates
        tools = case_toolbox(case, telemetry=RawTelemetry(root / "data", naming=bundled_system().trace), evidence=evidence,
                             knowledge=StaticKnowledge(), system=bundled_system())
        page = load_case_evidence(record, scorer=evidence, system=bundled_system())
        modalities = sorted({item.modality for c in ranked for item in c.evidence})
        return modalities, tools.invoke("get_metrics", {}), tools.invoke("get_traces", {}), page.degraded_edges

    modalities, metrics, traces, degraded = look({})
    assert {"metric", "trace"} <= set(modalities)
    assert not metrics.empty and not traces.empty and degraded

    deaf = {"metric": {"min_z": 1000}, "trace": {"min_latency_ratio": 1000, "min_error_rate_increase": 1.0}}
    modalities, metrics, traces, degraded = look(deaf)
    assert not {"metric", "trace"} & set(modalities)
    assert metrics.empty and "no KPI deviates" in metrics.text
    assert traces.empty and "no call edge changed" in traces.text
    assert all(edge.vanished for edge in degraded)


def test_the_log_tool_names_the_templates_the_index_holds_for_the_window(diagnosed) -> None:
    """``get_logs`` and the page read one set of templates: the index's Drain templates, not a re-masking."""
    root, record = diagnosed
    case = load_cases(root / "data" / "input.json")[0]
    evidence = _scorer(root / "index")
    tools = case_toolbox(case, telemetry=RawTelemetry(root / "data", naming=bundled_system().trace), evidence=evidence,
                         knowledge=StaticKnowledge(), system=bundled_system())
    logs = tools.invoke("get_logs", {})
    scored = evidence.score(start=case.start, end=case.end)
    index_keywords = {template_keyword(t, max_chars=60) for t in scored.features["log_templates"].get_column("template")}
    named = [m.group(1) for line in logs.text.splitlines()
             if (m := re.match(r"(.*) x\d+ (?:NEW in window|vs ~\d+ expected) on ", line))]
    assert named and set(named) <= index_keywords, logs.text
    page = load_case_evidence(record, scorer=evidence, system=bundled_system())
    assert {b.template for b in page.logs} <= set(scored.features["log_templates"].get_column("template"))


def test_page_tells_what_is_missing(diagnosed, tmp_path: Path) -> None:
    root, record = diagnosed
    index = tmp_path / "index"
    shutil.copytree(root / "index", index)
    for table in ("trace_edges", "log_counts"):
        for path in index.rglob(f"{table}.parquet"):
            path.unlink()
    html = render_case_page(record, scorer=_scorer(index), system=bundled_system())
    assert "No trace data in the index for this window" in html
    assert "No bursting or new log templates" in html
    assert "trace_edges" in html and "log_counts" in html  # listed under missing data
    assert 'data-name="series-' in html  # metrics are still drawn

    failed = record.model_copy(update={"status": "failed", "error": "model reply invalid", "answer": None,
                                       "decision": None, "agreed_with_index": None})
    html = render_case_page(failed, scorer=_scorer(tmp_path / "no-index"), system=bundled_system())
    assert "model reply invalid" in html and "No metric data in the index" in html


def test_report_commands_render_from_run_records(diagnosed, tmp_path: Path) -> None:
    root, record = diagnosed
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(root / "runs" / "adhoc" / f"{record.uuid}.json", runs)
    # A second case the model disagreed on, in a window the index does not cover: its page says so.
    other = record.model_copy(update={"uuid": "other-2", "agreed_with_index": False, "index_top": "frontend",
                                      "confidence": "low",
                                      "window": {"start": "2024-01-01T10:00:00Z", "end": "2024-01-01T10:20:00Z"}})
    (runs / "other-2.json").write_text(other.model_dump_json())
    _register()
    runner = CliRunner()
    result = runner.invoke(app, ["report", "batch", "--runs-dir", str(runs), "--index-dir", str(root / "index"),
                                 "--out-dir", str(tmp_path / "batch")])
    assert result.exit_code == 0, result.output
    index = (tmp_path / "batch" / "index.html").read_text()
    assert f'href="{record.uuid}.html"' in index and 'href="other-2.html"' in index
    assert "agreed" in index and "disagreed" in index and index.count('class="fig"') == 2
    assert "No trace data in the index" in (tmp_path / "batch" / "other-2.html").read_text()
    # How far each answer can be trusted, on the index page and the case's own.
    assert "<th>confidence</th>" in index and f"<td>{record.confidence}</td>" in index and "<td>low</td>" in index
    assert '<span class="badge bad">low</span> weak evidence' in (tmp_path / "batch" / "other-2.html").read_text()

    result = runner.invoke(app, ["report", "case", "--run-record", str(runs / "other-2.json"),
                                 "--index-dir", str(root / "index"), "--out", str(tmp_path / "one.html")])
    assert result.exit_code == 0, result.output
    assert "other-2" in (tmp_path / "one.html").read_text()

    bad = tmp_path / "bad.json"
    bad.write_text('{"uuid": 1}')
    result = runner.invoke(app, ["report", "case", "--run-record", str(bad), "--index-dir", str(root / "index")])
    assert result.exit_code == 2 and "bad.json" in result.output


@needs_chromium
def test_the_browser_really_is_offline(tmp_path: Path) -> None:
    """The flags block the network: an external image stays undecoded (so a page that passes needs none)."""
    page = tmp_path / "external.html"
    page.write_text('<!doctype html><html><body><img class="fig" data-name="remote" '
                    'src="https://example.com/favicon.ico">' + _PROBE + "</body></html>")
    dom = _Page()
    dom.feed(dump_dom(page, width=WIDTH, height=400))
    assert dom.external == ["https://example.com/favicon.ico"]
    assert dom.figures[0]["data-rect"].split(",")[-1] == "0"  # naturalWidth 0: never fetched


def test_diagnose_report_dir_writes_the_pages(diagnosed, tmp_path: Path, monkeypatch) -> None:
    """``rca diagnose --uuid X --report-dir D``: the CLI wiring, with the model replaced by a recorded reply."""
    root, record = diagnosed
    reply = json.dumps({"component": record.answer.component, "fault_type": record.decision.fault_type,
                        "reason": "recorded reply for the CLI test"})

    def from_settings(cls, settings, **_):  # case_windows: this index has one case
        evidence = IndexEvidence(settings.paths.index_dir, params=IndexParams.from_settings(settings.index, system=bundled_system()))
        return cls(settings=settings, evidence=evidence, knowledge=StaticKnowledge(), llm=RecordedBackend([reply]))

    monkeypatch.setattr(Diagnoser, "from_settings", classmethod(from_settings))
    _register()
    result = CliRunner().invoke(app, [
        "diagnose", "--uuid", record.uuid, "--input", str(root / "data" / "input.json"),
        "--index-dir", str(root / "index"), "--runs-dir", str(tmp_path / "runs"), "--one-turn",
        "--self-consistency", "1", "--report-dir", str(tmp_path / "reports"), "--json"])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "reports" / f"{record.uuid}.html").read_text()
    assert "recorded reply for the CLI test" in page and 'data-name="call-graph"' in page
    assert f'href="{record.uuid}.html"' in (tmp_path / "reports" / "index.html").read_text()
