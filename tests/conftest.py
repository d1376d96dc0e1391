"""Fixtures shared across test modules (pytest finds them here without an import)."""
from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.fake_http import Answer, FakeServer, fake_servers


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], FakeServer]]:
    """``serve(answer)`` starts a fake HTTP API for the test (tests/fake_http.py); closed after it."""
    yield from fake_servers()


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pull client's retries without their real pauses: a module that pulls from fake servers
    says ``pytestmark = pytest.mark.usefixtures("fast_retries")``."""
    monkeypatch.setattr("preprocess.formats.pull_http.RETRY_BACKOFF_S", 0.01)
