"""The :class:`Profiler`: one process stream, a recorder on the hot path, a consumer thread."""

from __future__ import annotations

import logging
import os
import platform
import sys
import threading
import time
import uuid
from types import TracebackType
from typing import TYPE_CHECKING

from baml_studio.profiler.config import ProfilerConfig
from baml_studio.profiler.consumer import Consumer
from baml_studio.profiler.errors import ProfilerClosed
from baml_studio.profiler.registry import REGISTRY, FunctionRegistry
from baml_studio.profiler.runtime import ProfilerStats, Recorder
from baml_studio.store.config import DiskBudget
from baml_studio.store.errors import StoreError
from baml_studio.store.fsops import FileSystem
from baml_studio.store.writer import StreamStore

if TYPE_CHECKING:
    from baml_studio.publisher import Publisher

_log = logging.getLogger(__name__)


def os_arch() -> str:
    """``<os>-<arch>`` as StreamStarted spells it, for example ``linux-x86_64``."""
    system = {"darwin": "macos"}.get(sys.platform, sys.platform)
    return f"{system}-{platform.machine().lower() or 'unknown'}"


DRAIN_SLICE = 2_000
"""Hot-path events the consumer applies between checks whether a publication is due."""


class Profiler:
    """Records BAML calls of this process into one stream of a local store.

    ``Profiler(config)`` opens the stream and starts the consumer thread; ``activate()`` makes it
    the profiler the decorators report to. ``flush()`` publishes everything recorded so far;
    ``close()`` flushes, ends still-running executions as ``Abandoned`` and releases the stream.
    With ``config.enabled`` false nothing is opened, created or recorded.

    With ``config.publishes``, a :class:`~baml_studio.publisher.Publisher` thread ships the
    same store while the profiler runs; ``close()`` completes the profiler's files first, then
    closes the publisher (its final flush ships them). Publisher failures never reach the
    application: they are logged and counted in ``publish_failures``.
    """

    def __init__(
        self,
        config: ProfilerConfig,
        registry: FunctionRegistry = REGISTRY,
        *,
        fs: FileSystem | None = None,
    ) -> None:
        """``fs`` replaces the store's file-system operations (tests inject failures with it)."""
        self.config = config
        self.enabled = config.enabled
        self.euid = uuid.uuid4().bytes
        self.open_error: StoreError | None = None
        self._closed = False
        self.recorder = Recorder(
            registry,
            euid=self.euid,
            execution_slots=config.execution_slots,
            max_queued_events=config.max_queued_events,
            max_pending_value_bytes=config.max_pending_value_bytes,
        )
        self._store: StreamStore | None = None
        self._cond = threading.Condition()
        self._flush_requested = 0
        self._flushed = 0
        self._stop = False
        self._thread: threading.Thread | None = None
        self.publisher: Publisher | None = None
        self.publish_failures = 0
        """Failures starting, running or closing the publisher (each is also logged)."""
        if not self.enabled:
            return
        budget = None
        if config.max_project_bytes is not None:
            budget = DiskBudget(config.max_project_bytes, config.minimum_free_bytes)
        try:
            self._store = StreamStore.open(config.store_root, self.euid, budget, fs=fs)
        except StoreError as exc:
            self.open_error = exc
        self.consumer = Consumer(
            self.recorder,
            self._store,
            baml_version=config.baml_version,
            os_arch=os_arch(),
            pid=os.getpid(),
            publish_interval_s=config.publish_interval_s,
            segment_target_bytes=config.segment_target_bytes,
            max_value_bytes=config.max_value_bytes,
        )
        self._thread = threading.Thread(target=self._run, name="baml-profiler", daemon=True)
        self._thread.start()
        if config.publishes and self._store is not None:
            self._start_publisher()

    def _start_publisher(self) -> None:
        from baml_studio.publisher import Publisher
        from baml_studio.tokenfile import TokenFile

        try:
            token_file = self.config.publish_token_file
            self.publisher = Publisher(
                self.config.store_root,
                self.config.publish_gateway_url or "",
                TokenFile(token_file)
                if token_file is not None
                else self.config.publish_token or "",
            )
            self.publisher.start()
        except Exception:  # shipping is optional; the app and the local store go on
            self.publish_failures += 1
            self.publisher = None
            _log.exception("baml profiler: could not start the publisher; files stay local")

    def _close_publisher(self, timeout: float) -> None:
        publisher, self.publisher = self.publisher, None
        if publisher is None:
            return
        try:
            publisher.close(timeout)
        except Exception:
            self.publish_failures += 1
            _log.exception("baml profiler: the publisher's final flush failed; files stay local")
            return
        if publisher.last_error is not None:
            self.publish_failures += 1
            _log.warning("baml profiler: final flush did not ship: %s", publisher.last_error)

    @property
    def stats(self) -> ProfilerStats:
        return self.recorder.stats

    @property
    def store(self) -> StreamStore | None:
        return self._store

    def activate(self) -> Profiler:
        """Make this the profiler that ``@baml_function`` calls report to."""
        if self._closed:
            raise ProfilerClosed("this profiler was closed; create a new Profiler")
        from baml_studio.profiler import api

        api.set_active(self if self.enabled else None)
        return self

    def _run(self) -> None:
        wake = self.recorder.wake
        while True:
            wake.wait(self.config.wake_interval_s)
            wake.clear()
            with self._cond:
                stop = self._stop
                target = self._flush_requested
            if stop:
                self._final_pass()
            else:
                self._pass(force=target > self._flushed)
            with self._cond:
                self._flushed = max(self._flushed, target)
                self._cond.notify_all()
            if stop:
                return

    def _final_pass(self) -> None:
        """On the consumer thread, at close: apply what is queued as :meth:`_pass` does (a
        slice at a time, publishing whenever a publication is due), abandon what still runs,
        publish, release. A backlog at close (a process that made its calls faster than the
        consumer applied them, then exited) reaches the store as it is applied, the executions
        that ended first first, instead of in one cycle after the whole backlog. (Its CPU, its
        collections and its peak RSS did not move: ``benchmarks/profiler_backlog.py``, whose
        peak comes while the calls are made, with the queue at its longest.)"""
        try:
            self._drain_in_slices()
            self.consumer.abandon_open(self.recorder.now())
            self.consumer.publish()
            self.consumer.publish_terminal_meta()
        except Exception:
            self.recorder.stats.internal_errors += 1
        if self._store is not None:
            self._store.close()

    def _pass(self, *, force: bool) -> None:
        """Apply the queued events and publish if due (or ``force``d). Under a backlog the
        events are applied :data:`DRAIN_SLICE` at a time with a publish whenever one is due
        in between, so the store keeps receiving segments every ``publish_interval`` (the
        reference's worst case is two intervals) instead of one large cycle after the whole
        backlog: the executions that ended first become readable, and shippable, first."""
        try:
            self._drain_in_slices()
            if force or self.consumer.due():
                self.consumer.publish()
        except Exception:
            self.recorder.stats.internal_errors += 1

    def _drain_in_slices(self) -> None:
        """Apply the queued events :data:`DRAIN_SLICE` at a time, publishing whenever a
        publication is due between two slices."""
        while self.consumer.drain(DRAIN_SLICE) == DRAIN_SLICE and self.recorder.events:
            if self.consumer.due():
                self.consumer.publish()

    def flush(self, timeout: float = 5.0) -> bool:
        """Publish everything recorded before this call; False if ``timeout`` ran out."""
        if self._thread is None or not self._thread.is_alive():
            return not self.enabled
        deadline = time.monotonic() + timeout
        with self._cond:
            self._flush_requested += 1
            mine = self._flush_requested
            self.recorder.wake.set()
            while self._flushed < mine:
                left = deadline - time.monotonic()
                if left <= 0 or not self._cond.wait(left):
                    return self._flushed >= mine
        return True

    def close(self, timeout: float = 5.0) -> bool:
        """Flush, end running executions as ``Abandoned``, publish them, release the stream.

        Returns False if the final publication was still running after ``timeout`` seconds (it
        goes on in the background on the consumer thread)."""
        if self._closed:
            return self._thread is None or not self._thread.is_alive()
        self._closed = True
        from baml_studio.profiler import api

        if api.active() is self:
            api.set_active(None)
        if self._thread is None:
            return True
        with self._cond:
            self._stop = True
            self.recorder.wake.set()
        # The consumer thread does the final pass itself, so consumer state is only ever
        # touched by one thread; if it outlives the timeout it finishes in the background.
        self._thread.join(timeout)
        self._close_publisher(timeout)
        if self._thread.is_alive():
            # said out loud: the consumer is a daemon thread, so if the process exits now the
            # events it has not applied are lost, and nothing in the store can count them
            _log.warning(
                "baml profiler: close() returned after %.1fs with %d events not yet written "
                "(%d executions open); they are lost if the process exits before the background "
                "writer finishes; give close() a longer timeout to wait for them",
                timeout,
                len(self.recorder.events),
                self.recorder.open_executions,
            )
        return not self._thread.is_alive()

    def __enter__(self) -> Profiler:
        return self.activate()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
