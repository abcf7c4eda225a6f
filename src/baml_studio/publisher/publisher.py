"""``Publisher``: config refresh, backoff and the background flush thread around one store.

Every ``flush_interval_seconds`` (earlier when unshipped value bytes exceed
``pack_max_entry_bytes``, checked about once a second) and on ``close()``, the thread runs
:meth:`Publisher.flush`. The configuration is read at the first flush and again every
``config_refresh_seconds``; a 429/503 keeps the last one. A 401/403 stops shipping: no flush
runs until the config call succeeds again, which is retried every ``auth_retry_seconds`` or at
once after :meth:`Publisher.set_token`. Other failures back off exponentially with full jitter,
honouring ``Retry-After`` up to ``retry_after_max_seconds``. Files are never removed because of
a failure; retention (shipped files only) runs after every attempt, so an unreachable gateway
does not keep shipped files on disk.
A flush that met a 413 (the gateway's limits are below the config's) makes the next flush
re-read the configuration. Each problem a flush reports (a file skipped or holding its plane
back) is logged once as a warning when it first appears, and stays in every report until fixed.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

from baml_studio.publisher.client import GatewayClient
from baml_studio.publisher.collect import collect_segments, unshipped_value_bytes
from baml_studio.publisher.collect_cas import collect_cas
from baml_studio.publisher.config import PublisherConfig, PublisherSettings
from baml_studio.publisher.errors import (
    CaptureDisabled,
    GatewayAuthError,
    GatewayThrottled,
    PublisherError,
)
from baml_studio.publisher.flush import FlushReport, run_flush
from baml_studio.publisher.retention import RetentionReport, apply_retention
from baml_studio.publisher.state import PublishState

_log = logging.getLogger(__name__)


class Publisher:
    """Ships one store to one gateway. ``flush()`` is safe to call from any thread."""

    def __init__(
        self,
        store_root: Path,
        gateway_url: str,
        token: str | Callable[[], str],
        *,
        settings: PublisherSettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings or PublisherSettings(Path(store_root), gateway_url)
        self._root = Path(store_root)
        self._client = GatewayClient(
            gateway_url, token, timeout=self.settings.request_timeout_seconds
        )
        self._state = PublishState(self._root)
        self._files_checked = False  # the first retention pass drops entries whose file is gone
        self._clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._config: PublisherConfig | None = None
        self._config_at = float("-inf")
        self._auth_failed: GatewayAuthError | None = None
        self._failures = 0
        self._not_before = float("-inf")
        self._first_seen: dict[Path, float] = {}
        self._logged: set[tuple[Path, str]] = set()
        """Problems already logged, so a plane blocked on every flush is logged once."""
        self.last_report: FlushReport | None = None
        self.last_error: PublisherError | None = None
        self.unexpected_errors = 0
        """Failures that are not ``PublisherError`` (logged; the thread goes on)."""

    @property
    def config(self) -> PublisherConfig | None:
        return self._config

    @property
    def shipping_stopped(self) -> bool:
        """True after a 401/403 until a config call succeeds."""
        return self._auth_failed is not None

    def set_token(self, token: str | Callable[[], str]) -> None:
        """Use a rotated token (or a callable such as a
        :class:`~baml_studio.tokenfile.TokenFile`, asked before every request); the next
        attempt re-reads the config at once."""
        self._client.token = token
        self._config_at = float("-inf")
        self._not_before = float("-inf")
        self._wake.set()

    def refresh_config(self) -> PublisherConfig:
        """Read the config now. Raises GatewayAuthError (and stops shipping) or GatewayError."""
        try:
            config = self._client.get_config()
        except GatewayAuthError as exc:
            self._stop_shipping(exc)
            raise
        except GatewayThrottled:
            if self._config is None:
                raise
            return self._config  # keep the last configuration
        self._config, self._config_at, self._auth_failed = config, self._clock(), None
        return config

    def _stop_shipping(self, exc: GatewayAuthError) -> None:
        """Shipping stops; the config is re-read (with the token) after ``auth_retry_seconds``."""
        self._auth_failed = exc
        self._config_at = (
            self._clock() - self.settings.config_refresh_seconds + self.settings.auth_retry_seconds
        )

    def flush(self) -> FlushReport:
        """One flush now. Raises PublisherError subclasses; nothing local is lost on failure."""
        with self._lock:
            now = self._clock()
            config = self._config
            if config is None or now - self._config_at >= self.settings.config_refresh_seconds:
                config = self.refresh_config()
            if self._auth_failed is not None:
                raise self._auth_failed
            if not config.capture_enabled:
                raise CaptureDisabled("the gateway configuration has capture_enabled: false")
            plan = collect_segments(
                self._state, config, level=self.settings.zstd_level, now=now,
                first_seen=self._first_seen, block_seconds=self.settings.corrupt_block_seconds,
            )  # fmt: skip
            # the CAS objects ship batch by batch while the rest are read and packed
            arriving = collect_cas(self._state, config, self.settings.zstd_level, plan)
            try:
                report = run_flush(
                    plan, self._client, self._state, max_objects=config.max_objects_per_authorize,
                    put_attempts=self.settings.put_attempts,
                    release_segments=self.settings.release_shipped_segments, clock=self._clock,
                    arriving=arriving,
                )  # fmt: skip
            except GatewayAuthError as exc:
                # a token revoked mid-config-period: stop shipping until a config call succeeds
                self._stop_shipping(exc)
                raise
            finally:
                arriving.close()
            if report.too_large_answers:
                self._config_at = float("-inf")  # the limits changed: re-read them next time
            self._log_new_problems(report)
            self.last_report = report
            return report

    def _log_new_problems(self, report: FlushReport) -> None:
        current = {(p.path, p.code.value): p for p in report.problems}
        for key in current.keys() - self._logged:
            problem = current[key]
            consequence = "skipped, kept locally" if problem.skipped else "its plane waits"
            _log.warning("publisher: %s not shipped (%s, %s): %s", problem.path,
                         problem.code.value, consequence, problem.reason)  # fmt: skip
        self._logged = set(current)

    def retain(self) -> RetentionReport | None:
        """One retention pass: shipped values expire by the config's retention (once a config
        was read), and shipped files are removed above ``disk_budget_bytes`` (always, so a
        publisher that starts while the gateway is down still frees them). None: nothing to
        do (no config and no budget)."""
        budget = self.settings.disk_budget_bytes
        if self._config is None and budget is None:
            return None
        expiry = self._config.shipped_value_retention_seconds if self._config else math.inf
        report = apply_retention(
            self._root, retention_seconds=expiry, now=self._clock(), budget_bytes=budget,
            state=self._state, check_files=not self._files_checked,
        )  # fmt: skip
        self._files_checked = True
        return report

    def try_flush(self) -> FlushReport | None:
        """``flush()`` with the backoff policy applied; errors are kept in ``last_error``."""
        if self._clock() < self._not_before:
            return None
        try:
            report = self.flush()
        except PublisherError as exc:
            self.last_error = exc
            self._failures += 1
            self._not_before = self._clock() + self._delay(exc)
            self._retain_quietly()
            return None
        self.last_error, self._failures = None, 0
        self._not_before = float("-inf")
        self._retain_quietly()
        return report

    def _retain_quietly(self) -> None:
        """``retain()``; its failure never blocks shipping nor hides a flush error."""
        try:
            self.retain()
        except (OSError, PublisherError) as exc:
            _log.warning("publisher: retention failed: %s", exc)

    def _delay(self, exc: PublisherError) -> float:
        if isinstance(exc, GatewayAuthError):
            return self.settings.auth_retry_seconds
        cap = min(
            self.settings.backoff_max_seconds,
            self.settings.backoff_base_seconds * 2 ** min(self._failures, 20),
        )
        delay = random.uniform(0, cap)
        if isinstance(exc, GatewayThrottled) and exc.retry_after is not None:
            delay = max(delay, min(exc.retry_after, self.settings.retry_after_max_seconds))
        return delay

    def start(self) -> None:
        """Start the background thread (idempotent)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="baml-publisher", daemon=True)
        self._thread.start()

    def close(self, timeout: float | None = 30.0) -> FlushReport | None:
        """Stop the thread and run one last flush (the shutdown flush)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._not_before = float("-inf")
        report = self.try_flush()
        self._client.close()
        return report

    def _run(self) -> None:
        last = self._clock()
        while not self._stop.is_set():
            interval = self._config.flush_interval_seconds if self._config else 1.0
            self._wake.wait(min(1.0, interval))
            self._wake.clear()
            if self._stop.is_set():
                return
            now = self._clock()
            due = now - last >= interval or self._over_pack_limit()
            if due or self._config is None:
                self._guarded_flush()
                last = self._clock()

    def _guarded_flush(self) -> None:
        """``try_flush`` on the thread: an unexpected error (a bug, a malformed gateway URL) is
        logged and backed off like a failure, and never ends the thread."""
        try:
            self.try_flush()
        except Exception:
            self.unexpected_errors += 1
            self._failures += 1
            self._not_before = self._clock() + self.settings.backoff_max_seconds
            _log.exception("publisher flush failed unexpectedly; files stay local")

    def _over_pack_limit(self) -> bool:
        if self._config is None:
            return False
        return unshipped_value_bytes(self._root, self._state) > self._config.pack_max_entry_bytes

    def wake(self) -> None:
        """Ask the thread to check for work now (e.g. after the profiler closed many files)."""
        self._wake.set()
