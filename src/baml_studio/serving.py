"""Serving an ASGI app with uvicorn until SIGTERM or SIGINT, then returning to the caller.

uvicorn (0.29 and later) shuts down gracefully on SIGTERM or SIGINT, restores the handlers it
found, and then raises the same signal again so that the process ends as that signal would end
it. For SIGTERM that is the default action: the process dies there, and nothing after
``uvicorn.run`` runs — a ``finally`` that closes the service's stores included. So
``serve control`` and ``serve dataplane`` left their fact store, metastore, queue and
background workers unclosed every time a supervisor (systemd, Kubernetes, a test) stopped them.

:func:`serve_until_signalled` installs handlers that raise :class:`Signalled` for the time
uvicorn runs; uvicorn keeps them as the handlers to restore, and its re-raised signal then ends
``uvicorn.run`` with that exception, which is caught here. The caller's code after the call, and
its ``finally``, run; the process exits 0 after a graceful stop.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

HANDLED = (signal.SIGTERM, signal.SIGINT)


class Signalled(BaseException):
    """A stop signal arrived (a ``BaseException``: no ``except Exception`` on the way takes it
    for a failure)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Signalled(signum)


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """For the block, SIGTERM and SIGINT raise :class:`Signalled` in the main thread (the
    block's previous handlers are restored after it)."""
    previous = {sig: signal.signal(sig, _raise) for sig in HANDLED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve_until_signalled(app: Any, **options: Any) -> None:
    """``uvicorn.run(app, **options)``; returns once uvicorn stopped, on its own or gracefully
    on SIGTERM or SIGINT. Call it from the main thread."""
    import uvicorn

    try:
        with stop_signals_raise():
            uvicorn.run(app, **options)
    except Signalled:
        pass
