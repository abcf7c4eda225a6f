"""The projector on several processes (``baml-studio projector --processes N``)::

    run_processes(config, stop=event, processes=N, workers=W, run_here=fn)

    this process        run_here(): the usual service (W worker threads, the sweep and the
                        compaction); it alone runs maintenance
    helper × (N - 1)    spawned processes, each its own stores (opened with ``opener``) and W
                        worker threads on the same queue (:func:`~.loop.run_projector`
                        without maintenance)

Why: a worker's work is mostly Python (decoding evidence, the catalog's fold, building and
sending batches), so the threads of one process share one core however many there are; the
queue, the control plane's batch route and Lance's commits are already safe for several
projectors at once (the Lambda entry point runs one per concurrent invocation). On the 2-core
arrival replay, two processes of one thread made every call queryable 5–10 s sooner than one
process of two threads (``docs/benchmarks.md``).

Each helper talks to this process over a pipe: ``ready`` (or the error that kept it from
opening its stores) at start, then it serves until it is told to stop or the pipe closes (this
process ended: a helper never outlives it by more than one message and a long poll), and sends
its :class:`~.loop.LoopReport` back. Helpers ignore SIGINT (Ctrl-C reaches the whole process
group; this process decides). While serving, a helper that dies is logged and started again
after a backoff (1 s, doubling to 60 s while it keeps dying within a minute); its message comes
back after the visibility timeout, and every step is safe to redo. With ``once``, every process
drains what is visible and the reports are summed.

Only for a local derived root: there every Lance write holds an ``flock`` that serialises the
writers of a dataset across processes (``lance_store``). Lance cannot lock an object store, so
on ``s3://`` one process per scope's datasets must write (:func:`check_processes` refuses more).

``config`` and ``opener`` go to the helpers by pickling (spawn start method): the CLI's config
(a token string) pickles; a config whose token is a lambda does not.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from baml_studio.format.errors import BamlStudioError
from baml_studio.projector.loop import LoopReport, run_projector, summed
from baml_studio.projector.service import Projector, ProjectorConfig, open_projector
from baml_studio.servergc import tune_for_serving

log = logging.getLogger(__name__)

Opener = Callable[[ProjectorConfig], Projector]
RESTART_BACKOFF_S = 1.0
RESTART_BACKOFF_MAX_S = 60.0
STABLE_S = 60.0
"""A helper that served this long before it died is restarted after the shortest backoff."""
READY_TIMEOUT_S = 120.0
HELPER_NAME = "baml-projector-helper"
"""The helper processes' name (``multiprocessing``'s, not the OS's)."""


class HelperFailed(BamlStudioError):
    """A helper process could not open its stores, or ended without its report."""


@dataclass
class ProcessesReport:
    """Every process's counts summed, and how often helpers were started again."""

    loop: LoopReport = field(default_factory=LoopReport)
    restarts: int = 0

    def as_dict(self) -> dict[str, int]:
        counts = self.loop.as_dict()
        counts["process_restarts"] = self.restarts
        return counts


def helper_main(
    conn: Connection,
    index: int,
    config: ProjectorConfig,
    opener: Opener,
    workers: int,
    wait_s: float,
    once: bool,
) -> None:
    """A helper process: open the stores, say ``ready``, serve until told to stop (or until
    the pipe closes), send the report."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s"
        )
    try:
        projector = opener(config)
    except BaseException as exc:  # reported to the parent, which decides
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        conn.close()
        return
    tune_for_serving()  # a process that only serves: its collector as the servers' (servergc)
    stop = threading.Event()

    def listen() -> None:
        with contextlib.suppress(EOFError, OSError):
            conn.recv()  # "stop", or EOF when the parent is gone
        stop.set()

    try:
        log.info("projector process %d started (pid %d)", index, os.getpid())
        conn.send(("ready", None))
        threading.Thread(target=listen, name="projector-helper-stop", daemon=True).start()
        try:
            report = run_projector(projector, stop=stop, workers=workers, wait_s=wait_s, once=once)
        except BaseException as exc:  # once mode: a receive that failed
            with contextlib.suppress(OSError):
                conn.send(("error", f"{type(exc).__name__}: {exc}"))
            return
        with contextlib.suppress(OSError):
            conn.send(("ok", report))
    finally:
        projector.close()
        with contextlib.suppress(OSError):
            conn.close()


class _Helper:
    def __init__(self, index: int, start: Callable[[], tuple[BaseProcess, Connection]]) -> None:
        self.index = index
        self._start = start
        self.process, self.conn = start()
        self.started = time.monotonic()
        self.backoff = RESTART_BACKOFF_S
        self.report: LoopReport | None = None

    def wait_ready(self) -> None:
        if not self.conn.poll(READY_TIMEOUT_S):
            raise HelperFailed(f"projector process {self.index} did not start")
        try:
            kind, payload = self.conn.recv()
        except EOFError:
            raise HelperFailed(
                f"projector process {self.index} ended at start (exit {self.process.exitcode})"
            ) from None
        if kind != "ready":
            raise HelperFailed(f"projector process {self.index}: {payload}")

    def drain(self) -> None:
        """Log what a helper that died said last (the error that kept it from starting)."""
        with contextlib.suppress(EOFError, OSError):
            while self.conn.poll(0):
                kind, payload = self.conn.recv()
                if kind == "error":
                    log.error("projector process %d: %s", self.index, payload)

    def restart(self) -> None:
        self.drain()
        self.conn.close()
        self.process.join()
        self.process, self.conn = self._start()
        self.started = time.monotonic()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send("stop")

    def collect(self, timeout_s: float | None) -> LoopReport | None:
        """The helper's report (None if it ended without one)."""
        try:
            while self.conn.poll(timeout_s):
                kind, payload = self.conn.recv()
                if kind == "ok":
                    self.report = payload
                    break
                if kind == "error":
                    log.error("projector process %d: %s", self.index, payload)
                    break
                # "ready" from a helper started again: its report follows
        except (EOFError, OSError):
            pass
        self.process.join(timeout_s)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()
        return self.report


def check_processes(config: ProjectorConfig, processes: int) -> None:
    """``ValueError`` unless ``processes`` projector processes can share ``config``'s Lance
    root (at least 1; more than 1 only on a local root)."""
    if processes < 1:
        raise ValueError(f"processes must be at least 1, got {processes}")
    root = config.root()
    if processes > 1 and "://" in root and not root.startswith("file://"):
        raise ValueError(
            f"{processes} projector processes need a local Lance root; {root} is an object "
            "store, which Lance cannot lock: run one process (with more --workers)"
        )


def run_processes(
    config: ProjectorConfig,
    *,
    stop: threading.Event,
    processes: int,
    workers: int,
    wait_s: float,
    run_here: Callable[[], LoopReport],
    once: bool = False,
    opener: Opener = open_projector,
    supervise_s: float = 1.0,
) -> ProcessesReport:
    """Start ``processes - 1`` helpers, run ``run_here`` (this process's own service, which
    returns when ``stop`` is set, or when it drained with ``once``), then stop the helpers and
    sum every report. A helper that cannot start raises :class:`HelperFailed` before anything
    runs here (the helpers already started are stopped)."""
    check_processes(config, processes)
    context = multiprocessing.get_context("spawn")

    def start(index: int) -> tuple[BaseProcess, Connection]:
        mine, theirs = context.Pipe(duplex=True)
        process = context.Process(
            target=helper_main,
            args=(theirs, index, config, opener, workers, wait_s, once),
            name=HELPER_NAME,
            daemon=False,
        )
        process.start()
        theirs.close()
        return process, mine

    helpers: list[_Helper] = []
    try:
        for index in range(1, processes):
            helpers.append(_Helper(index, functools.partial(start, index)))
        for helper in helpers:
            helper.wait_ready()
    except BaseException:
        for helper in helpers:
            helper.stop()
        for helper in helpers:
            helper.collect(10.0)
        raise
    report = ProcessesReport()
    done = threading.Event()
    supervisor = threading.Thread(
        target=_supervise,
        args=(helpers, stop, done, once, report, supervise_s),
        name="projector-supervisor",
        daemon=True,
    )
    supervisor.start()
    try:
        here = run_here()
    finally:
        done.set()
        supervisor.join()
        if not once:
            for helper in helpers:
                helper.stop()
        reports = [helper.collect(None) for helper in helpers]
    missing = [h.index for h, r in zip(helpers, reports, strict=True) if r is None]
    every = [here, *(r for r in reports if r is not None)]
    report.loop = LoopReport(
        worker=summed([r.worker for r in every]),
        errors=sum(r.errors for r in every) + len(missing),
        sweeps=here.sweeps,
        compactions=here.compactions,
        maintenance_errors=here.maintenance_errors,
    )
    if missing:
        log.error("projector processes %s ended without their counts", missing)
    return report


def _supervise(
    helpers: list[_Helper],
    stop: threading.Event,
    done: threading.Event,
    once: bool,
    report: ProcessesReport,
    interval_s: float,
) -> None:
    """Start again a helper that died while serving (not in ``once`` mode: a helper that
    drained ends on its own)."""
    due: dict[int, float] = {}
    while not done.wait(interval_s):
        if once or stop.is_set():
            continue
        for helper in helpers:
            if helper.process.is_alive():
                continue
            now = time.monotonic()
            if helper.index not in due:
                if now - helper.started >= STABLE_S:
                    helper.backoff = RESTART_BACKOFF_S
                log.error(
                    "projector process %d died (exit %s); starting it again in %.0fs",
                    helper.index,
                    helper.process.exitcode,
                    helper.backoff,
                )
                due[helper.index] = now + helper.backoff
                helper.backoff = min(RESTART_BACKOFF_MAX_S, helper.backoff * 2)
            elif now >= due[helper.index] and not stop.is_set():
                del due[helper.index]
                try:
                    helper.restart()
                except Exception as exc:  # logged; tried again at the next pass
                    log.error("projector process %d: restart failed: %s", helper.index, exc)
                    continue
                report.restarts += 1
