"""A burst, then close: what the profiler costs a process that makes its calls faster than the
consumer applies them and then exits.

One fresh process per run (so its peak RSS is its own) drives ``--executions`` seeded workload
executions (the synthetic application of ``baml-studio demo`` and the arrival replay, 8 at a
time on one event loop) and then, in mode:

* ``off`` (the baseline): no profiler, nothing after the calls;
* ``close``: a real :class:`~baml_studio.profiler.Profiler` writing a store under
  ``--store-parent`` is active during the calls, and ``Profiler.close()`` follows them at once
  (the backlog is applied, published and the stream released by the final pass);
* ``flush``: the same, with ``Profiler.flush()`` before ``close()`` (what the arrival replay's
  workload processes do).

Reported per run: CPU seconds of the process from the first call to the end (user + system),
seconds from the last call until ``close()`` returned, CPU seconds inside garbage collections
(``gc.callbacks``, the collecting thread's CPU) and how many full (generation 2) collections
ran, and the peak RSS. (The objects the collector tracks are not counted: ``gc.get_objects()``
while other threads build tuples can hand one of them out mid-construction, and the owner's
``_PyTuple_Resize`` then raises ``SystemError``; seen here, in both the profiler's and the
application's code.)
Modes run in rotation, ``--runs`` times each; medians are printed, and the CPU as a ratio to
``off`` (the application alone).

    .venv/bin/python benchmarks/profiler_backlog.py                      # 6,000 executions
    .venv/bin/python benchmarks/profiler_backlog.py --store-parent /dev/shm --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import resource
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

SEED = 7
MODES = ("off", "close", "flush")


@dataclass(frozen=True)
class Run:
    mode: str
    cpu_s: float
    tail_s: float
    """From the last call until ``close()`` returned (0 for ``off``)."""
    gc_cpu_s: float
    full_collections: int
    max_rss_mb: float
    executions: int


def _child(conn: Connection, mode: str, executions: int, store_parent: str | None) -> None:
    from baml_studio.profiler import Profiler, ProfilerConfig
    from baml_studio.workload.runner import _drive  # the workload's own driver

    gc_cpu = [0.0]
    started = [0.0]
    full = [0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.thread_time()
            full[0] += info["generation"] == 2
        else:
            gc_cpu[0] += time.thread_time() - started[0]

    tmp = tempfile.mkdtemp(prefix="profiler-backlog-", dir=store_parent)
    try:
        profiler = None
        if mode != "off":
            profiler = Profiler(ProfilerConfig(store_root=Path(tmp) / ".baml" / "profiles-v1"))
            if profiler.open_error is not None:
                raise profiler.open_error
            profiler.activate()
        gc.callbacks.append(on_gc)
        times0 = resource.getrusage(resource.RUSAGE_SELF)
        mismatches = asyncio.run(_drive(SEED, range(executions), 8))
        last = time.perf_counter()
        if profiler is not None:
            if mode == "flush":
                profiler.flush(timeout=600)
            if not profiler.close(timeout=600):
                raise RuntimeError("close() timed out")
        tail = time.perf_counter() - last if profiler is not None else 0.0
        times1 = resource.getrusage(resource.RUSAGE_SELF)
        gc.callbacks.remove(on_gc)
        if mismatches:
            raise RuntimeError(f"{len(mismatches)} executions did not end as planned")
        cpu = (times1.ru_utime + times1.ru_stime) - (times0.ru_utime + times0.ru_stime)
        rss_mb = times1.ru_maxrss / 1024  # KiB on Linux
        conn.send(("ok", Run(mode, cpu, tail, gc_cpu[0], full[0], rss_mb, executions)))
    except BaseException as exc:  # reported to the parent, never hidden
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        conn.close()


def run_one(mode: str, executions: int, store_parent: str | None) -> Run:
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(sender, mode, executions, store_parent))
    child.start()
    sender.close()
    kind, payload = receiver.recv()
    child.join()
    if kind != "ok":
        raise SystemExit(f"{mode} run failed: {payload}")
    result: Run = payload
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=6000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--store-parent", default=None, help="where the temp stores go")
    args = parser.parse_args()
    modes = args.modes.split(",")
    if "off" not in modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: some of {', '.join(MODES)}, with off (the baseline)")
    runs: dict[str, list[Run]] = {m: [] for m in modes}
    for _ in range(args.runs):
        for mode in modes:
            runs[mode].append(run_one(mode, args.executions, args.store_parent))
    print(
        f"{args.executions} executions, {args.runs} runs a mode in rotation, stores under "
        f"{args.store_parent or tempfile.gettempdir()}; medians"
    )
    header = (
        f"{'mode':<7}{'CPU s':>8}{'vs off':>8}{'tail s':>8}{'GC CPU s':>10}{'full GCs':>10}"
        f"{'peak RSS MB':>13}"
    )
    print(header)
    print("-" * len(header))
    base = statistics.median(r.cpu_s for r in runs["off"])
    for mode in modes:
        rs = runs[mode]

        def med(values: list[float]) -> float:
            return statistics.median(values)

        cpu = med([r.cpu_s for r in rs])
        print(
            f"{mode:<7}{cpu:>8.2f}{cpu / base:>8.2f}{med([r.tail_s for r in rs]):>8.2f}"
            f"{med([r.gc_cpu_s for r in rs]):>10.2f}"
            f"{med([float(r.full_collections) for r in rs]):>10.0f}"
            f"{med([r.max_rss_mb for r in rs]):>13.0f}"
        )


if __name__ == "__main__":
    main()
