"""``rca diagnose --alerts FILE`` on what a REAL Alertmanager (Debian's ``prometheus-alertmanager``) writes.

Alertmanager is started on a free loopback port, without clustering, with one route that groups by
``alertname`` and ``service`` and sends every group to a webhook receiver this test runs (an
``http.server`` thread that appends each POST body as one JSON line: a webhook receiver's log). Alerts
are POSTed to ``/api/v2/alerts`` as Prometheus sends them, for two groups:

- HighErrorRate on checkoutservice: three pods firing (one endsAt unset, one in the future); the
  receiver's ``max_alerts: 2`` leaves the earliest out of the payload (``truncatedAlerts: 1``);
- HighLatency on cartservice: one pod firing (startsAt in +08:00 with nanoseconds) and one already
  resolved (endsAt in the past); the firing one is resolved later, so the group is sent again, resolved.

Once the receiver has each group, ``GET /api/v2/alerts`` and ``amtool alert query -o json`` are saved
as files. ``read_alerts`` must read all three as documented (diagnose/README.md, "Alert files"), and
the CLI must accept the receiver's log. The server keeps running for the module's tests: ``rca diagnose
--alertmanager URL`` pulls what fires at the end (the three HighErrorRate alerts; HighLatency resolved).

Without ``prometheus-alertmanager`` and ``amtool`` the tests fail, saying what to install
(scripts/setup.sh installs them): a silent skip would leave the alert formats unchecked.
"""
from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from app.cli import app
from diagnose.cases import read_alerts
from index.models import Candidate
from tests.judge_server_support import free_port
from tests.server_process import ready, running, wait_until

log = logging.getLogger(__name__)
runner = CliRunner()
LEAD, SPAN = timedelta(minutes=5), timedelta(minutes=10)
WAIT_S = 10.0  # for a payload: group_wait 0s and group_interval 1s make it well under a second
CHECKOUT_KEY = '{}:{alertname="HighErrorRate", service="checkoutservice"}'  # Alertmanager's groupKey for the route
CART_KEY = '{}:{alertname="HighLatency", service="cartservice"}'


def _case_id(alertname: str, group_key: str) -> str:
    return f"{alertname}-{hashlib.sha256(group_key.encode('utf-8')).hexdigest()[:10]}"


def _z(instant: datetime) -> str:
    """As Prometheus writes an instant: RFC 3339, UTC, microseconds."""
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _millis(instant: datetime) -> datetime:
    """What API v2 echoes of an instant: milliseconds."""
    return instant.replace(microsecond=instant.microsecond // 1000 * 1000)


def _binaries() -> tuple[str, str]:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    amtool = shutil.which("amtool")
    if binary is None or amtool is None:
        pytest.fail("Alertmanager not installed (prometheus-alertmanager and amtool are needed): "
                    "apt-get install prometheus-alertmanager, or run scripts/setup.sh as root", pytrace=False)
    return binary, amtool


@dataclass(frozen=True)
class Posted:
    """An alert as it was POSTed: its labels' pod, summary and startsAt (the instant, and the text sent)."""

    pod: str
    summary: str
    start: datetime
    start_text: str


@dataclass(frozen=True)
class Run:
    url: str  # the Alertmanager, still running
    webhook_log: Path
    api_file: Path
    amtool_file: Path
    alerts: dict[str, Posted]  # by pod
    cart0_end: datetime  # when cartservice-0 was resolved


class Receiver:
    """A webhook receiver on loopback: each POST body, as Alertmanager sent it (one line of JSON), a line of ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode("utf-8")
                with receiver._lock, receiver.path.open("a", encoding="utf-8") as out:
                    out.write(body.strip() + "\n")  # Go's json.Encoder: one line and a newline
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                log.debug("webhook receiver: " + format, *args)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def payloads(self) -> list[dict]:
        with self._lock:
            text = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _config(receiver_url: str) -> str:
    return f"""\
route:
  receiver: rca
  group_by: [alertname, service]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: rca
    webhook_configs:
      - url: {receiver_url}
        send_resolved: true
        max_alerts: 2
"""


def _wait(what: str, done: Callable[[], bool], server: subprocess.Popen, log_path: Path) -> None:
    wait_until(what, done, server=server, log_path=log_path, timeout_s=WAIT_S, name="alertmanager")


def _alert(pod: str, service: str, alertname: str, summary: str, starts: str, ends: str | None = None) -> dict:
    alert = {"labels": {"alertname": alertname, "service": service, "pod": pod, "severity": "page"},
             "annotations": {"summary": summary}, "startsAt": starts,
             "generatorURL": f"http://prometheus:9090/graph?g0.expr={alertname}"}
    return alert | ({"endsAt": ends} if ends is not None else {})


@pytest.fixture(scope="module")
def alertmanager_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    binary, amtool = _binaries()
    root = tmp_path_factory.mktemp("alertmanager")
    receiver = Receiver(root / "webhook.log")
    config = root / "alertmanager.yml"
    config.write_text(_config(receiver.url), encoding="utf-8")
    url = f"http://127.0.0.1:{free_port()}"
    log_path = root / "alertmanager.log"
    command = [binary, f"--config.file={config}", f"--storage.path={root / 'data'}", "--cluster.listen-address=",
               f"--web.listen-address={url.removeprefix('http://')}"]
    with closing(receiver), running(command, log_path=log_path) as server:
        _wait("readiness", ready(url), server, log_path)
        now = datetime.now(UTC)
        cart0_start = now - timedelta(minutes=5)
        local = cart0_start.astimezone(timezone(timedelta(hours=8)))
        alerts = {
            "checkoutservice-0": Posted("checkoutservice-0", "checkoutservice-0 error ratio above 5%",
                                        now - timedelta(minutes=3), _z(now - timedelta(minutes=3))),
            "checkoutservice-1": Posted("checkoutservice-1", "checkoutservice-1 error ratio above 5%",
                                        now - timedelta(minutes=2), _z(now - timedelta(minutes=2))),
            # The earliest, but sorted last by its labels: max_alerts leaves it out of the payload.
            "checkoutservice-2": Posted("checkoutservice-2", "checkoutservice-2 error ratio above 5%",
                                        now - timedelta(minutes=4), _z(now - timedelta(minutes=4))),
            # Nanoseconds and an offset, as a Go sender may write them.
            "cartservice-0": Posted("cartservice-0", "cart p99 over 500ms", cart0_start,
                                    f"{local:%Y-%m-%dT%H:%M:%S}.{local.microsecond:06d}789+08:00"),
            "cartservice-1": Posted("cartservice-1", "cart p99 over 500ms", now - timedelta(minutes=6),
                                    _z(now - timedelta(minutes=6))),
        }
        sent = [
            _alert("checkoutservice-0", "checkoutservice", "HighErrorRate", alerts["checkoutservice-0"].summary,
                   alerts["checkoutservice-0"].start_text),
            _alert("checkoutservice-1", "checkoutservice", "HighErrorRate", alerts["checkoutservice-1"].summary,
                   alerts["checkoutservice-1"].start_text, _z(now + timedelta(hours=1))),
            _alert("checkoutservice-2", "checkoutservice", "HighErrorRate", alerts["checkoutservice-2"].summary,
                   alerts["checkoutservice-2"].start_text),
            _alert("cartservice-0", "cartservice", "HighLatency", alerts["cartservice-0"].summary,
                   alerts["cartservice-0"].start_text),
            _alert("cartservice-1", "cartservice", "HighLatency", alerts["cartservice-1"].summary,
                   alerts["cartservice-1"].start_text, _z(now - timedelta(minutes=1))),  # resolved
        ]
        response = httpx.post(f"{url}/api/v2/alerts", json=sent, timeout=10)
        assert response.status_code == 200, response.text

        def has(key: str, status: str, pods: set[str] | None = None, truncated: int = 0) -> Callable[[], bool]:
            # A group is flushed as soon as its first alert is in (startsAt is older than group_wait), so its
            # first payload may hold only the alerts routed by then: the whole group follows a group_interval on.
            return lambda: any(p["groupKey"] == key and p["status"] == status and p["truncatedAlerts"] == truncated
                               and (pods is None or {a["labels"]["pod"] for a in p["alerts"]} == pods)
                               for p in receiver.payloads())

        _wait("firing payload of all of HighErrorRate",
              has(CHECKOUT_KEY, "firing", {"checkoutservice-0", "checkoutservice-1"}, truncated=1), server, log_path)
        _wait("firing payload of all of HighLatency", has(CART_KEY, "firing", {"cartservice-0", "cartservice-1"}),
              server, log_path)
        api_file, amtool_file = root / "api-v2-alerts.json", root / "amtool-alerts.json"
        listing = httpx.get(f"{url}/api/v2/alerts", timeout=10)
        assert listing.status_code == 200, listing.text
        api_file.write_bytes(listing.content)  # what `curl .../api/v2/alerts > FILE` saves
        queried = subprocess.run([amtool, "alert", "query", "-o", "json", f"--alertmanager.url={url}"],
                                 capture_output=True, text=True, timeout=30)
        assert queried.returncode == 0, queried.stderr
        amtool_file.write_text(queried.stdout, encoding="utf-8")

        # Prometheus resolves cartservice-0: sent again with endsAt; the group goes out again, resolved.
        cart0_end = datetime.now(UTC) - timedelta(seconds=1)
        resolved = _alert("cartservice-0", "cartservice", "HighLatency", alerts["cartservice-0"].summary,
                          alerts["cartservice-0"].start_text, _z(cart0_end))
        response = httpx.post(f"{url}/api/v2/alerts", json=[resolved], timeout=10)
        assert response.status_code == 200, response.text
        _wait("resolved payload of HighLatency", has(CART_KEY, "resolved"), server, log_path)
        yield Run(url=url, webhook_log=receiver.path, api_file=api_file, amtool_file=amtool_file, alerts=alerts,
                  cart0_end=cart0_end)


def _payloads(run: Run) -> list[dict]:
    return [json.loads(line) for line in run.webhook_log.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_server_sends_what_read_alerts_is_written_for(alertmanager_run: Run) -> None:
    """The fixture's own check of the real payloads: version 4, the groupKey of the route, Go's zero
    time for a firing alert's endsAt (even one POSTed with an endsAt ahead), max_alerts counted."""
    payloads = _payloads(alertmanager_run)
    assert {p["version"] for p in payloads} == {"4"}
    checkout = [p for p in payloads if p["groupKey"] == CHECKOUT_KEY]
    assert checkout[-1]["truncatedAlerts"] == 1
    assert [a["labels"]["pod"] for a in checkout[-1]["alerts"]] == ["checkoutservice-0", "checkoutservice-1"]
    assert {a["endsAt"] for p in checkout for a in p["alerts"]} == {"0001-01-01T00:00:00Z"}
    assert not any(a["labels"]["pod"] == "checkoutservice-2" for p in checkout for a in p["alerts"])
    cart = [p for p in payloads if p["groupKey"] == CART_KEY]
    assert [p["status"] for p in cart][-1] == "resolved" and {p["status"] for p in cart[:-1]} == {"firing"}
    # The webhook echoes startsAt as it was sent, nanoseconds and offset included.
    assert {a["startsAt"] for p in cart for a in p["alerts"] if a["labels"]["pod"] == "cartservice-0"} == {
        alertmanager_run.alerts["cartservice-0"].start_text}


def test_the_receivers_log_gives_one_case_per_group(alertmanager_run: Run, caplog: pytest.LogCaptureFixture) -> None:
    """One case per groupKey, named <alertname>-<sha256(groupKey)>: the window opens the lead before the
    earliest startsAt the group reported (to the microsecond), a firing alert ends span after its start
    (a payload has no time of sending), a resolved group at its latest endsAt."""
    posted = alertmanager_run.alerts
    with caplog.at_level(logging.WARNING, logger="diagnose.cases"):
        alerts = read_alerts(alertmanager_run.webhook_log, lead=LEAD, span=SPAN)
    assert alerts.bad == {}
    by_id = {case.uuid: case for case in alerts.cases}
    assert set(by_id) == {_case_id("HighErrorRate", CHECKOUT_KEY), _case_id("HighLatency", CART_KEY)}
    assert "left 1 alerts out of this payload (max_alerts)" in caplog.text

    checkout = by_id[_case_id("HighErrorRate", CHECKOUT_KEY)]
    # checkoutservice-2 fired first but was truncated away: the window is the two alerts sent.
    assert (checkout.start, checkout.end) == (posted["checkoutservice-0"].start - LEAD,
                                              posted["checkoutservice-1"].start + SPAN)
    window = f"from {checkout.start:%Y-%m-%dT%H:%M:%SZ} to {checkout.end:%Y-%m-%dT%H:%M:%SZ}"
    assert checkout.description == (
        "Firing alerts: HighErrorRate (service=checkoutservice, pod=checkoutservice-0): checkoutservice-0 error "
        "ratio above 5%; HighErrorRate (service=checkoutservice, pod=checkoutservice-1): checkoutservice-1 error "
        f"ratio above 5%. The anomaly lasted {window}.")

    cart = by_id[_case_id("HighLatency", CART_KEY)]
    # Sent twice: firing (cartservice-0 firing, cartservice-1 resolved), then resolved: one case, resolved.
    assert (cart.start, cart.end) == (posted["cartservice-1"].start - LEAD, alertmanager_run.cart0_end)
    assert cart.description.startswith(
        "Resolved alerts: HighLatency (service=cartservice, pod=cartservice-1): cart p99 over 500ms; "
        "HighLatency (service=cartservice, pod=cartservice-0): cart p99 over 500ms. The anomaly lasted from ")


def test_the_api_v2_list_gives_one_case_per_firing_alert(alertmanager_run: Run) -> None:
    """GET /api/v2/alerts and amtool's JSON: one case per fingerprint (the webhook's fingerprints), each
    from the lead before its startsAt (API v2 echoes milliseconds) to its updatedAt: Alertmanager's
    endsAt of a firing alert is ahead, no end. A resolved alert is not listed."""
    posted = alertmanager_run.alerts
    listing = json.loads(alertmanager_run.api_file.read_text(encoding="utf-8"))
    by_pod = {alert["labels"]["pod"]: alert for alert in listing}
    assert set(by_pod) == {"checkoutservice-0", "checkoutservice-1", "checkoutservice-2", "cartservice-0"}
    webhook_fingerprints = {a["labels"]["pod"]: a["fingerprint"] for p in _payloads(alertmanager_run) for a in p["alerts"]}
    assert all(webhook_fingerprints[pod] == alert["fingerprint"] for pod, alert in by_pod.items()
               if pod in webhook_fingerprints)

    alerts = read_alerts(alertmanager_run.api_file, lead=LEAD, span=SPAN)
    assert alerts.bad == {}
    by_id = {case.uuid: case for case in alerts.cases}
    assert len(alerts.cases) == 4
    for pod, alert in by_pod.items():
        case = by_id[f"{alert['labels']['alertname']}-{alert['fingerprint']}"]
        updated = datetime.fromisoformat(alert["updatedAt"])
        assert datetime.fromisoformat(alert["endsAt"]) > updated  # Alertmanager's guess at its end
        assert (case.start, case.end) == (_millis(posted[pod].start) - LEAD, updated), pod
        assert case.description.startswith(
            f"Firing alert: {alert['labels']['alertname']} (service={alert['labels']['service']}, pod={pod}): "
            f"{posted[pod].summary}. The anomaly lasted from "), case.description

    # amtool alert query -o json saves the same alerts: the same cases.
    queried = read_alerts(alertmanager_run.amtool_file, lead=LEAD, span=SPAN)
    assert queried.bad == {} and {c.uuid: c for c in queried.cases} == by_id


def _fake_diagnoser(monkeypatch: pytest.MonkeyPatch):
    """The CLI tests' Diagnoser: a static index (one candidate) and knowledge base; no model is called."""
    import diagnose.service
    from diagnose.service import Diagnoser
    from tests.fakes import StaticEvidence, StaticKnowledge

    evidence = StaticEvidence([Candidate(component="checkoutservice", level="service", score=0.9, evidence=[])])
    monkeypatch.setattr(diagnose.service.Diagnoser, "from_settings", staticmethod(
        lambda settings, *, case_windows=None: Diagnoser(settings=settings, evidence=evidence,
                                                         knowledge=StaticKnowledge())))
    for name in ("RCA_DIAGNOSE__ALERT_LEAD", "RCA_DIAGNOSE__ALERT_SPAN"):
        monkeypatch.delenv(name, raising=False)
    return evidence


def test_cli_diagnoses_every_group_of_the_receivers_log(alertmanager_run: Run, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`rca diagnose --alerts webhook.log --print-prompt --json`: a prompt per group, each for its window."""
    evidence = _fake_diagnoser(monkeypatch)
    expected = read_alerts(alertmanager_run.webhook_log, lead=LEAD, span=SPAN).cases  # the settings' defaults
    result = runner.invoke(app, ["diagnose", "--alerts", str(alertmanager_run.webhook_log), "--print-prompt",
                                 "--json", "--index-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    prompts = [json.loads(line) for line in result.output.splitlines() if line.startswith('{"uuid"')]
    assert [p["uuid"] for p in prompts] == [case.uuid for case in expected]
    assert {p["uuid"] for p in prompts} == {_case_id("HighErrorRate", CHECKOUT_KEY), _case_id("HighLatency", CART_KEY)}
    assert all(p["candidates"] == ["checkoutservice"] for p in prompts)
    assert evidence.queries == [(case.start, case.end) for case in expected]  # each group's window, as read


def test_cli_diagnoses_what_fires_now_at_the_alertmanager(alertmanager_run: Run, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`rca diagnose --alertmanager URL --print-prompt --json`: GET /api/v2/alerts (active, neither silenced nor
    inhibited) gives a case per firing alert, named and windowed as the saved API v2 file's; --alert-filter
    narrows them (all must match); none firing is said, exit status 0; an unreachable URL is named."""
    import preprocess.formats.pull_http

    evidence = _fake_diagnoser(monkeypatch)
    saved = {case.uuid: case for case in read_alerts(alertmanager_run.api_file, lead=LEAD, span=SPAN).cases}
    listing = json.loads(alertmanager_run.api_file.read_text(encoding="utf-8"))
    ids = {alert["labels"]["pod"]: f"{alert['labels']['alertname']}-{alert['fingerprint']}" for alert in listing}
    firing = [ids[pod] for pod in ("checkoutservice-0", "checkoutservice-1", "checkoutservice-2")]  # cart: resolved

    def diagnose(*flags: str) -> tuple[int, list[str], str]:
        evidence.queries.clear()
        result = runner.invoke(app, ["diagnose", "--alertmanager", alertmanager_run.url, *flags, "--print-prompt",
                                     "--json", "--index-dir", str(tmp_path)])
        prompts = [json.loads(line)["uuid"] for line in result.output.splitlines() if line.startswith('{"uuid"')]
        return result.exit_code, prompts, result.output

    code, prompts, output = diagnose()
    assert code == 0, output
    assert sorted(prompts) == sorted(firing)
    assert sorted(evidence.queries) == sorted((saved[uuid].start, saved[uuid].end) for uuid in firing)

    code, prompts, output = diagnose("--alert-filter", 'service="checkoutservice"', "--alert-filter",
                                     'pod=~"checkoutservice-[01]"')
    assert code == 0, output
    assert sorted(prompts) == sorted(firing[:2])

    code, prompts, output = diagnose("--alert-filter", 'service=~"checkout.*"', "--uuid", firing[1])
    assert (code, prompts) == (0, [firing[1]]), output

    code, prompts, output = diagnose("--alert-filter", 'service="cartservice"')
    assert (code, prompts) == (0, []), output
    assert f'no alert firing matching service="cartservice" at {alertmanager_run.url}/api/v2/alerts' in output

    code, prompts, output = diagnose("--alert-filter", "service")  # no matcher: refused before any request
    assert code == 2 and "--alert-filter 'service': expected a label matcher" in output, output

    monkeypatch.setattr(preprocess.formats.pull_http, "RETRY_BACKOFF_S", 0.0)
    unreachable = f"http://127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["diagnose", "--alertmanager", unreachable, "--print-prompt", "--json",
                                 "--index-dir", str(tmp_path)])
    assert result.exit_code == 2 and f"{unreachable}/api/v2/alerts" in result.output, result.output
    assert "ConnectError" in result.output and not evidence.queries
