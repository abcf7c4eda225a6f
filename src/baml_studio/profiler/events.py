"""Hot-path events: what the application threads hand to the consumer thread.

The hot path only builds small tuples and appends them to one bounded deque; every record,
encoding, hash and file write happens on the consumer. Each event starts with its opcode and the
:class:`Execution` it belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from baml_studio.format.ids import CallRef, ThreadRef
from baml_studio.format.records import HEALTH_FIELDS, RootStatus

ROOT_STARTED = 0  # (op, ex)
THREAD_STARTED = 1  # (op, ex, *ThreadStart fields)
SPAN_STARTED = 2  # (op, ex, call, parent_call, thread, key, fid, site, edge, started, sel, roles)
VALUE = 3  # (op, ex, call, key, role, snapshot | None, loss reason | None)
CALL_ENDED = 4  # (op, ex, key, status, inclusive, child_ns, await_ns, await_count, span_end)
ERROR = 5  # (op, ex, call, key, capture_id, throw_call, fid, site, snapshot, new, roles)
THREAD_ENDED = 6  # (op, ex, thread, ended, status)
ROOT_ENDED = 7  # (op, ex)

H = {name: index for index, name in enumerate(HEALTH_FIELDS)}
"""Index of each health counter in :attr:`Execution.health`."""


@dataclass(eq=False, slots=True)
class EngineState:
    engine_id: int
    program_version: int
    next_thread: int = 0
    announced: bool = False

    def new_thread_id(self) -> int:
        # Called under the profiler lock.
        self.next_thread += 1
        return self.next_thread


@dataclass(eq=False, slots=True)
class Execution:
    """One execution (a parentless logical thread and everything it spawned)."""

    root: ThreadRef
    engine: EngineState
    runtime_id: bytes
    started_ns: int
    leases: int = 1
    status: RootStatus = RootStatus.SUCCEEDED
    ended_ns: int = 0
    closed: bool = False
    health: list[int] = field(default_factory=lambda: [0] * len(HEALTH_FIELDS))
    task_threads: dict[int, LogicalThread] = field(default_factory=dict)
    """Live spawned threads of this execution by asyncio task id."""
    throws: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    """Live exception id -> (exception, throw frame, capture id or None)."""


@dataclass(eq=False, slots=True)
class LogicalThread:
    ref: ThreadRef
    execution: Execution
    runner: tuple[int, int]
    next_call: int = 0
    unwind_ordinal: int = 0
    task_bound: bool = False
    """True for an asyncio task's thread: the task's done-callback ends it, not its calls."""


@dataclass(eq=False, slots=True)
class Frame:
    """A call in flight; the context variable points at the innermost one."""

    call: CallRef
    parent: Frame | None
    thread: LogicalThread
    key: bytes
    function_id: int
    started_ns: int
    selected: int
    roles: int
    edge: int
    child_ns: int = 0
    await_ns: int = 0
    await_count: int = 0
    active_children: int = 0
    """Direct (call-edge) children in flight: a suspension while one runs is the child's await,
    already inside the child's inclusive time, so it is not this frame's own await."""
    dropped: bool = False
