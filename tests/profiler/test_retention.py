"""What an application's profiled calls leave behind: once an execution has ended (and the
consumer has written it), nothing of it stays in a reference cycle, so an exception raised
through profiled functions, its traceback and every frame's locals (prompts, documents,
responses) go when the application lets go of them, not at some later cycle collection."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest

from baml_studio.profiler import Profiler, baml_function


class Refused(Exception):
    """A user exception (weak-referenceable, unlike the built-in ones)."""


class Payload:
    """Stands for a large object a failing call holds in a local."""


@pytest.fixture
def no_cycle_collection() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@baml_function(name="tests.retention.Extract", llm=True)
def extract(document: str) -> str:
    held = Payload()  # noqa: F841  # reason: a local the traceback's frame keeps
    raise Refused(f"cannot read {document}")


@baml_function(name="tests.retention.Process")
def process(document: str) -> str:
    return extract(document)


def test_an_exception_raised_through_profiled_calls_is_not_kept_alive(
    profiler: Profiler, no_cycle_collection: None
) -> None:
    refs: list[weakref.ref[Any]] = []
    for document in ("first", "second"):
        try:
            process(document)
        except Refused as exc:
            refs.append(weakref.ref(exc))
            frames = []
            tb = exc.__traceback__
            while tb is not None:
                frames.append(tb.tb_frame)
                tb = tb.tb_next
            refs.append(weakref.ref(frames[-1].f_locals["held"]))
            del frames, tb
    assert profiler.flush()
    assert [ref() for ref in refs] == [None] * 4


class Thrown(Exception):
    """Thrown into a suspended profiled coroutine by its driver."""


class _Suspend:
    def __await__(self) -> Iterator[None]:
        yield None


@baml_function(name="tests.retention.Wait")
async def wait() -> None:
    await _Suspend()


@baml_function(name="tests.retention.Root")
async def root() -> None:
    await wait()


def test_an_exception_thrown_into_a_profiled_coroutine_is_not_kept_alive(
    profiler: Profiler, no_cycle_collection: None
) -> None:
    coro: Coroutine[Any, Any, None] = root()
    coro.send(None)  # suspended inside wait()
    thrown = Thrown("stop")
    ref = weakref.ref(thrown)
    try:
        coro.throw(thrown)
    except Thrown as exc:
        assert exc is thrown
    else:
        raise AssertionError("the thrown exception did not come out")
    del thrown, coro
    assert profiler.flush()
    assert ref() is None
