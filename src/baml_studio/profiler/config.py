"""Profiler configuration: one frozen value, read once at the entry point."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from baml_studio.store.config import resolve_store_root

DEFAULT_PUBLISH_INTERVAL_S = 1.0
DEFAULT_SEGMENT_TARGET_BYTES = 4 * 1024 * 1024
DEFAULT_EXECUTION_SLOTS = 2016
BAML_VERSION = "0.17.0"


@dataclass(frozen=True, slots=True)
class ProfilerConfig:
    store_root: Path
    """The ``profiles-v1`` directory the profiler writes (``BAML_PROFILE_DIR`` overrides)."""

    enabled: bool = True
    """False (``BAML_PROFILE=0``) turns the profiler fully off: nothing is recorded or created."""

    publish_interval_s: float | None = DEFAULT_PUBLISH_INTERVAL_S
    """Publish pending data at least this often; 0 publishes on every consumer pass, None only
    on flush/close (``BAML_PROFILE_PUBLISH_INTERVAL_MS``, where ``MAX`` means None)."""

    segment_target_bytes: int = DEFAULT_SEGMENT_TARGET_BYTES
    """Publish a data segment as soon as this many bytes of groups are pending."""

    execution_slots: int = DEFAULT_EXECUTION_SLOTS
    """Most executions open at once; a root beyond this is not recorded (a counted loss)."""

    max_queued_events: int = 1_000_000
    """Bound on hot-path events waiting for the consumer; beyond it events are counted losses."""

    max_pending_value_bytes: int = 64 * 1024 * 1024
    """Bound on captured value bytes waiting for the consumer (``value_memory_exceeded``)."""

    max_value_bytes: int = 16 * 1024 * 1024
    """Largest single encoded value kept; larger ones are ``value_too_large``."""

    max_project_bytes: int | None = None
    """Disk budget for the whole store; None means unlimited."""

    minimum_free_bytes: int = 0
    """Publications that would leave less free disk than this are rejected."""

    baml_version: str = BAML_VERSION
    """Written into StreamStarted and the program hash."""

    wake_interval_s: float = 0.05
    """How often the consumer thread wakes to look for work."""

    publish_gateway_url: str | None = None
    """Data-plane gateway to ship the store to from a background publisher thread started with
    the profiler (``BAML_PUBLISH_GATEWAY``); None (the default) ships nothing. Needs
    ``publish_token``."""

    publish_token: str | None = None
    """Publisher token for ``publish_gateway_url`` (``BAML_PUBLISH_TOKEN``)."""

    publish_token_file: Path | None = None
    """A file holding the publisher token instead (``BAML_PUBLISH_TOKEN_FILE``; it wins over
    ``publish_token``), read again whenever it changes: a token rotated by the customer is
    used from the next request on, without restarting the application."""

    @property
    def publishes(self) -> bool:
        """True when the gateway URL and a token (or a token file) are set."""
        has_token = bool(self.publish_token) or self.publish_token_file is not None
        return bool(self.publish_gateway_url) and has_token

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, project_dir: Path | None = None
    ) -> ProfilerConfig:
        """Build a config from ``BAML_PROFILE`` (``0``, ``false``, ``off`` or ``no`` turn it off),
        ``BAML_PROFILE_DIR``,
        ``BAML_PROFILE_PUBLISH_INTERVAL_MS`` (1-10 ASCII digits or ``MAX``; anything else
        raises ``ValueError`` naming the variable),
        ``BAML_PUBLISH_GATEWAY``, ``BAML_PUBLISH_TOKEN`` and ``BAML_PUBLISH_TOKEN_FILE``.

        The root comes from the resolver the readers share: ``BAML_PROFILE_DIR``, else
        ``<project>/.baml/profiles-v1``.
        """
        env = os.environ if env is None else env
        root = resolve_store_root(project_dir or Path.cwd(), env)
        enabled = env.get("BAML_PROFILE", "1").strip().lower() not in PROFILE_OFF
        interval: float | None = DEFAULT_PUBLISH_INTERVAL_S
        raw = env.get("BAML_PROFILE_PUBLISH_INTERVAL_MS")
        if raw and enabled:  # a profiler that is off reads no other setting, so none fails
            interval = _interval_s(raw)
        token_file = env.get("BAML_PUBLISH_TOKEN_FILE", "").strip()
        return cls(
            store_root=root,
            enabled=enabled,
            publish_interval_s=interval,
            publish_gateway_url=env.get("BAML_PUBLISH_GATEWAY", "").strip() or None,
            publish_token=env.get("BAML_PUBLISH_TOKEN", "").strip() or None,
            publish_token_file=Path(token_file) if token_file else None,
        )


PROFILE_OFF = frozenset({"0", "false", "off", "no"})
"""``BAML_PROFILE`` values (any case) that turn the profiler off; only ``0`` did."""


def _interval_s(raw: str) -> float | None:
    """``BAML_PROFILE_PUBLISH_INTERVAL_MS`` in seconds; ``MAX`` is None. ASCII digits only
    (``int`` alone would take ``٣`` or ``1_0``, and raise past 4,300 digits)."""
    text = raw.strip()
    if text.upper() == "MAX":
        return None
    if not re.fullmatch(r"[0-9]{1,10}", text):
        raise ValueError(
            f"BAML_PROFILE_PUBLISH_INTERVAL_MS={raw!r:.40} is not a whole number of "
            "milliseconds (0-9999999999) or MAX"
        )
    return int(text) / 1000.0
