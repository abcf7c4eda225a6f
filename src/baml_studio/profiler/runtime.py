"""The profiler's hot path: calls, logical threads and executions, as seen from the application.

Everything here runs on application threads, so it does no I/O, takes only one uncontended lock
(when an execution or thread starts or ends), and never raises into the caller: an internal
failure is counted in :attr:`ProfilerStats.internal_errors` and the call runs unprofiled.

Nesting follows a :class:`contextvars.ContextVar`. A call whose innermost enclosing call belongs
to another runner (another OS thread, or another asyncio task) starts a *spawned* logical thread;
asyncio tasks and ``asyncio.to_thread`` copy the context automatically, plain threads do when run
through ``contextvars.copy_context().run`` (see :func:`baml_studio.profiler.propagate`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import random
import threading
import time
from collections import deque
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

from baml_studio.format.cct import context_key
from baml_studio.format.ids import CallRef, ThreadRef
from baml_studio.format.records import (
    ROLE_ERROR,
    ROLE_INPUT,
    ROLE_OUTPUT,
    SELECT_LLM,
    SELECT_MANUAL,
    SELECT_ROOT,
    CallSiteSpan,
    CctTuple,
    EdgeKind,
    ErrorCaptureId,
    FunctionEndStatus,
    RootStatus,
    ThreadEndStatus,
    ThreadKind,
    ValueLossReason,
    ValueRole,
)
from baml_studio.profiler import events as ev
from baml_studio.profiler import snapshot
from baml_studio.profiler.events import EngineState, Execution, Frame, H, LogicalThread
from baml_studio.profiler.registry import FunctionInfo, FunctionRegistry, ProgramSnapshot

ALL_ROLES = ROLE_INPUT | ROLE_OUTPUT | ROLE_ERROR
CURRENT: contextvars.ContextVar[Frame | None] = contextvars.ContextVar("baml_frame", default=None)
MANUAL: contextvars.ContextVar[tuple[Frame | None, int] | None] = contextvars.ContextVar(
    "baml_manual_capture", default=None
)
_ROOT_STATUS = {
    FunctionEndStatus.OK: RootStatus.SUCCEEDED,
    FunctionEndStatus.ERRORED: RootStatus.FAILED,
    FunctionEndStatus.CANCELLED: RootStatus.CANCELLED,
    FunctionEndStatus.EXITED: RootStatus.PANICKED,
}
_THREAD_STATUS = {
    FunctionEndStatus.OK: ThreadEndStatus.COMPLETED,
    FunctionEndStatus.ERRORED: ThreadEndStatus.ERRORED,
    FunctionEndStatus.CANCELLED: ThreadEndStatus.CANCELLED,
    FunctionEndStatus.EXITED: ThreadEndStatus.ERRORED,
}
DROPPED = Execution(ThreadRef(bytes(16), 0, 0), EngineState(0, 0), bytes(16), 0)
"""The execution a root beyond the slots belongs to: nothing under it is recorded."""
_RUNTIME_IDS = random.Random(os.urandom(32))
"""Host runtime tokens only need to be unique, not secret; this is 5x cheaper than urandom."""
_get_loop = asyncio.events._get_running_loop
_perf = time.perf_counter_ns


MAX_LIVE_THROWS = 64
"""Exceptions an execution remembers (with their tracebacks, so their frames and locals) to
link one exception's capture from every frame it unwinds. A root that catches and retries
kept every one until it ended (an audit held 200 MB for 200 caught errors); past this, the
oldest is forgotten, and should it unwind another call later it is captured again."""


@dataclass(slots=True)
class ProfilerStats:
    """Process-global counters that are not persisted per execution."""

    internal_errors: int = 0
    roots_dropped: int = 0
    events_dropped: int = 0
    meta_batch_lost: int = 0
    root_ended_lost: int = 0
    function_table_publish_failed: int = 0
    function_table_publish_retried: int = 0
    data_segments_published: int = 0
    meta_segments_published: int = 0
    data_segments_lost: int = 0
    cas_published: int = 0
    cas_reused: int = 0
    cas_lost: int = 0


def runner_id() -> tuple[int, int]:
    """(OS thread, asyncio task) running the current code; a change means a spawn."""
    loop = _get_loop()
    if loop is None:
        return threading.get_ident(), 0
    task = asyncio.current_task(loop)
    return threading.get_ident(), 0 if task is None else id(task)


def _runner_name() -> str:
    loop = _get_loop()
    if loop is not None:
        task = asyncio.current_task(loop)
        if task is not None:
            return task.get_name()[:256]
    return threading.current_thread().name[:256]


class Recorder:
    """The hot-path half of a profiler: turns calls into events on a bounded deque."""

    def __init__(
        self,
        registry: FunctionRegistry,
        *,
        euid: bytes,
        execution_slots: int,
        max_queued_events: int,
        max_pending_value_bytes: int,
    ) -> None:
        self.registry = registry
        self.euid = euid
        self.events: deque[tuple[Any, ...]] = deque()
        self.stats = ProfilerStats()
        self.zero_unix_ns = time.time_ns()
        self.zero_perf_ns = _perf()
        self.execution_slots = execution_slots
        self.max_queued_events = max_queued_events
        self.max_pending_value_bytes = max_pending_value_bytes
        self.pending_value_bytes = 0
        self.open_executions = 0
        self.tuples: dict[bytes, CctTuple] = {}
        self._keys: dict[tuple[Any, ...], bytes] = {}
        self._lock = threading.Lock()
        self._engine: EngineState | None = None
        self._programs: dict[int, ProgramSnapshot] = {}
        self.wake = threading.Event()

    # --- helpers ---------------------------------------------------------------------------

    def now(self) -> int:
        return _perf() - self.zero_perf_ns

    def program(self, engine: EngineState) -> ProgramSnapshot:
        return self._programs[engine.engine_id]

    def _push(self, event: tuple[Any, ...], ex: Execution, counter: str) -> bool:
        if len(self.events) >= self.max_queued_events:
            ex.health[H[counter]] += 1
            self.stats.events_dropped += 1
            return False
        self.events.append(event)
        return True

    def _key(
        self, program_id: bytes, parent: bytes | None, fid: int, site: Any, edge: int
    ) -> bytes:
        cache_key = (program_id, parent, fid, site, edge)
        key = self._keys.get(cache_key)
        if key is None:
            tup = CctTuple(program_id, parent, fid, site, EdgeKind(edge))
            key = context_key(tup)
            self.tuples[key] = tup
            self._keys[cache_key] = key
        return key

    # --- executions and threads --------------------------------------------------------------

    def _engine_for_root(self) -> EngineState:
        engine = self._engine
        if engine is None or engine.program_version != self.registry.version:
            program = self.registry.snapshot()
            engine_id = 1 if engine is None else engine.engine_id + 1
            engine = EngineState(engine_id, program.version)
            self._programs[engine_id] = program
            self._engine = engine
        return engine

    def _new_execution(self, now: int, runner: tuple[int, int]) -> LogicalThread | None:
        with self._lock:
            if self.open_executions >= self.execution_slots:
                self.stats.roots_dropped += 1
                return None
            self.open_executions += 1
            engine = self._engine_for_root()
            ref = ThreadRef(self.euid, engine.engine_id, engine.new_thread_id())
        ex = Execution(ref, engine, _RUNTIME_IDS.randbytes(16), now)
        thread = LogicalThread(ref, ex, runner)
        self.events.append((ev.ROOT_STARTED, ex))
        start = (ev.THREAD_STARTED, ex, ref, None, None, None, now, ThreadKind.ROOT, _runner_name())
        self._push(start, ex, "unmatched_thread_facts")
        return thread

    def _spawn_thread(
        self, parent: Frame, now: int, runner: tuple[int, int], site: CallSiteSpan | None
    ) -> LogicalThread | None:
        """The logical thread a call on another runner belongs to; None if the parent's
        execution ended meanwhile (checked under the lock: a lease taken on an ended execution
        ended it twice, and ``open_executions`` went below zero).

        An asyncio task is one spawned thread for its whole life: its first BAML call starts
        the thread and a done-callback ends it (status from the task). Anything else (a plain
        OS thread through :func:`propagate`) is one thread per top-level call.
        """
        ex = parent.thread.execution
        task_id = runner[1]
        if task_id:
            existing = ex.task_threads.get(task_id)
            if existing is not None:
                return existing
        with self._lock:
            if ex.closed:
                return None
            ex.leases += 1
            ref = ThreadRef(self.euid, ex.engine.engine_id, ex.engine.new_thread_id())
        thread = LogicalThread(ref, ex, runner)
        start = (
            ev.THREAD_STARTED, ex, ref, parent.thread.ref, parent.call, site, now,
            ThreadKind.SPAWN, _runner_name(),
        )  # fmt: skip
        self._push(start, ex, "unmatched_thread_facts")
        if task_id:
            task = asyncio.current_task()
            if task is not None:
                thread.task_bound = True
                ex.task_threads[task_id] = thread
                task.add_done_callback(functools.partial(self._task_done, thread))
        return thread

    def _task_done(self, thread: LogicalThread, task: asyncio.Task[Any]) -> None:
        try:
            thread.execution.task_threads.pop(thread.runner[1], None)
            if task.cancelled():
                status = ThreadEndStatus.CANCELLED
            elif task.exception() is not None:
                status = ThreadEndStatus.ERRORED
            else:
                status = ThreadEndStatus.COMPLETED
            self._release(thread, _perf() - self.zero_perf_ns, status, None)
        except Exception:
            self.stats.internal_errors += 1

    def _release(
        self,
        thread: LogicalThread,
        now: int,
        status: ThreadEndStatus,
        root_status: RootStatus | None,
    ) -> None:
        ex = thread.execution
        self._push((ev.THREAD_ENDED, ex, thread.ref, now, status), ex, "unmatched_thread_facts")
        with self._lock:
            ex.leases -= 1
            if root_status is not None:
                ex.status = root_status
            if ex.leases > 0:
                return
            ex.closed = True
            ex.ended_ns = now
            # nothing is thrown in it any more; each exception's traceback holds frames that
            # hold this execution, and that cycle would keep them all (and their locals)
            ex.throws.clear()
            self.open_executions -= 1
        self.events.append((ev.ROOT_ENDED, ex))

    # --- calls ---------------------------------------------------------------------------------

    def enter(
        self, info: FunctionInfo, args: dict[str, Any] | None, caller: FrameType | None
    ) -> tuple[Frame, contextvars.Token[Frame | None]] | None:
        """Record a call start; returns None when the call is not recorded."""
        try:
            return self._enter(info, args, caller)
        except Exception:
            self.stats.internal_errors += 1
            return None

    def _enter(
        self, info: FunctionInfo, args: dict[str, Any] | None, caller: FrameType | None
    ) -> tuple[Frame, contextvars.Token[Frame | None]] | None:
        now = _perf() - self.zero_perf_ns
        parent = CURRENT.get()
        runner = runner_id()
        site = (
            self.registry.call_site(caller.f_code.co_filename, caller.f_lineno)
            if caller is not None
            else None
        )
        selected = SELECT_LLM if info.llm else 0
        if parent is not None and parent.thread.execution is DROPPED:
            return None
        thread: LogicalThread | None = None
        parent_key: bytes | None
        if parent is not None and not parent.thread.execution.closed:
            if parent.thread.runner != runner:
                # None if the root ended meanwhile (checked again under the lock)
                thread = self._spawn_thread(parent, now, runner, site)
                edge, parent_key = 2, parent.key
            else:
                thread = parent.thread
                edge, parent_key = 1, parent.key
        if thread is None:
            thread = self._new_execution(now, runner)
            if thread is None:
                return self._dropped_root(info, now, runner)
            parent = None
            edge, parent_key, selected = 0, None, selected | SELECT_ROOT
        roles = ALL_ROLES if selected else 0
        manual = MANUAL.get()
        if manual is not None and manual[0] is parent:
            selected |= SELECT_MANUAL
            roles |= manual[1]
        ex = thread.execution
        thread.next_call += 1
        call = CallRef(thread.ref, thread.next_call)
        program = self._programs[ex.engine.engine_id]
        key = self._key(program.program_id, parent_key, info.function_id, site, edge)
        frame = Frame(call, parent, thread, key, info.function_id, now, selected, roles, edge)
        if edge == 1 and parent is not None:
            parent.active_children += 1
        token = CURRENT.set(frame)
        if selected:
            parent_call = parent.call if parent is not None else None
            event = (
                ev.SPAN_STARTED, ex, call, parent_call, thread.ref, key,
                info.function_id, site, edge, now, selected, roles,
            )  # fmt: skip
            if not self._push(event, ex, "structural_transport_exceeded"):
                frame.dropped = True
            elif roles & ROLE_INPUT:
                self._value(frame, ValueRole.INPUT, args or {})
        return frame, token

    def _dropped_root(
        self, info: FunctionInfo, now: int, runner: tuple[int, int]
    ) -> tuple[Frame, contextvars.Token[Frame | None]]:
        """A root beyond the execution slots: its whole subtree runs unrecorded."""
        thread = LogicalThread(DROPPED.root, DROPPED, runner)
        frame = Frame(CallRef(DROPPED.root, 0), None, thread, b"", info.function_id, now, 0, 0, 0)
        frame.dropped = True
        return frame, CURRENT.set(frame)

    def _value(self, frame: Frame, role: ValueRole, value: Any) -> None:
        ex = frame.thread.execution
        loss: ValueLossReason | None = None
        snap: snapshot.Snapshot | None = None
        try:
            snap = snapshot.take_args(value) if role == ValueRole.INPUT else snapshot.take(value)
        except Exception:
            loss = ValueLossReason.ENCODE_FAILED
        if snap is not None:
            size = snapshot.charge(snap)
            if self.pending_value_bytes + size > self.max_pending_value_bytes:
                snap, loss = None, ValueLossReason.VALUE_MEMORY_EXCEEDED
            else:
                self.pending_value_bytes += size
        event = (ev.VALUE, ex, frame.call, frame.key, role, snap, loss)
        if not self._push(event, ex, "value_attempt_transport_exceeded") and snap is not None:
            self.pending_value_bytes -= snapshot.charge(snap)

    def exit_ok(self, frame: Frame, token: contextvars.Token[Frame | None], result: Any) -> None:
        try:
            if frame.roles & ROLE_OUTPUT and not frame.dropped:
                self._value(frame, ValueRole.OUTPUT, result)
            self._end(frame, token, FunctionEndStatus.OK)
        except Exception:
            self.stats.internal_errors += 1

    def exit_error(
        self, frame: Frame, token: contextvars.Token[Frame | None], exc: BaseException
    ) -> None:
        try:
            if isinstance(exc, asyncio.CancelledError):
                status = FunctionEndStatus.CANCELLED
            elif isinstance(exc, Exception):
                status = FunctionEndStatus.ERRORED
                if frame.thread.execution is not DROPPED:
                    try:
                        self._error(frame, exc)
                    except Exception:  # the error's record is lost; the call still ends
                        self.stats.internal_errors += 1
            else:
                status = FunctionEndStatus.EXITED
            self._end(frame, token, status)
        except Exception:
            self.stats.internal_errors += 1

    def _error(self, frame: Frame, exc: Exception) -> None:
        ex = frame.thread.execution
        throws = ex.throws
        origin = throws.get(id(exc))
        if origin is None or origin[0] is not exc:
            origin = (exc, frame, None)
            if len(throws) >= MAX_LIVE_THROWS:  # the oldest: long caught, most likely
                del throws[next(iter(throws))]
            throws[id(exc)] = origin
        if not frame.roles & ROLE_ERROR or frame.dropped:
            return
        ex.health[H["applicable_error_unwinds"]] += 1
        ex.health[H["terminal_error_links_observed"]] += 1
        capture: ErrorCaptureId | None = origin[2]
        fresh = capture is None
        payload: tuple[Any, ...] | None = None
        if capture is None:
            thread = frame.thread
            thread.unwind_ordinal += 1
            capture = ErrorCaptureId(thread.ref, thread.unwind_ordinal)
            throws[id(exc)] = (exc, origin[1], capture)
            throw_frame: Frame = origin[1]
            value = snapshot.take_args(snapshot.exception_value(exc))
            site = self._throw_site(exc.__traceback__)
            payload = (throw_frame.call, throw_frame.key, throw_frame.function_id, site, value)
        event = (ev.ERROR, ex, frame.call, frame.key, capture, fresh, payload)
        if self._push(event, ex, "error_capture_attempt_transport_exceeded"):
            if fresh:
                ex.health[H["error_captures_queued"]] += 1
            ex.health[H["terminal_error_links_queued"]] += 1

    def _throw_site(self, tb: TracebackType | None) -> tuple[int, int, int, int] | None:
        site = None
        while tb is not None:
            found = self.registry.call_site(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
            if found is not None:
                site = (found.file_id, found.line, found.start_offset, found.end_offset)
            tb = tb.tb_next
        return site

    def _end(
        self, frame: Frame, token: contextvars.Token[Frame | None], status: FunctionEndStatus
    ) -> None:
        now = _perf() - self.zero_perf_ns
        inclusive = now - frame.started_ns
        try:
            CURRENT.reset(token)
        except ValueError:
            CURRENT.set(frame.parent)
        if frame.thread.execution is DROPPED:
            return
        if frame.parent is not None and frame.edge == 1:
            frame.parent.child_ns += inclusive
            frame.parent.active_children -= 1
        ex = frame.thread.execution
        span_end = (frame.call, now, status) if frame.selected and not frame.dropped else None
        event = (
            ev.CALL_ENDED, ex, frame.key, status, inclusive, frame.child_ns,
            frame.await_ns, frame.await_count, span_end,
        )  # fmt: skip
        self._push(event, ex, "structural_transport_exceeded")
        if frame.edge == 0:
            self._release(frame.thread, now, _THREAD_STATUS[status], _ROOT_STATUS[status])
        elif frame.edge == 2 and not frame.thread.task_bound:
            self._release(frame.thread, now, _THREAD_STATUS[status], None)
