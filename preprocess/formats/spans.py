"""What a span means, whatever format carried it: the record-level rules of the Jaeger parquet reader.

``preprocess/readers.py`` derives ``span_kind``, ``status_code`` and ``is_error`` from Jaeger
tags with polars expressions; the foreign trace formats hand their attributes, as strings, to
the same rules written for one record, so a span reads the same from a release parquet, an
OTLP export or a Jaeger / Zipkin JSON.

Naming is not done here: an importer keeps ``service`` as the source writes it and
``peer_service`` as an explicit peer only, and carries the raw ``rpc.service`` and
``db.system`` values and the host a client span connected to (``peer_host``)
(``preprocess.schema.SPAN_PEER_TAGS``) into the dataset, where the reader applies the system's
``[traces]`` rules when the dataset is read. Nor is a runtime: the language the instrumentation
states (``stated_language``) is carried as written, and ``rca system infer`` says what it means.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from preprocess.schema import SPAN_LANGUAGE_KEYS

HEX = re.compile(r"^[0-9a-fA-F]+$")
# The attributes that name the host a client connected to, first found wins (OpenTelemetry's current
# convention, then the older one), then those whose URL's host it is: ``preprocess.readers``' order.
HOST_KEYS: tuple[str, ...] = ("server.address", "net.peer.name")
URL_KEYS: tuple[str, ...] = ("url.full", "http.url")


def as_int(text: str | None) -> int | None:
    """A numeric tag as int; anything else (absent, ``'abc'``, ``'1.5'``) is null, never an error."""
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def explicit_peer(*, kind: str | None, peer: str | None) -> str | None:
    """The callee a client span names itself (``peer.service``, Zipkin's remote endpoint), else null."""
    return (peer or None) if kind == "client" else None


def url_host(url: str | None) -> str | None:
    """The ``host[:port]`` of an absolute URL (``http://payments:8080/pay`` -> ``payments:8080``), else null."""
    if not url or "://" not in url:
        return None
    try:
        netloc = urlsplit(url).netloc
    except ValueError:  # an unbalanced IPv6 bracket
        return None
    return netloc.rpartition("@")[2] or None


def peer_host(attrs: Mapping[str, str], *, kind: str | None) -> str | None:
    """The host a client span connected to, as written (``orders-db:5432``), else null.

    ``server.address``, else ``net.peer.name`` (the first not empty), else the host of the first of
    ``url.full`` / ``http.url`` that is an absolute URL; the reader names the peer from it (its first
    DNS label). Null for other spans: a server span's ``net.peer.name`` is its caller's.
    """
    if kind != "client":
        return None
    for key in HOST_KEYS:
        if value := attrs.get(key):
            return value
    return next((url_host(url) for key in URL_KEYS if "://" in (url := attrs.get(key) or "")), None)


def stated_language(attrs: Mapping[str, str]) -> str | None:
    """The language a span's process (OTLP resource, Jaeger process tags) states, as written: the first of
    ``telemetry.sdk.language`` (``java``) and ``jaeger.version`` (``Java-1.8.1``) not empty, else null."""
    return next((value for key in SPAN_LANGUAGE_KEYS if (value := attrs.get(key))), None)


def is_error(*, error_tag: str | None, status_error: bool, status_code: int | None, http_status: int | None) -> bool:
    """An error tag ``true``, an error status (OTel), a non-zero gRPC code or an HTTP status >= 500."""
    return bool(
        (error_tag is not None and error_tag.lower() == "true")
        or status_error
        or (status_code or 0) != 0
        or (http_status or 0) >= 500
    )


def check_id(value: object, *, digits: tuple[int, ...]) -> str:
    """A hex trace or span id of one of the allowed lengths, lower-cased; ValueError saying what is wrong."""
    if not isinstance(value, str) or not value:
        raise ValueError("missing id")
    if not HEX.match(value):
        raise ValueError(f"id {value!r} is not hexadecimal")
    if len(value) not in digits:
        wanted = " or ".join(str(d) for d in digits)
        raise ValueError(f"id {value!r} has {len(value)} hex digits, expected {wanted}")
    return value.lower()
