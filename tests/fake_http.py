"""A loopback HTTP server that answers GETs as a test says, and records what it was asked.

Shared by the pull tests (``rca import ... --url``) and the mesh-call tests (``rca system infer
--mesh-calls``): the fake stands where Prometheus, Loki or Jaeger would, where a test needs
answers no real server gives on demand (an error, a page cut short, a malformed body).
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Answer = Callable[[str, dict[str, str]], tuple[int, Any]]


@dataclass
class Seen:
    path: str
    params: dict[str, str]
    headers: dict[str, str]


@dataclass
class FakeServer:
    """``answer(path, params) -> (status, JSON-able or text)``; ``fail_at`` answers request N (1-based) with a status."""

    answer: Answer
    fail_at: dict[int, int] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                parts = urlsplit(self.path)
                params = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
                server.requests.append(Seen(parts.path, params, {k.lower(): v for k, v in self.headers.items()}))
                number = len(server.requests)
                if number in server.fail_at:
                    status, body = server.fail_at[number], "injected failure"
                else:
                    status, body = server.answer(parts.path, params)
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]


def fake_servers() -> Iterator[Callable[[Answer], FakeServer]]:
    """A ``serve`` fixture's body: ``start(answer)`` starts a server; every one is closed after the test."""
    servers: list[FakeServer] = []

    def start(answer: Answer) -> FakeServer:
        servers.append(FakeServer(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
