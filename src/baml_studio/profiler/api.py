"""The application-facing API: ``@baml_function``, ``capture(...)``, ``start()``/``stop()``.

Decorated functions report to the *active* profiler (module global). When none is active, or the
profiler is off, a decorated function costs one global read and a branch.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import functools
import inspect
import os
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterator
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, cast, overload

from baml_studio.format.records import ROLE_ERROR, ROLE_INPUT, ROLE_OUTPUT
from baml_studio.profiler.config import ProfilerConfig
from baml_studio.profiler.errors import FunctionRegistrationError
from baml_studio.profiler.events import Frame
from baml_studio.profiler.profiler import Profiler
from baml_studio.profiler.registry import REGISTRY, FunctionInfo, FunctionRegistry
from baml_studio.profiler.runtime import CURRENT, MANUAL, Recorder

P = ParamSpec("P")
R = TypeVar("R")
_ACTIVE: Profiler | None = None
_perf = time.perf_counter_ns


def active() -> Profiler | None:
    """The profiler decorated functions currently report to."""
    return _ACTIVE


def set_active(profiler: Profiler | None) -> None:
    global _ACTIVE
    _ACTIVE = profiler


def _forked_child() -> None:
    """In the child of ``os.fork()``: no profiler is active. The inherited one's consumer
    thread does not exist there, so its calls queued events nobody applied (lost, uncounted,
    and the queue grew to its bound); the child runs unprofiled until it calls :func:`start`
    itself (a gunicorn ``post_fork`` hook, a multiprocessing initializer)."""
    set_active(None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)


def start(config: ProfilerConfig | None = None, *, project_dir: Path | None = None) -> Profiler:
    """Start a profiler from ``config`` (default: the environment) and make it active; one
    started before is closed first (its calls flushed, its stream released).

    Example::

        from baml_studio import profiler
        profiler.start()              # honours BAML_PROFILE, BAML_PROFILE_DIR
    """
    new_config = config or ProfilerConfig.from_env(project_dir=project_dir)
    previous = _ACTIVE
    if previous is not None:  # a second start() left the first one's stream and thread open
        previous.close()
    prof = Profiler(new_config)
    prof.activate()
    atexit.register(prof.close)
    return prof


def stop(timeout: float = 5.0) -> None:
    """Flush and close the active profiler (``flush_and_join``)."""
    prof = _ACTIVE
    if prof is not None:
        prof.close(timeout)


def _recorder(registry: FunctionRegistry) -> Recorder | None:
    """The active recorder, if it numbers functions with ``registry`` (else: run unprofiled)."""
    prof = _ACTIVE
    if prof is None or prof.recorder.registry is not registry:
        return None
    return prof.recorder


def _arg_binder(
    fn: Callable[..., Any],
) -> Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]]:
    """Map a call's arguments to ``{declared parameter name: value}``, defaults included
    (``argN`` for extra positional arguments)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    count = len(positional)
    keyword_kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    defaults = {
        p.name: p.default
        for p in params
        if p.kind in keyword_kinds and p.default is not inspect.Parameter.empty
    }

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if len(args) <= count:
            bound = dict(zip(positional, args, strict=False))
        else:
            bound = dict(zip(positional, args[:count], strict=True))
            for index in range(count, len(args)):
                bound[f"arg{index}"] = args[index]
        if kwargs:
            bound.update(kwargs)
        if defaults:
            for name, default in defaults.items():
                if name not in bound:
                    bound[name] = default
        return bound

    return bind


class _Timed:
    """Drives a coroutine, measuring time spent suspended (``await_ns``, ``await_count``)."""

    __slots__ = ("coro", "frame")

    def __init__(self, coro: Coroutine[Any, Any, Any], frame: Frame) -> None:
        self.coro = coro
        self.frame = frame

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, frame = self.coro, self.frame
        to_send: Any = None
        to_throw: BaseException | None = None
        while True:
            try:
                if to_throw is not None:
                    thrown, to_throw = to_throw, None
                    try:
                        yielded = coro.throw(thrown)
                    finally:
                        del thrown  # its traceback will hold this frame: no cycle through it
                else:
                    yielded = coro.send(to_send)
            except StopIteration as stop:
                return stop.value
            suspended = _perf()
            own = frame.active_children == 0  # else a direct child is the one suspended
            try:
                to_send = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                to_throw = exc
            if own:
                frame.await_ns += _perf() - suspended
                frame.await_count += 1


def _default_name(func: Callable[..., Any]) -> str:
    """``module.qualname``; a callable without them (a ``functools.partial``, an instance with
    ``__call__``) raised ``AttributeError`` at decoration: it needs ``name=``."""
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise FunctionRegistrationError(
            f"{func!r} has no __module__ and __qualname__ to name it by: give "
            "@baml_function(name=...)"
        )
    return f"{module}.{qualname}"


@overload
def baml_function(fn: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def baml_function(
    *, name: str | None = None, llm: bool = False, registry: FunctionRegistry = REGISTRY
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def baml_function(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    llm: bool = False,
    registry: FunctionRegistry = REGISTRY,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Mark a function (sync or ``async``) as a BAML function.

    ``name`` is its fully qualified name (default ``module.qualname``); ``llm=True`` marks an LLM
    function, whose input, output and error are captured like a root's. Example::

        @baml_function(name="app.ExtractInvoice", llm=True)
        async def extract_invoice(document: str) -> Invoice: ...
    """

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        fqn = name or _default_name(func)
        info = registry.register(fqn, func, llm=llm)
        bind = _arg_binder(func)
        if inspect.iscoroutinefunction(func):
            return cast(Callable[P, R], _async_wrapper(func, info, bind, registry))
        return _sync_wrapper(func, info, bind, registry)

    return decorate(fn) if fn is not None else decorate


def _sync_wrapper(
    func: Callable[P, R],
    info: FunctionInfo,
    bind: Callable[..., dict[str, Any]],
    registry: FunctionRegistry,
) -> Callable[P, R]:
    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        rec = _recorder(registry)
        if rec is None:
            return func(*args, **kwargs)
        entered = rec.enter(info, bind(args, kwargs), sys._getframe(1))
        if entered is None:
            return func(*args, **kwargs)
        frame, token = entered
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            rec.exit_error(frame, token, exc)
            raise
        rec.exit_ok(frame, token, result)
        return result

    return wrapper


def _async_wrapper(
    func: Callable[..., Awaitable[Any]],
    info: FunctionInfo,
    bind: Callable[..., dict[str, Any]],
    registry: FunctionRegistry,
) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(func)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        rec = _recorder(registry)
        if rec is None:
            return await func(*args, **kwargs)
        entered = rec.enter(info, bind(args, kwargs), sys._getframe(1))
        if entered is None:
            return await func(*args, **kwargs)
        frame, token = entered
        try:
            result = await _Timed(cast(Coroutine[Any, Any, Any], func(*args, **kwargs)), frame)
        except BaseException as exc:
            rec.exit_error(frame, token, exc)
            raise
        rec.exit_ok(frame, token, result)
        return result

    return wrapper


@contextlib.contextmanager
def capture(*, inputs: bool = False, output: bool = False, error: bool = False) -> Iterator[None]:
    """Capture the chosen roles of BAML calls made directly inside the block (``$id`` capture).

    Ordinary calls only feed the calling-context tree; inside ``with capture(inputs=True):`` a
    call is *manually selected* and its input is recorded too. Example::

        with capture(inputs=True, output=True):
            score = score_customer(customer)
    """
    roles = (ROLE_INPUT if inputs else 0) | (ROLE_OUTPUT if output else 0)
    roles |= ROLE_ERROR if error else 0
    token = MANUAL.set((CURRENT.get(), roles))
    try:
        yield
    finally:
        MANUAL.reset(token)


def propagate(fn: Callable[P, R]) -> Callable[P, R]:
    """Bind ``fn`` to the caller's context, so calls it makes on another thread nest as spawns.

    Example: ``threading.Thread(target=propagate(work)).start()``.
    """
    ctx = contextvars.copy_context()

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return ctx.copy().run(fn, *args, **kwargs)

    return run
