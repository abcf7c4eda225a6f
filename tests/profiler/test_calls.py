"""What the profiler records for plain, nested, failing, spawned and cancelled calls."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from readback import load

from baml_studio.format.cct import context_key, self_ns
from baml_studio.format.records import (
    ROLE_ERROR,
    ROLE_INPUT,
    ROLE_OUTPUT,
    SELECT_LLM,
    SELECT_MANUAL,
    SELECT_ROOT,
    EdgeKind,
    ErrorCapture,
    ErrorKind,
    FunctionEndStatus,
    RootStatus,
    SpanEnd,
    SpanStart,
    TerminalErrorRef,
    ThreadEnd,
    ThreadKind,
    ThreadStart,
    ValueOccurrence,
    ValueRole,
)
from baml_studio.profiler import Profiler, baml_function, capture, propagate


class ExtractionError(Exception):
    def __init__(self, message: str, invoice_id: str) -> None:
        super().__init__(message)
        self.invoice_id = invoice_id


@baml_function(name="tests.normalize")
def normalize(x: float) -> float:
    return round(x, 2)


@baml_function(name="tests.Extract", llm=True)
def extract(document: str, strict: bool = False) -> dict[str, object]:
    if strict and "bad" in document:
        raise ExtractionError(f"cannot read {document}", invoice_id="INV-9")
    return {"id": "INV-1042", "total": normalize(12.345)}


@baml_function(name="tests.Process")
def process(documents: list[str], strict: bool = False) -> list[object]:
    return [extract(doc, strict=strict) for doc in documents]


@baml_function(name="tests.Score", llm=True)
async def score(customer: dict[str, object]) -> int:
    await asyncio.sleep(0)
    return len(str(customer["name"]))


@baml_function(name="tests.ScoreAll")
async def score_all(customers: list[dict[str, object]]) -> list[int]:
    return list(await asyncio.gather(*(score(c) for c in customers)))


@baml_function(name="tests.Slow")
async def slow() -> None:
    await asyncio.Event().wait()


@baml_function(name="tests.Cancelled")
async def cancelled_root() -> None:
    task = asyncio.ensure_future(slow())
    await asyncio.sleep(0)
    task.cancel()
    await task


def test_nested_calls_feed_cct_and_capture_root_and_llm_values(
    profiler: Profiler, store_root: Path
) -> None:
    assert process(["a", "b"]) == [{"id": "INV-1042", "total": 12.35}] * 2
    assert profiler.flush()
    view = load(store_root)
    ex = view.only()
    assert ex.started is not None and ex.ended is not None
    assert ex.ended.status == RootStatus.SUCCEEDED
    assert ex.ended.data_first_seq >= 1 and ex.ended.data_segment_count >= 1
    starts = ex.of(SpanStart)
    # root + two LLM calls are selected; the ordinary helper is CCT-only
    assert [s.selection_reasons for s in starts] == [SELECT_ROOT, SELECT_LLM, SELECT_LLM]
    assert all(s.roles == ROLE_INPUT | ROLE_OUTPUT | ROLE_ERROR for s in starts)
    assert [s.call.call_id for s in starts] == [1, 2, 4]
    assert starts[0].edge_kind == EdgeKind.ROOT and starts[0].parent is None
    assert starts[1].parent == starts[0].call and starts[1].edge_kind == EdgeKind.CALL
    assert starts[0].runtime is not None and starts[0].runtime.runtime_id == ex.started.runtime_id
    ends = {e.call: e for e in ex.of(SpanEnd)}
    assert all(ends[s.call].status == FunctionEndStatus.OK for s in starts)
    values = {(v.call, v.role): view.value(v.value) for v in ex.of(ValueOccurrence)}
    assert values[(starts[0].call, ValueRole.INPUT)] == {"documents": ["a", "b"], "strict": False}
    assert values[(starts[1].call, ValueRole.INPUT)] == {"document": "a", "strict": False}
    assert values[(starts[1].call, ValueRole.OUTPUT)] == {"id": "INV-1042", "total": 12.35}
    assert values[(starts[0].call, ValueRole.OUTPUT)] == [{"id": "INV-1042", "total": 12.35}] * 2
    merged = {c.key: c for c in ex.merged_cct().contexts}
    root_ctx = merged[starts[0].context.key]  # type: ignore[union-attr]
    llm_ctx = merged[starts[1].context.key]  # type: ignore[union-attr]
    assert root_ctx.tuple is not None and root_ctx.tuple.edge_kind == EdgeKind.ROOT
    assert llm_ctx.tuple is not None and llm_ctx.tuple.parent_key == root_ctx.key
    assert root_ctx.counters.invocations_started == 1 and root_ctx.counters.completed_ok == 1
    assert llm_ctx.counters.invocations_started == 2 and llm_ctx.counters.spans_selected == 2
    helper = [c for c in merged.values() if c.tuple and c.tuple.parent_key == llm_ctx.key]
    assert len(helper) == 1 and helper[0].counters.completed_ok == 2
    assert helper[0].counters.spans_selected == 0
    for ctx in merged.values():
        assert ctx.tuple is None or context_key(ctx.tuple) == ctx.key
    assert root_ctx.counters.direct_call_child_inclusive_ns == llm_ctx.counters.inclusive_ns
    assert self_ns(root_ctx.counters)[0] >= 0


def test_error_is_captured_once_and_linked_from_every_failing_selected_call(
    profiler: Profiler, store_root: Path
) -> None:
    with pytest.raises(ExtractionError):
        process(["ok", "bad one"], strict=True)
    assert profiler.flush()
    ex = load(store_root).only()
    assert ex.ended is not None and ex.ended.status == RootStatus.FAILED
    captures = ex.of(ErrorCapture)
    assert len(captures) == 1
    capture_ = captures[0]
    assert capture_.kind == ErrorKind.FRESH
    llm_starts = [s for s in ex.of(SpanStart) if s.selection_reasons == SELECT_LLM]
    assert capture_.throw_call == llm_starts[1].call
    links = ex.of(TerminalErrorRef)
    assert [link.call.call_id for link in links] == [llm_starts[1].call.call_id, 1]
    assert all(link.target == capture_.capture_id for link in links)
    value = load(store_root).value(capture_.value)
    assert value["message"] == "cannot read bad one" and value["invoice_id"] == "INV-9"
    assert value["type"].endswith("ExtractionError")
    assert capture_.throw_site is not None
    health = ex.ended.health
    assert health.error_captures_queued == health.error_captures_committed == 1
    assert health.terminal_error_links_committed == 2
    assert health.applicable_error_unwinds == 2


def test_asyncio_gather_children_are_spawned_threads_of_one_execution(
    profiler: Profiler, store_root: Path
) -> None:
    customers = [{"name": "Ada"}, {"name": "Grace"}]
    assert asyncio.run(score_all(customers)) == [3, 5]
    assert profiler.flush()
    ex = load(store_root).only()
    assert ex.ended is not None and ex.ended.status == RootStatus.SUCCEEDED
    threads = ex.of(ThreadStart)
    root_thread = [t for t in threads if t.kind == ThreadKind.ROOT]
    spawned = [t for t in threads if t.kind == ThreadKind.SPAWN]
    assert [t.thread for t in root_thread] == [ex.root]
    assert len(spawned) == 2
    assert all(t.parent == ex.root and t.spawn_call is not None for t in spawned)
    assert {t.thread for t in ex.of(ThreadEnd)} == {t.thread for t in threads}
    llm = [s for s in ex.of(SpanStart) if s.selection_reasons == SELECT_LLM]
    assert {s.thread for s in llm} == {t.thread for t in spawned}
    assert all(s.edge_kind == EdgeKind.SPAWN and s.call.call_id == 1 for s in llm)
    assert ex.ended.ended_ns >= max(e.ended_ns for e in ex.of(ThreadEnd))


def test_plain_threads_nest_through_propagate(profiler: Profiler, store_root: Path) -> None:
    results: list[object] = []

    @baml_function(name="tests.Fanout")
    def fanout() -> None:
        worker = threading.Thread(target=propagate(lambda: results.append(extract("x"))))
        worker.start()
        worker.join()

    fanout()
    assert profiler.flush()
    ex = load(store_root).only()
    spawned = [t for t in ex.of(ThreadStart) if t.kind == ThreadKind.SPAWN]
    assert len(spawned) == 1 and spawned[0].parent == ex.root
    assert results == [{"id": "INV-1042", "total": 12.35}]


def test_cancellation_ends_calls_and_root_as_cancelled(
    profiler: Profiler, store_root: Path
) -> None:
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancelled_root())
    assert profiler.flush()
    ex = load(store_root).only()
    assert ex.ended is not None and ex.ended.status == RootStatus.CANCELLED
    assert ex.of(ErrorCapture) == []
    merged = ex.merged_cct()
    assert sum(c.counters.completed_cancelled for c in merged.contexts) == 2


def test_manual_capture_selects_an_ordinary_call(profiler: Profiler, store_root: Path) -> None:
    @baml_function(name="tests.Manual")
    def manual() -> float:
        with capture(inputs=True):
            return normalize(1.005)

    manual()
    assert profiler.flush()
    view = load(store_root)
    ex = view.only()
    starts = ex.of(SpanStart)
    assert len(starts) == 2
    assert starts[1].selection_reasons == SELECT_MANUAL and starts[1].roles == ROLE_INPUT
    flags = starts[1].roles | 1 << 3 | (starts[1].selection_reasons & SELECT_MANUAL) << 4
    assert flags == 0b0100_1001  # reference facts §3.3: ordinary + LocalId(inputs=true)
    occurrences = [v for v in ex.of(ValueOccurrence) if v.call == starts[1].call]
    assert [v.role for v in occurrences] == [ValueRole.INPUT]
    assert view.value(occurrences[0].value) == {"x": 1.005}


def test_every_root_gets_started_and_ended_in_order(profiler: Profiler, store_root: Path) -> None:
    for _ in range(20):
        process(["a"])
    assert asyncio.run(score_all([{"name": "x"}])) == [1]
    assert profiler.flush()
    view = load(store_root)
    assert len(view.executions) == 21
    for ex in view.executions.values():
        assert ex.started is not None and ex.ended is not None
        # meta-pre before the data, meta-post after it (data high water at encode time)
        pre = next(m for m in view.meta if m.sequence == ex.started_meta_seq)
        post = next(m for m in view.meta if m.sequence == ex.ended_meta_seq)
        assert pre.data_high_water < ex.ended.data_first_seq
        assert post.data_high_water >= ex.ended.data_last_seq
    thread_ids = sorted(root.thread for root in view.executions)
    assert len(set(thread_ids)) == 21


def test_function_table_and_program_id_are_published(profiler: Profiler, store_root: Path) -> None:
    process(["a"])
    assert profiler.flush()
    view = load(store_root)
    assert len(view.engines) == 1
    engine = view.engines[0]
    assert len(engine.program_id) == 16
    table = view.function_table(engine)
    by_name = {f.fqn: f for f in table.functions}
    assert {"tests.Process", "tests.Extract", "tests.normalize"} <= set(by_name)
    entry = by_name["tests.Extract"]
    assert entry.source_file is not None and entry.source_file.endswith("test_calls.py")
    assert entry.source_span is not None
    source = Path(entry.source_file).read_bytes()
    text = source[entry.source_span.start : entry.source_span.end].decode()
    assert "def extract(" in text
    assert [f.function_id for f in table.functions] == sorted(
        f.function_id for f in table.functions
    )


@baml_function(name="tests.AwaitLeaf")
async def await_leaf() -> int:
    for _ in range(3):
        await asyncio.sleep(0.001)
    return 1


@baml_function(name="tests.AwaitParent")
async def await_parent() -> int:
    await asyncio.sleep(0.001)  # the parent's own await
    return await await_leaf() + await await_leaf()


def test_awaits_inside_a_direct_child_are_not_counted_twice(
    profiler: Profiler, store_root: Path
) -> None:
    assert asyncio.run(await_parent()) == 2
    assert profiler.flush()
    merged = load(store_root).only().merged_cct()
    root_ctx = next(c for c in merged.contexts if c.tuple and c.tuple.parent_key is None)
    leaf_ctx = next(c for c in merged.contexts if c.tuple and c.tuple.parent_key == root_ctx.key)
    assert root_ctx.counters.await_count == 1 and leaf_ctx.counters.await_count == 6
    assert root_ctx.counters.direct_call_child_inclusive_ns == leaf_ctx.counters.inclusive_ns
    spent = root_ctx.counters.direct_call_child_inclusive_ns + root_ctx.counters.await_ns
    assert spent <= root_ctx.counters.inclusive_ns
    assert self_ns(root_ctx.counters) == (root_ctx.counters.inclusive_ns - spent, False)


REDEFINED = """
from baml_studio.profiler import baml_function

@baml_function(name="calls.Redefined")
def redefined(x):
    return x * {factor}
"""


def test_a_function_defined_again_keeps_its_name_and_another_function_is_refused(
    profiler: Profiler, store_root: Path
) -> None:
    """A module reloaded or a notebook cell run again defines the same function anew (same
    module and qualified name, new code): that raised ``FunctionRegistrationError`` at
    decoration, in the application. Two different functions under one name still do."""
    from baml_studio.profiler.errors import FunctionRegistrationError

    first: dict[str, Any] = {"__name__": "notebook_cell"}
    exec(compile(REDEFINED.format(factor=2), "<cell 1>", "exec"), first)
    again: dict[str, Any] = {"__name__": "notebook_cell"}
    exec(compile(REDEFINED.format(factor=3), "<cell 2>", "exec"), again)
    assert first["redefined"](5) == 10 and again["redefined"](5) == 15
    other: dict[str, Any] = {"__name__": "another_module"}
    with pytest.raises(FunctionRegistrationError, match=r"calls\.Redefined"):
        exec(compile(REDEFINED.format(factor=4), "<other>", "exec"), other)
    assert profiler.flush()
    assert len(load(store_root).executions) == 2


@baml_function(name="calls.Keeps")
def keeps_its_frame(box: list[Any]) -> None:
    from baml_studio.profiler.runtime import CURRENT

    box.append(CURRENT.get())


def test_a_thread_spawned_from_an_ended_root_does_not_end_it_again(
    profiler: Profiler, store_root: Path
) -> None:
    """A propagated thread's first call raced its root's end: the closed check was outside the
    lock, the lease it then took ended the execution a second time, and ``open_executions``
    went below zero (an audit saw -5 in 3,000 roots). Under the lock now: the call becomes a
    root of its own."""
    box: list[Any] = []
    keeps_its_frame(box)
    (frame,) = box
    recorder = profiler.recorder
    assert frame.thread.execution.closed and recorder.open_executions == 0
    other_runner = (frame.thread.runner[0] + 1, 0)
    assert recorder._spawn_thread(frame, 0, other_runner, None) is None
    assert frame.thread.execution.leases == 0 and recorder.open_executions == 0
    assert profiler.flush()
    assert len(load(store_root).executions) == 1


def _scaled(x: int, factor: int) -> int:
    return x * factor


def test_a_callable_without_a_qualified_name_needs_name_and_works_with_it(
    profiler: Profiler, store_root: Path
) -> None:
    """``baml_function(functools.partial(...))`` raised ``AttributeError: __qualname__``."""
    import functools

    from baml_studio.profiler.errors import FunctionRegistrationError

    partial = functools.partial(_scaled, factor=3)
    with pytest.raises(FunctionRegistrationError, match="name="):
        baml_function(partial)
    named = baml_function(name="calls.Scaled")(partial)
    assert named(2) == 6
    assert profiler.flush()
    assert len(load(store_root).executions) == 1
