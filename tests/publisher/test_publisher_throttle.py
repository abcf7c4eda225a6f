"""A gateway's ``Retry-After`` holds the publisher's next attempt back, but never past
``PublisherSettings.retry_after_max_seconds``: a gateway answering ``Retry-After: 999999999999``
cannot stall shipping for ever. The clock is injected; nothing sleeps."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from baml_studio.publisher import GatewayClient, Publisher, PublisherSettings
from baml_studio.publisher.errors import GatewayThrottled

START = 1000.0
CAP = 60.0


def _throttling_client(retry_after: str, calls: list[str]) -> type[GatewayClient]:
    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        body = {"error": {"code": "throttled", "message": "slow down"}}
        return httpx.Response(503, json=body, headers={"Retry-After": retry_after})

    class ThrottledClient(GatewayClient):
        def __init__(self, base_url: str, token: str, *, timeout: float = 30.0) -> None:
            super().__init__(
                base_url, token, timeout=timeout, transport=httpx.MockTransport(answer)
            )

    return ThrottledClient


@pytest.mark.parametrize(
    ("retry_after", "wait"),
    [
        ("30", 30.0),
        (str(int(CAP) + 1), CAP),
        ("999999999999", CAP),
        ("Fri, 31 Dec 9999 23:59:59 GMT", CAP),
    ],
)
def test_retry_after_delays_the_next_attempt_up_to_the_cap(
    retry_after: str, wait: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(
        "baml_studio.publisher.publisher.GatewayClient", _throttling_client(retry_after, calls)
    )
    root = tmp_path / "profiles-v1"
    root.mkdir()
    url = "http://gateway.invalid"
    settings = PublisherSettings(
        root, url, backoff_base_seconds=1.0, backoff_max_seconds=2.0, retry_after_max_seconds=CAP
    )
    now = [START]
    publisher = Publisher(root, url, "token", settings=settings, clock=lambda: now[0])
    assert publisher.try_flush() is None
    assert isinstance(publisher.last_error, GatewayThrottled)
    seconds = publisher.last_error.retry_after
    assert seconds is not None and seconds >= wait
    assert len(calls) == 1
    now[0] = START + wait - 0.001
    assert publisher.try_flush() is None
    assert len(calls) == 1  # still held back by Retry-After
    now[0] = START + wait
    assert publisher.try_flush() is None
    assert len(calls) == 2  # attempted again once the (capped) wait is over
    publisher.close(timeout=0)


def test_the_default_cap_is_the_largest_backoff(tmp_path: Path) -> None:
    settings = PublisherSettings(tmp_path, "http://gateway.invalid")
    assert settings.retry_after_max_seconds == settings.backoff_max_seconds == 60.0
