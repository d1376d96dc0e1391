"""``rca diagnose --alertmanager URL``: the alerts firing now, pulled from Alertmanager's API v2.

``GET URL/api/v2/alerts?active=true&silenced=false&inhibited=false[&filter=MATCHER...]`` through the
project's pull client (``preprocess.formats.pull_http.PullClient``: timeout, headers, size bound,
retries, ``PullError`` naming the URL, the status and the server's text), and the answer turned into
cases exactly as a saved API v2 file is (``diagnose.cases.alert_cases``), named by the URL.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

import httpx

from diagnose.cases import CaseError, CaseFile, alert_cases
from preprocess.formats.pull_http import PullClient, redacted

ALERTS_PATH = "api/v2/alerts"
# What fires now: alerts not resolved, neither silenced nor inhibited. API v2 lists every one by default;
# "unprocessed" (just received, not yet routed) stays at its default, true: such an alert fires too.
FIRING_NOW = {"active": "true", "silenced": "false", "inhibited": "false"}
# The start of one Alertmanager label matcher (its labels.ParseMatcher): a label name, then =, !=, =~ or !~.
_MATCHER = re.compile(r"\s*[A-Za-z_:][A-Za-z0-9_:]*\s*(=~|!~|!=|=)")


def check_filter(text: str) -> str:
    """An ``--alert-filter`` as Alertmanager's ``filter`` parameter takes it, one label matcher
    (``service="cart"``, ``pod=~"cart-.*"``, ``severity!="info"``); ``CaseError`` when it is none.

    Only its shape is checked here: Alertmanager parses the value (HTTP 400 with its reason)."""
    if not _MATCHER.match(text):
        raise CaseError(f"--alert-filter {text!r}: expected a label matcher LABEL=VALUE, e.g. 'service=\"cart\"' "
                         "(operators =, !=, =~, !~)")
    return text.strip()


def pull_alerts(url: str, *, filters: Sequence[str] = (), headers: Mapping[str, str] | None = None,
                lead: timedelta, span: timedelta, now: datetime | None = None,
                transport: httpx.BaseTransport | None = None) -> CaseFile:
    """The cases of the alerts firing now at the Alertmanager ``url`` (its base: ``http://am:9093``, or
    the path it is served under), only those matching every filter; errors name the URL.

    Raises ``PullError`` for a URL that is no http(s) base and when the API cannot be queried,
    ``CaseError`` for a bad filter and when the answer is no alert list. Neither a bad URL nor a bad
    filter is sent.
    """
    params: dict[str, str | list[str]] = {**FIRING_NOW}
    if filters:
        params["filter"] = [check_filter(text) for text in filters]
    with PullClient(url, option="--alertmanager", headers=headers, transport=transport) as client:
        document = client.get_json(ALERTS_PATH, params=params)
        source = redacted(client.url(ALERTS_PATH))
    if not isinstance(document, list):
        raise CaseError(f"{source}: expected Alertmanager's API v2 alert list (a JSON list), "
                        f"got a {type(document).__name__}")
    return alert_cases(document, source=source, lead=lead, span=span, now=now)
