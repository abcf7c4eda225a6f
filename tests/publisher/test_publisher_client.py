"""``Retry-After`` as the gateway client reads it (``publisher.client.retry_after_seconds``, also
the control client's): ASCII seconds or an HTTP date; anything else, ``"²"`` and fullwidth or
Arabic-Indic digits included, is ignored (None: the caller's own backoff), never an exception."""

from __future__ import annotations

import email.utils
import math

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from baml_studio.publisher import GatewayClient
from baml_studio.publisher.client import retry_after_seconds
from baml_studio.publisher.errors import GatewayThrottled

NOW = 1_800_000_000.0
HOSTILE = ["²", "¹⁰", "٣", "１２", "𝟗", "-1", "+5", "1.5", "1e3", "nan", "inf", "9" * 400, "0x10"]
HEADER_TEXT = (
    st.text(max_size=60)
    | st.sampled_from(HOSTILE)
    | st.integers(0, 10**400).map(str)
    | st.floats(0, 4e9).map(lambda t: email.utils.formatdate(t, usegmt=True))
)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        (email.utils.formatdate(NOW + 30, usegmt=True), 30.0),
        (email.utils.formatdate(NOW - 30, usegmt=True), 0.0),
        (None, None),
        ("", None),
    ],
)
def test_seconds_and_http_dates_are_read(value: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(value, now=NOW) == seconds


@pytest.mark.parametrize("value", HOSTILE)
def test_other_digits_and_numbers_are_ignored(value: str) -> None:
    assert retry_after_seconds(value, now=NOW) is None


@settings(max_examples=400, deadline=None)
@given(value=HEADER_TEXT)
@example(value="²")
def test_any_header_text_is_seconds_or_none(value: str) -> None:
    seconds = retry_after_seconds(value, now=NOW)
    assert seconds is None or (math.isfinite(seconds) and seconds >= 0)


def _throttled(retry_after: bytes) -> GatewayThrottled:
    def answer(request: httpx.Request) -> httpx.Response:
        body = {"error": {"code": "throttled", "message": "slow down"}}
        return httpx.Response(503, json=body, headers=[(b"Retry-After", retry_after)])

    client = GatewayClient("http://gateway", "token", transport=httpx.MockTransport(answer))
    try:
        with pytest.raises(GatewayThrottled) as caught:
            client.get_config()
    finally:
        client.close()
    return caught.value


def test_a_malformed_retry_after_leaves_the_client_its_own_backoff() -> None:
    assert _throttled("²".encode()).retry_after is None
    assert _throttled("²".encode("latin-1")).retry_after is None
    assert _throttled(b"12").retry_after == 12.0
