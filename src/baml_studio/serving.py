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


class ServeFailed(Exception):
    """The server did not start: its address could not be bound (a port in use, a host that is
    not this machine's) or its TLS files could not be loaded. The commands exit 4 with it."""


STARTUP_FAILURE = 3
"""What uvicorn exits with when the server did not start (it has logged why)."""


def serve_until_signalled(app: Any, **options: Any) -> None:
    """``uvicorn.run(app, **options)``; returns once uvicorn stopped, on its own or gracefully
    on SIGTERM or SIGINT; :class:`ServeFailed` when it did not start. Call it from the main
    thread."""
    import uvicorn

    where = f"{options.get('host', '127.0.0.1')}:{options.get('port', 8000)}"
    try:
        with stop_signals_raise():
            uvicorn.run(app, **options)
    except Signalled:
        pass
    except SystemExit as exc:
        if exc.code != STARTUP_FAILURE:
            raise
        raise ServeFailed(
            f"could not serve on {where} (the line above says why: an address in use, say)"
        ) from exc
    except OSError as exc:  # the TLS certificate or key (ssl.SSLError is an OSError)
        raise ServeFailed(f"could not serve on {where}: {exc}") from exc
