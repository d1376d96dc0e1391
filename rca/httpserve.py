"""What the tool's small HTTP receivers share: the ``--listen HOST:PORT`` address, a bounded request body,
a refusal with its status, and serving an ASGI app on a bound socket until SIGINT or SIGTERM.

Two receivers use it: ``rca diagnose --listen`` (Alertmanager's webhook, ``diagnose/receiver.py``) and
``rca import otlp --listen`` / ``--listen-grpc`` (an OpenTelemetry Collector's OTLP exporters,
``preprocess/formats/receive_otlp.py``). FastAPI and uvicorn are the ``server`` extra: they are imported
by the functions that need them, never by importing this module.
"""
from __future__ import annotations

import re
import signal
import socket
import threading
from typing import TYPE_CHECKING

from rca.errors import InputError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.types import ASGIApp

# HOST:PORT of --listen: a host name, an IPv4 address or a bracketed IPv6 one, and a port.
_LISTEN = re.compile(r"(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?))"
                     r":(?P<port>[0-9]{1,5})")


def listen_address(text: str, *, example_port: int) -> tuple[str, int]:
    """``--listen``'s ``HOST:PORT`` as (host, port); ``InputError`` saying what is expected otherwise."""
    match = _LISTEN.fullmatch(text.strip())
    port = int(match.group("port")) if match else 0
    if match is None or not 1 <= port <= 65535:
        raise InputError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:{example_port} (0.0.0.0:"
                         f"{example_port} for every interface, [::1]:{example_port} for IPv6; port 1-65535)")
    return match.group("ipv6") or match.group("host"), port


class RequestRefused(Exception):
    """A request a receiver refuses: its HTTP status, the reason (said in the reply) and extra headers."""

    def __init__(self, status: int, reason: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = headers or {}


async def read_body(request: Request, *, limit: int, setting: str) -> bytes:
    """The request body, refused with 413 as soon as it passes ``limit`` bytes (declared or streamed);
    ``setting`` names what sets the limit, for the reason."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise RequestRefused(400, "Content-Length is not a number")
        if int(declared) > limit:
            raise RequestRefused(413, f"body of {declared} bytes; this receiver takes at most {limit} ({setting})")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestRefused(413, f"body of more than {limit} bytes; this receiver takes at most {limit} "
                                      f"({setting})")
        chunks.append(chunk)
    return b"".join(chunks)


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening (``OSError`` when it cannot be: in use, no such address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def serve(app: ASGIApp, *, sock: socket.socket) -> str | None:
    """Serve ``app`` on ``sock`` until SIGINT or SIGTERM (uvicorn: requests in flight finish, then the
    app's lifespan stops what it started); returns the name of the signal that stopped it.

    The signal ends the serving, not the process: the caller closes what it opened."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="on"))
    caught: list[int] = []

    def stop(signum: int, _frame: object) -> None:  # before uvicorn's own handlers are in, and after
        caught.append(signum)
        server.should_exit = True

    in_main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
    try:
        server.run(sockets=[sock])  # uvicorn's handlers during the run; it raises what it caught again after
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return signal.Signals(caught[0]).name if caught else None


def wait_for_signal() -> str:
    """Block until SIGINT or SIGTERM and return its name: what a process that serves without uvicorn (a gRPC
    server alone) waits on. Only from the main thread, where signal handlers can be set."""
    caught: list[int] = []
    came = threading.Event()

    def stop(signum: int, _frame: object) -> None:
        caught.append(signum)
        came.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not came.wait(0.5):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return signal.Signals(caught[0]).name
