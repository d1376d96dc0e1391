"""`rca diagnose --alerts FILE` reads what an SRE's alerting writes (diagnose/cases.py read_alerts):
Alertmanager (and Grafana) webhook payloads, one or a receiver's JSON-lines log of them, Alertmanager
API v2 alert lists, and our own {id, start, end, summary} list. The payloads below follow
Alertmanager's documented webhook format (version 4) and API v2 `gettableAlerts`."""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from app.cli import app
from diagnose.cases import CaseError, alert_cases, parse_window, read_alerts
from index.models import Candidate, EvidenceItem
from rca.settings import load_settings

runner = CliRunner()
LEAD, SPAN = timedelta(minutes=5), timedelta(minutes=10)
NOW = datetime(2025, 6, 5, 12, 0, tzinfo=UTC)  # when the file is read: after every instant below


def _alert(name: str, *, status: str, starts: str, ends: str = "0001-01-01T00:00:00Z", fingerprint: str,
           summary: str = "", description: str = "", **labels: str) -> dict:
    return {
        "status": status,
        "labels": {"alertname": name, **labels, "severity": "page"},
        "annotations": {k: v for k, v in (("summary", summary), ("description", description)) if v}
        | {"runbook_url": "https://runbooks.example.com/" + name},
        "startsAt": starts,
        "endsAt": ends,
        "generatorURL": f"http://prometheus:9090/graph?g0.expr=job%3A{name}&g0.tab=1",
        "fingerprint": fingerprint,
    }


def _payload(group_key: str, group_labels: dict, alerts: list[dict], **extra: object) -> dict:
    """What Alertmanager POSTs to a webhook receiver: its status is "resolved" when every alert is."""
    common = {k: v for k, v in alerts[0]["labels"].items() if all(a["labels"].get(k) == v for a in alerts)}
    return {
        "version": "4", "groupKey": group_key, "truncatedAlerts": 0,
        "status": "firing" if any(a.get("status", "firing") == "firing" for a in alerts) else "resolved",
        "receiver": "rca", "groupLabels": group_labels, "commonLabels": common, "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093", "alerts": alerts, **extra,
    }


HIGH_ERRORS = _payload('{}/{severity="page"}:{alertname="HighErrorRate"}', {"alertname": "HighErrorRate"}, [
    _alert("HighErrorRate", status="firing", starts="2025-06-05T16:04:12.345678901+08:00", fingerprint="a1b2c3d4e5f60718",
           summary="checkoutservice error ratio above 5%",
           description="7.3% of PlaceOrder requests\n  failed over the last 5m.\n",
           service="checkoutservice", namespace="hipstershop", pod="checkoutservice-1", job="kubernetes-pods"),
    _alert("HighErrorRate", status="resolved", starts="2025-06-05T08:06:00Z", ends="2025-06-05T08:12:30.5Z",
           fingerprint="0f1e2d3c4b5a6978", summary="cartservice error ratio above 5%.",
           service="cartservice", namespace="hipstershop", instance="10.0.3.7:7070"),
])


def _write(tmp_path: Path, content: object, name: str = "alerts.json") -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content, indent=2), encoding="utf-8")
    return path


def test_an_alertmanager_webhook_payload_is_one_case(tmp_path: Path) -> None:
    """One payload, one incident: the window opens the lead before the earliest startsAt (the rule
    fired after its `for:`), nanoseconds and offset read exactly to UTC; the still-firing alert
    (endsAt is Go's zero time) ends startsAt + span, later than the resolved one."""
    alerts = read_alerts(_write(tmp_path, HIGH_ERRORS), lead=LEAD, span=SPAN, now=NOW)
    assert alerts.bad == {}
    [case] = alerts.cases
    assert case.uuid == "HighErrorRate-747d0c9a53"  # alertname + sha256(groupKey): stable, safe as a file name
    first_fired = datetime(2025, 6, 5, 8, 4, 12, 345678, tzinfo=UTC)  # 16:04:12.345678901+08:00, to the microsecond
    assert (case.start, case.end) == (first_fired - LEAD, first_fired + SPAN)
    assert case.description == (
        "Firing alerts: HighErrorRate (service=checkoutservice, pod=checkoutservice-1, job=kubernetes-pods, "
        "namespace=hipstershop): checkoutservice error ratio above 5%. 7.3% of PlaceOrder requests failed over the "
        "last 5m; HighErrorRate (service=cartservice, instance=10.0.3.7:7070, namespace=hipstershop): cartservice "
        "error ratio above 5%. The anomaly lasted from 2025-06-05T07:59:12Z to 2025-06-05T08:14:12Z.")
    # The description reads like a case of input.json: its window parses back.
    assert parse_window(case.description, uuid=case.uuid) == (case.start.replace(microsecond=0),
                                                              case.end.replace(microsecond=0))


def test_a_resolved_payload_is_a_postmortem_case_ending_at_its_latest_end(tmp_path: Path) -> None:
    payload = _payload('{}/{team="shop"}:{alertname="CartLatencyHigh"}', {"alertname": "CartLatencyHigh"}, [
        _alert("CartLatencyHigh", status="resolved", starts="2025-06-05T09:00:30Z", ends="2025-06-05T09:21:00Z",
               fingerprint="1111222233334444", summary="cart p99 over 500ms", service="cartservice"),
        _alert("CartLatencyHigh", status="resolved", starts="2025-06-05T09:02:00Z", ends="2025-06-05T09:14:00Z",
               fingerprint="5555666677778888", summary="cart p99 over 500ms", service="cartservice"),
    ])
    [case] = read_alerts(_write(tmp_path, payload), lead=LEAD, span=SPAN, now=NOW).cases
    assert case.uuid == "CartLatencyHigh-26d8daf530"
    assert (case.start, case.end) == (datetime(2025, 6, 5, 8, 55, 30, tzinfo=UTC), datetime(2025, 6, 5, 9, 21, tzinfo=UTC))
    # Two alerts saying the same thing are said once.
    assert case.description.startswith("Resolved alerts: CartLatencyHigh (service=cartservice): cart p99 over 500ms. ")


def test_an_end_after_the_time_of_reading_is_no_end(tmp_path: Path) -> None:
    """A sender that writes a firing alert's provisional endsAt (now + resolve_timeout) without a
    status: the alert still fires, so its window runs startsAt + span, not to that guess."""
    alert = _alert("DiskFilling", status="firing", starts="2025-06-05T11:50:00Z", ends="2025-06-05T12:05:00Z",
                   fingerprint="9999aaaabbbbcccc", node="aiops-k8s-03")
    del alert["status"]
    payload = _payload('{}:{alertname="DiskFilling"}', {"alertname": "DiskFilling"}, [alert])
    [case] = read_alerts(_write(tmp_path, payload), lead=LEAD, span=SPAN, now=NOW).cases
    assert (case.start, case.end) == (datetime(2025, 6, 5, 11, 45, tzinfo=UTC), datetime(2025, 6, 5, 12, 0, tzinfo=UTC))
    assert case.description.startswith("Firing alert: DiskFilling (node=aiops-k8s-03).")
    # Read after that endsAt (a postmortem of a log), the same alert's end is an end.
    [later] = read_alerts(_write(tmp_path, payload), lead=LEAD, span=SPAN, now=NOW + timedelta(hours=1)).cases
    assert later.end == datetime(2025, 6, 5, 12, 5, tzinfo=UTC) and later.description.startswith("Resolved alert:")


def test_a_webhook_log_gives_one_case_per_group_and_bad_lines_fail_alone(tmp_path: Path) -> None:
    """A receiver's JSON-lines log: the same group sent again as it changes is one case (its window
    spans every alert the group reported, a resolved end replacing the earlier still-firing guess);
    a malformed line, a payload without groupKey and an alert with a bad startsAt fail alone."""
    crash_key = '{}/{}:{alertname="PodCrashLooping", namespace="hipstershop"}'
    crash_labels = {"alertname": "PodCrashLooping", "namespace": "hipstershop"}
    first = _alert("PodCrashLooping", status="firing", starts="2025-06-05T10:00:00Z", fingerprint="c0ffee0000000001",
                   summary="pod restarting", pod="redis-cart-0", namespace="hipstershop")
    resolved = dict(first, status="resolved", endsAt="2025-06-05T10:07:00Z")
    second = _alert("PodCrashLooping", status="resolved", starts="2025-06-05T10:03:00Z", ends="2025-06-05T10:06:00Z",
                    fingerprint="c0ffee0000000002", summary="pod restarting", pod="cartservice-0", namespace="hipstershop")
    grafana = {  # Grafana unified alerting's webhook: Alertmanager's shape plus its own fields
        "receiver": "rca", "status": "resolved", "orgId": 1, "version": "1", "groupKey": '{}:{alertname="High memory usage", grafana_folder="shop"}',
        "truncatedAlerts": 0, "title": "[RESOLVED] High memory usage (shop)", "state": "ok", "message": "**Resolved**",
        "groupLabels": {"alertname": "High memory usage", "grafana_folder": "shop"}, "commonLabels": {}, "commonAnnotations": {},
        "externalURL": "https://grafana.example.com/",
        "alerts": [{
            "status": "resolved", "labels": {"alertname": "High memory usage", "grafana_folder": "shop", "pod": "emailservice-2"},
            "annotations": {"summary": "emailservice-2 memory above 90%"},
            "startsAt": "2021-10-12T09:51:03.157076+02:00", "endsAt": "2021-10-12T10:02:03.157076+02:00",
            "generatorURL": "https://grafana.example.com/alerting/grafana/x/view", "fingerprint": "c6eadffa33fcdf37",
            "silenceURL": "https://grafana.example.com/alerting/silence/new", "dashboardURL": "", "panelURL": "",
            "values": {"B": 93.1, "C": 1}, "valueString": "[ var='B' labels={pod=emailservice-2} value=93.1 ]",
        }],
    }
    bad_alert = _alert("PodCrashLooping", status="firing", starts="yesterday", fingerprint="c0ffee0000000003",
                       pod="frontend-0", namespace="hipstershop")
    no_key = _payload("x", {}, [first])
    del no_key["groupKey"]
    lines = [
        json.dumps(_payload(crash_key, crash_labels, [first])),
        json.dumps(grafana),
        '{"version": "4", "groupKey": "{}:{alertname=\\"Trunc',  # a line cut short
        json.dumps(_payload(crash_key, crash_labels, [first])),  # sent again: group_interval, nothing new
        "",
        json.dumps(_payload(crash_key, crash_labels, [resolved, second, bad_alert])),
        json.dumps(no_key),
    ]
    path = _write(tmp_path, "\n".join(lines) + "\n", name="webhook.log")
    alerts = read_alerts(path, lead=LEAD, span=SPAN, now=NOW)

    assert [c.uuid for c in alerts.cases] == ["PodCrashLooping-13bc93675c", "High-memory-usage-bdd775ba1b"]
    crash, memory = alerts.cases
    # 10:00 - lead to 10:07: the first firing's provisional end (10:10) gave way to its resolved end.
    assert (crash.start, crash.end) == (datetime(2025, 6, 5, 9, 55, tzinfo=UTC), datetime(2025, 6, 5, 10, 7, tzinfo=UTC))
    assert crash.description.startswith(
        "Resolved alerts: PodCrashLooping (pod=redis-cart-0, namespace=hipstershop): pod restarting; "
        "PodCrashLooping (pod=cartservice-0, namespace=hipstershop): pod restarting.")
    assert (memory.start, memory.end) == (datetime(2021, 10, 12, 7, 46, 3, 157076, tzinfo=UTC),
                                          datetime(2021, 10, 12, 8, 2, 3, 157076, tzinfo=UTC))
    assert memory.description.startswith("Resolved alert: High memory usage (pod=emailservice-2): emailservice-2 memory above 90%.")

    assert set(alerts.bad) == {"line 3", "line 6 alert 2", "line 7"}
    assert alerts.bad["line 3"].startswith(f"{path}: line 3: malformed JSON at column")
    assert alerts.bad["line 6 alert 2"] == (f"{path}: line 6: alert 2: field 'startsAt': 'yesterday' is not an "
                                            "ISO-8601 instant (e.g. 2025-06-22T04:18Z)")
    assert alerts.bad["line 7"] == f"{path}: line 7: Alertmanager webhook payload without field 'groupKey'"


def test_an_api_v2_alert_list_gives_one_case_per_fingerprint(tmp_path: Path) -> None:
    """GET /api/v2/alerts (amtool alert query -o json): a still-firing alert's endsAt is Alertmanager's
    guess, so its window ends at updatedAt, the last time it was sent, but at most span after startsAt (an
    alert firing for hours makes no window of hours); without updatedAt, startsAt + span."""
    def api(name: str, fingerprint: str | None, starts: str, ends: str, updated: str | None, state: str = "active",
            **labels: str) -> dict:
        alert = {"labels": {"alertname": name, **labels}, "annotations": {"summary": f"{name} on {labels.get('service', '?')}"},
                 "startsAt": starts, "endsAt": ends, "fingerprint": fingerprint,
                 "receivers": [{"name": "rca"}], "generatorURL": "http://prometheus:9090/graph",
                 "status": {"state": state, "silencedBy": ["5b3a"] if state == "suppressed" else [], "inhibitedBy": []},
                 "updatedAt": updated}
        return {k: v for k, v in alert.items() if v is not None}

    listing = [
        api("HighLatency", "3f9a1c2b4d5e6f70", "2025-06-05T16:04:12.345678901+08:00", "2025-06-05T16:30:00+08:00",
            "2025-06-05T16:20:01.5+08:00", service="frontend"),
        api("HighLatency", "3f9a1c2b4d5e6f70", "2025-06-05T16:04:12.345678901+08:00", "2025-06-05T16:30:00+08:00",
            "2025-06-05T16:20:01.5+08:00", service="frontend"),  # the same alert from the HA peer: one case
        api("NodeDiskFull", "0a0b0c0d0e0f1011", "2025-06-05T11:40:00Z", "2025-06-05T12:30:00Z", None, node="aiops-k8s-02"),
        api("CPUThrottling", "aa00bb11cc22dd33", "2025-06-05T09:10:00Z", "2025-06-05T09:25:00Z", "2025-06-05T09:26:00Z",
            state="suppressed", service="currencyservice"),
        api("NoFingerprint", None, "2025-06-05T09:00:00Z", "2025-06-05T09:05:00Z", None),
        api("BadStart", "feedfacefeedface", "2025-06-05 9am", "2025-06-05T09:05:00Z", None),
    ]
    alerts = read_alerts(_write(tmp_path, listing), lead=LEAD, span=SPAN, now=NOW)
    assert [c.uuid for c in alerts.cases] == ["HighLatency-3f9a1c2b4d5e6f70", "NodeDiskFull-0a0b0c0d0e0f1011",
                                              "CPUThrottling-aa00bb11cc22dd33"]
    latency, disk, throttling = alerts.cases
    # updatedAt 16:20:01.5+08:00 is 16 minutes after startsAt: the window stops SPAN after it.
    assert (latency.start, latency.end) == (datetime(2025, 6, 5, 7, 59, 12, 345678, tzinfo=UTC),
                                            datetime(2025, 6, 5, 8, 14, 12, 345678, tzinfo=UTC))
    assert latency.description.startswith("Firing alert: HighLatency (service=frontend): HighLatency on frontend.")
    assert (disk.start, disk.end) == (datetime(2025, 6, 5, 11, 35, tzinfo=UTC), datetime(2025, 6, 5, 11, 50, tzinfo=UTC))
    assert (throttling.start, throttling.end) == (datetime(2025, 6, 5, 9, 5, tzinfo=UTC), datetime(2025, 6, 5, 9, 25, tzinfo=UTC))
    assert throttling.description.startswith("Resolved alert (suppressed): CPUThrottling (service=currencyservice)")
    assert alerts.bad == {
        "alert 4": f"{tmp_path / 'alerts.json'}: alert 4: Alertmanager API v2 alert without field 'fingerprint'",
        "BadStart-feedfacefeedface": f"{tmp_path / 'alerts.json'}: alert 5: field 'startsAt': '2025-06-05 9am' is not "
                                     "an ISO-8601 instant (e.g. 2025-06-22T04:18Z)",
    }


def test_our_own_alert_list_is_read_as_before(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        {"id": "PD-1", "start": "2025-06-22T04:18:00Z", "end": "2025-06-22T04:21:00Z", "summary": "checkout p99 latency high"},
        {"id": "PD-2", "start": "2025-06-22T05:00:00Z", "summary": "no end"},
    ])
    alerts = read_alerts(path, lead=LEAD, span=SPAN, now=NOW)
    [case] = alerts.cases
    assert (case.uuid, case.start, case.end) == ("PD-1", datetime(2025, 6, 22, 4, 18, tzinfo=UTC),
                                                 datetime(2025, 6, 22, 4, 21, tzinfo=UTC))  # no lead: the window as given
    assert case.description == ("checkout p99 latency high The anomaly lasted from 2025-06-22T04:18:00Z "
                                "to 2025-06-22T04:21:00Z.")
    assert alerts.bad == {"PD-2": f"{path}: alert 1: missing field 'end'"}


@pytest.mark.parametrize(("content", "expected"), [
    ({"receiver": "rca", "status": "firing"}, "got a dict with keys receiver, status"),
    ('{\n  "version": "4",\n  "alerts": [\n}', "malformed JSON at line 4"),
    ("", "alert file is empty"),
])
def test_a_file_of_no_known_shape_names_the_shapes(tmp_path: Path, content: object, expected: str) -> None:
    with pytest.raises(CaseError) as info:
        read_alerts(_write(tmp_path, content))
    assert expected in str(info.value) and "alerts.json" in str(info.value)
    if isinstance(content, dict):
        assert "Alertmanager webhook payload" in str(info.value) and "API v2" in str(info.value)


AM_URL = "http://alertmanager:9093/api/v2/alerts"
FIRING_LIST = [
    {"labels": {"alertname": "HighLatency", "service": "frontend"}, "annotations": {"summary": "p99 over 1s"},
     "startsAt": "2025-06-05T08:04:12.5Z", "endsAt": "2025-06-05T08:30:00Z", "updatedAt": "2025-06-05T08:20:01Z",
     "fingerprint": "3f9a1c2b4d5e6f70", "receivers": [{"name": "rca"}],
     "status": {"state": "active", "silencedBy": [], "inhibitedBy": []}},
    {"labels": {"alertname": "NoStart"}, "startsAt": "", "endsAt": "2025-06-05T08:30:00Z",
     "updatedAt": "2025-06-05T08:20:01Z", "fingerprint": "0a0b0c0d0e0f1011"},
]


def test_a_loaded_alert_document_reads_as_its_file_naming_its_source(tmp_path: Path) -> None:
    """`alert_cases`, what read_alerts does with a file's one JSON document and `diagnose --alertmanager` with
    GET /api/v2/alerts' answer: the same cases as the saved file; errors name the given source (the URL)."""
    pulled = alert_cases(FIRING_LIST, source=AM_URL, lead=LEAD, span=SPAN, now=NOW)
    saved = read_alerts(_write(tmp_path, FIRING_LIST), lead=LEAD, span=SPAN, now=NOW)
    assert pulled.cases == saved.cases and [c.uuid for c in pulled.cases] == ["HighLatency-3f9a1c2b4d5e6f70"]
    assert pulled.path == AM_URL
    assert pulled.bad == {"NoStart-0a0b0c0d0e0f1011": f"{AM_URL}: alert 1: missing field 'startsAt'"}
    assert alert_cases([], source=AM_URL).cases == []  # nothing firing: no case, no error
    with pytest.raises(CaseError, match=f"^{AM_URL}: expected an Alertmanager webhook payload .* got a str$"):
        alert_cases("Service Unavailable", source=AM_URL)


def test_pull_alerts_asks_alertmanager_for_what_fires_now() -> None:
    """`diagnose --alertmanager`: GET /api/v2/alerts, active, neither silenced nor inhibited, each --alert-filter
    a `filter` parameter, the --header sent; the server's refusal and an answer that is no list name the URL."""
    from diagnose.alertmanager import pull_alerts
    from preprocess.formats.pull_http import PullError

    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.params.get("filter") == 'service="unclosed':  # Alertmanager's 400: a JSON string
            return httpx.Response(400, json='bad matcher format: service="unclosed')
        return httpx.Response(200, json={"not": "a list"} if request.url.host == "odd" else FIRING_LIST)

    pulled = pull_alerts("http://alertmanager:9093/", filters=['service="frontend"', 'pod=~"front.*"'],
                         headers={"Authorization": "Bearer s3cret"}, lead=LEAD, span=SPAN, now=NOW,
                         transport=httpx.MockTransport(answer))
    assert [c.uuid for c in pulled.cases] == ["HighLatency-3f9a1c2b4d5e6f70"] and pulled.path == AM_URL
    [request] = seen
    assert request.url.path == "/api/v2/alerts" and request.headers["authorization"] == "Bearer s3cret"
    assert request.url.params.multi_items() == [("active", "true"), ("silenced", "false"), ("inhibited", "false"),
                                                ("filter", 'service="frontend"'), ("filter", 'pod=~"front.*"')]
    with pytest.raises(PullError, match=r'^GET http://alertmanager:9093/api/v2/alerts\?.*: HTTP 400: "bad matcher'):
        pull_alerts("http://alertmanager:9093", filters=['service="unclosed'], lead=LEAD, span=SPAN,
                    transport=httpx.MockTransport(answer))
    with pytest.raises(CaseError, match="^http://odd/api/v2/alerts: expected Alertmanager's API v2 alert list"):
        pull_alerts("http://odd", lead=LEAD, span=SPAN, transport=httpx.MockTransport(answer))
    with pytest.raises(PullError, match=r"^--alertmanager 'alertmanager:9093': expected http\(s\)://HOST"):
        pull_alerts("alertmanager:9093", lead=LEAD, span=SPAN, transport=httpx.MockTransport(answer))
    with pytest.raises(CaseError, match="--alert-filter 'service'"):
        pull_alerts("http://am", filters=["service"], lead=LEAD, span=SPAN, transport=httpx.MockTransport(answer))
    assert len(seen) == 3  # neither a bad URL nor a bad filter is sent


@pytest.mark.parametrize(("flags", "expected"), [
    (["--alerts", "alerts.json", "--alertmanager", "http://am:9093"], "give one of --alerts, --alertmanager"),
    (["--since", "15m", "--alertmanager", "http://am:9093"], "give one of --since, --alertmanager"),
    (["--alerts", "alerts.json", "--alert-filter", 'service="cart"', "--header", "A: b"],
     "--alert-filter, --header: only with --alertmanager"),
    (["--alertmanager", "am:9093"], "--alertmanager 'am:9093': expected http(s)://HOST[:PORT][/PATH]"),
    (["--alertmanager", "http://am:9093", "--header", "Bearer x"], "--header 'Bearer'...: expected 'Name: value'"),
])
def test_cli_alertmanager_is_one_more_case_source(flags: list[str], expected: str) -> None:
    """Refused before any request: --alertmanager beside another case source, its flags without it, bad values."""
    result = runner.invoke(app, ["diagnose", *flags, "--print-prompt"])
    assert result.exit_code == 2 and expected in result.output, result.output


def test_alert_lead_and_span_are_settings_spelled_as_durations() -> None:
    settings = load_settings(environ={"RCA_DIAGNOSE__ALERT_LEAD": "2m", "RCA_DIAGNOSE__ALERT_SPAN": "1h30m"})
    assert (settings.diagnose.alert_lead, settings.diagnose.alert_span) == (timedelta(minutes=2), timedelta(minutes=90))
    assert load_settings(environ={}).diagnose.alert_lead == LEAD and load_settings(environ={}).diagnose.alert_span == SPAN
    assert load_settings(environ={"RCA_DIAGNOSE__ALERT_LEAD": "0"}).diagnose.alert_lead == timedelta(0)
    flagged = load_settings(environ={"RCA_DIAGNOSE__ALERT_LEAD": "2m"}, overrides={"diagnose": {"alert_lead": "90s"}})
    assert flagged.diagnose.alert_lead == timedelta(seconds=90)


def test_cli_alerts_window_reaches_the_index_and_the_prompt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`rca diagnose --alerts webhook.json --print-prompt`: the payload's window (lead before the first
    startsAt) is the one the index is asked for, and the prompt's onsets count from its start."""
    import diagnose.service
    from diagnose.service import Diagnoser
    from tests.fakes import StaticEvidence, StaticKnowledge

    onset = datetime(2025, 6, 5, 8, 2, 12, tzinfo=UTC)  # 3 minutes after the window opens at 07:59:12
    cpu = EvidenceItem(modality="metric", signal="level", key="pod_cpu_usage", component="checkoutservice-1",
                       text="pod_cpu_usage up 4.1x (z=9.3) on checkoutservice-1", magnitude=9.3, onset=onset)
    evidence = StaticEvidence([Candidate(component="checkoutservice", level="service", score=0.9, evidence=[cpu])])
    seen: dict[str, object] = {}

    def wired(settings, *, case_windows=None):
        seen["case_windows"] = case_windows
        return Diagnoser(settings=settings, evidence=evidence, knowledge=StaticKnowledge())

    monkeypatch.setattr(diagnose.service.Diagnoser, "from_settings", staticmethod(wired))
    monkeypatch.delenv("RCA_DIAGNOSE__ALERT_LEAD", raising=False)
    path = _write(tmp_path, HIGH_ERRORS)
    result = runner.invoke(app, ["diagnose", "--alerts", str(path), "--print-prompt", "--index-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    first_fired = datetime(2025, 6, 5, 8, 4, 12, 345678, tzinfo=UTC)
    window = (first_fired - timedelta(minutes=5), first_fired + timedelta(minutes=10))  # the settings' defaults
    assert evidence.queries == [window] and seen["case_windows"] == [window]
    assert "1. checkoutservice service 0.9, 1 pod, from +3 min" in result.output

    # --alert-lead beats the environment (file < RCA_* < flags): the window opens 2 minutes earlier.
    monkeypatch.setenv("RCA_DIAGNOSE__ALERT_LEAD", "1m")
    result = runner.invoke(app, ["diagnose", "--alerts", str(path), "--alert-lead", "7m", "--print-prompt",
                                 "--index-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert evidence.queries[-1][0] == first_fired - timedelta(minutes=7)
    assert "1. checkoutservice service 0.9, 1 pod, from +5 min" in result.output

    result = runner.invoke(app, ["diagnose", "--alerts", str(path), "--alert-lead", "five", "--print-prompt"])
    assert result.exit_code == 2 and "diagnose.alert_lead" in result.output and "'five' is not a duration" in result.output
