"""The HTTP side of ``rca import ... --url``: one client for a telemetry server's query API.

``PullClient`` owns one ``httpx.Client`` (connection reuse across the many chunk and page
requests of one pull) and applies the rules every API shares:

- a connect/read timeout (``--timeout``);
- extra request headers (``--header 'Authorization: Bearer ...'``), whose values are never
  logged nor written anywhere;
- a bound on the response body, read in pieces, so a query that matches far more than meant
  fails with a message instead of exhausting memory;
- a few retries with exponential backoff, only where a retry can help: a connection that
  failed or dropped, and the server's 5xx / 429 (``Retry-After`` honoured when it is short);
- one error class, ``PullError``, whose message names the URL, the HTTP status and the
  server's own error text (Prometheus' and Loki's ``{"status": "error", "error": ...}``,
  Jaeger's ``{"errors": [{"msg": ...}]}``, Elasticsearch's ``{"error": {"type", "reason"}}``,
  or the start of a plain-text body); an error status
  raises its subclass ``PullRefused``, which keeps the status and Prometheus' / Loki's
  ``errorType`` and ``error`` for a caller that can recover (Prometheus' "too many samples").
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import httpx

from rca.errors import BackendError

log = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 256 * 1024 * 1024  # one chunk or page; a larger answer means the chunk is too big
RETRIES = 3  # after the first attempt
RETRY_BACKOFF_S = 0.5  # doubled after each failed attempt
MAX_RETRY_AFTER_S = 30.0  # a longer Retry-After is not waited for: the pull fails and can be rerun
_ERROR_TEXT_CHARS = 500

# Failures of the connection itself, worth another attempt. A read timeout is not among them:
# a query that outran --timeout once would most likely outrun it again, at the server's expense.
_RETRIED_TRANSPORT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadError, httpx.WriteError,
                      httpx.RemoteProtocolError)


class PullError(BackendError):
    """A telemetry server's API could not be queried or answered something unusable."""


class PullRefused(PullError):
    """The server answered an HTTP error status (after any retries): the status and, when its body is
    Prometheus' or Loki's error JSON, its ``errorType`` and ``error``, for a caller that can do better."""

    def __init__(self, message: str, *, status: int, error_type: str | None = None,
                 error: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.error = error


def parse_header(text: str) -> tuple[str, str]:
    """``'Name: value'`` -> ``(name, value)``; an error shows the first word only (the rest may be a secret)."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
        first = (text.split() or [""])[0].split(":")[0][:40]
        raise ValueError(f"--header {first!r}...: expected 'Name: value'")
    return name.strip(), value.strip()


def redacted(url: httpx.URL | str) -> str:
    """The URL without a password in it, for messages, logs and the stored pages' provenance."""
    url = httpx.URL(str(url))
    return str(url.copy_with(password="***")) if url.password else str(url)


def server_error_text(body: bytes) -> str:
    """The error a query API put in its body: Prometheus/Loki ``error``, Jaeger ``errors[].msg``, Elasticsearch
    ``error.type: error.reason``, a Spring Boot server's (Zipkin before Armeria) ``error: message``, else the text."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        document = None
    if isinstance(document, dict):
        if isinstance(document.get("error"), str) and isinstance(document.get("message"), str):
            return f"{document['error']}: {document['message']}"  # "Bad Request: endTs <= 0"
        if isinstance(document.get("error"), str):
            kind = document.get("errorType")
            return f"{kind}: {document['error']}" if isinstance(kind, str) and kind else document["error"]
        error = document.get("error")
        if isinstance(error, dict) and isinstance(error.get("reason"), str):  # Elasticsearch / OpenSearch
            kind = error.get("type")
            return f"{kind}: {error['reason']}" if isinstance(kind, str) and kind else error["reason"]
        errors = document.get("errors")
        if isinstance(errors, list) and errors:
            return "; ".join(str(e.get("msg", e)) if isinstance(e, dict) else str(e) for e in errors)
    text = body.decode("utf-8", errors="replace").strip()
    return text[:_ERROR_TEXT_CHARS] + ("..." if len(text) > _ERROR_TEXT_CHARS else "") if text else "(empty body)"


def _error_fields(body: bytes) -> tuple[str | None, str | None]:
    """``(errorType, error)`` of a Prometheus / Loki error body; ``(None, None)`` for any other body."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None, None
    if not isinstance(document, dict):
        return None, None
    kind, error = document.get("errorType"), document.get("error")
    return (kind if isinstance(kind, str) else None), (error if isinstance(error, str) else None)


class PullClient:
    """GET JSON from one server (``base_url``), with the timeout, headers, size bound and retries above.

    ``option`` is the flag the user gave the URL with: a URL that is no http(s) base is refused,
    before any request, in those words.
    """

    def __init__(self, base_url: str, *, option: str = "--url", timeout_s: float = 30.0,
                 headers: Mapping[str, str] | None = None, max_bytes: int = MAX_RESPONSE_BYTES, retries: int = RETRIES,
                 backoff_s: float | None = None, transport: httpx.BaseTransport | None = None) -> None:
        base = httpx.URL(base_url)
        if base.scheme not in ("http", "https") or not base.host:
            raise PullError(f"{option} {redacted(base_url)!r}: expected http(s)://HOST[:PORT][/PATH]")
        self.base_url = base
        self.max_bytes = max_bytes
        self.retries = retries
        self.backoff_s = RETRY_BACKOFF_S if backoff_s is None else backoff_s
        self.requests = 0  # attempts made, retries included (tests and the summary line read it)
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s), headers=dict(headers or {}),
                                    follow_redirects=True, transport=transport)

    def __enter__(self) -> PullClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def url(self, path: str, params: Mapping[str, str | Sequence[str]] | None = None) -> httpx.URL:
        """``path`` under the base URL (a base with a path prefix, e.g. behind a proxy, keeps it); a
        parameter with a list of values is repeated (``filter=a&filter=b``)."""
        base = str(self.base_url).rstrip("/")
        return httpx.URL(f"{base}/{path.lstrip('/')}", params=dict(params or {}))

    def get_json(self, path: str, *, params: Mapping[str, str | Sequence[str]] | None = None) -> Any:
        """The decoded JSON body of ``GET path?params``; ``PullError`` when that cannot be had."""
        url = self.url(path, params)
        body = self._get(url)
        try:
            return json.loads(body)
        except ValueError as exc:
            raise PullError(f"GET {redacted(url)}: the answer is not JSON ({exc}): "
                            f"{server_error_text(body)}") from None

    def _get(self, url: httpx.URL) -> bytes:
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            self.requests += 1
            try:
                status, body, retry_after = self._attempt(url)
            except _RETRIED_TRANSPORT as exc:
                if last:
                    raise PullError(f"GET {redacted(url)}: {_transport_reason(exc)} "
                                    f"(after {self.retries + 1} attempts)") from None
                log.info("GET %s: %s; retrying in %.1f s", redacted(url), _transport_reason(exc), delay)
            except httpx.TimeoutException as exc:
                raise PullError(f"GET {redacted(url)}: no answer within the timeout ({type(exc).__name__}); "
                                "raise --timeout or query a shorter range") from None
            except httpx.HTTPError as exc:
                raise PullError(f"GET {redacted(url)}: {_transport_reason(exc)}") from None
            else:
                if status < 400:
                    return body
                reason = f"HTTP {status}: {server_error_text(body)}"
                if not (status >= 500 or status == 429) or last:
                    error_type, error = _error_fields(body)
                    raise PullRefused(f"GET {redacted(url)}: {reason}", status=status, error_type=error_type,
                                      error=error)
                if retry_after is not None:
                    delay = max(delay, retry_after)
                log.info("GET %s: %s; retrying in %.1f s", redacted(url), reason, delay)
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _attempt(self, url: httpx.URL) -> tuple[int, bytes, float | None]:
        """One GET: (status, body, Retry-After seconds); the body is read in pieces up to ``max_bytes``."""
        with self._client.stream("GET", url) as response:
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
                raise PullError(self._too_large(url, f"{int(declared)} bytes announced"))
            pieces, size = [], 0
            for piece in response.iter_bytes():
                size += len(piece)
                if size > self.max_bytes:
                    raise PullError(self._too_large(url, f"more than {self.max_bytes} bytes"))
                pieces.append(piece)
            return response.status_code, b"".join(pieces), _retry_after(response.headers.get("retry-after"))

    def _too_large(self, url: httpx.URL, what: str) -> str:
        return (f"GET {redacted(url)}: the answer is too large ({what}; the limit is {self.max_bytes} bytes): "
                "query a shorter range, a smaller --step or --limit, or a narrower selector")


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds when it is a short number (an HTTP date or a long wait is not honoured)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds <= MAX_RETRY_AFTER_S else None


def _transport_reason(exc: httpx.HTTPError) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
