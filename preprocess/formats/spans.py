"""What a span means, whatever format carried it: the rules of the Jaeger parquet reader.

``preprocess/readers.py`` derives ``service``, ``span_kind``, ``peer_service``, ``status_code``
and ``is_error`` from Jaeger tags with polars expressions; the foreign trace formats hand their
attributes, as strings, to the same rules written for one record, so a span reads the same
from a release parquet, an OTLP export or a Jaeger / Zipkin JSON.
"""
from __future__ import annotations

import re

_RPC_SERVICE = re.compile(r"^hipstershop\.([A-Za-z0-9]+)$")
_OPERATION_SERVICE = re.compile(r"hipstershop\.([A-Za-z0-9]+)/")
HEX = re.compile(r"^[0-9a-fA-F]+$")


def canonical_service(name: str | None) -> str | None:
    """The process / resource service name; Jaeger's ``redis`` is the component ``redis-cart``."""
    return "redis-cart" if name == "redis" else name


def as_int(text: str | None) -> int | None:
    """A numeric tag as int; anything else (absent, ``'abc'``, ``'1.5'``) is null, never an error."""
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def peer_service(*, kind: str | None, rpc_service: str | None, peer: str | None, db_system: str | None,
                 operation: str | None) -> str | None:
    """The callee a client span targets, else null.

    Order (the parquet reader's): an explicit ``peer.service`` as named, ``rpc.service`` of the
    hipstershop package -> lower-cased service, ``db.system=redis`` -> ``redis-cart``, then
    ``hipstershop.X/Method`` in the operation name.
    Only the hipstershop package names a component: ``grpc.health.v1.Health`` is not a service.
    """
    if kind != "client":
        return None
    if peer:
        return peer
    if rpc_service is not None and (match := _RPC_SERVICE.match(rpc_service)):
        return match.group(1).lower()
    if db_system is not None and db_system.lower() == "redis":
        return "redis-cart"
    if operation is not None and (match := _OPERATION_SERVICE.search(operation)):
        return match.group(1).lower()
    return None


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
