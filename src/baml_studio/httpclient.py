"""What the project's httpx clients of its own services share: the ``X-Baml-Request-Id`` each
request carries, and the check of a service's base URL (used by the control plane's workload
client, :mod:`baml_studio.projector.control_client`, and the coordinator's,
:mod:`baml_studio.coordinator.client`)."""

from __future__ import annotations

import os
import time

import httpx


def new_request_id() -> str:
    """A UUIDv7 (RFC 9562): 48-bit Unix milliseconds, version 7, variant 10, 74 random bits."""
    millis = time.time_ns() // 1_000_000 & ((1 << 48) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis << 80) | (0x7 << 76) | ((rand >> 62) & 0xFFF) << 64
    value |= (0b10 << 62) | (rand & ((1 << 62) - 1))
    h = f"{value:032x}"  # str(uuid.UUID(int=value)) without the object (one a request)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def check_base_url(base_url: str, service: str, form: str) -> None:
    """``ValueError`` unless ``base_url`` is an http(s) URL with a host; the message names the
    ``service`` and the expected ``form`` (e.g. ``http(s)://host[:port]``)."""
    try:
        url = httpx.URL(base_url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"{service} URL {base_url!r} is not a URL: {exc}") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"{service} URL {base_url!r} must be {form}")
