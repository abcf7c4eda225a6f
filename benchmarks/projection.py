"""Projection throughput, and the seeds' arrival replay through the whole ingest path.

    .venv/bin/python benchmarks/projection.py                       # both parts, real sizes
    .venv/bin/python benchmarks/projection.py --skip-arrival --executions 2000
    .venv/bin/python benchmarks/projection.py --skip-throughput --arrival-calls 100000

Every service runs in its own process, as deployed (``projection_rig.py``): the data plane
(``serve dataplane``: directory bucket + SQLite queue), the control plane (``serve control``:
SQLite metastore + chDB), each under a temp dir; the projector (``projector.service``:
``open_projector`` over the data-plane directory, Lance under it) runs in this process, its
garbage collector tuned as ``baml-studio projector`` tunes its own (``servergc``).

1. **Throughput.** A store of ``--executions`` seeded workload executions (2 processes) is
   shipped once by the real publisher through the gateway; the bucket and queue are then
   copied for each run, and ``ProjectorWorker.drain()`` (1 thread; with more threads, each
   sharing one ``Projector``, ``run_once(max_messages=1)`` until the queue has none visible)
   empties the queue into a fresh control plane. Reported: executions/s and
   calls/s of wall time, and per core (per CPU-second of the projector process, and of the
   projector plus control-plane processes); time per step from wrappers around the calls the
   worker makes. Baseline in the same run: gather + project of every meta object of the same
   bucket on one thread with no writes (the projector's pure work). Target: the arrival
   replay's rate, ``--arrival-calls`` in ``--arrival-seconds``.
2. **Arrival replay.** ``--arrival-calls`` calls' worth of workload executions, split over 2
   processes (each its own store, as two hosts), start together through the real profiler
   with its publisher shipping to the gateway (``flush_interval_seconds`` from the gateway
   config, ``--flush-interval``); projector worker threads consume the queue meanwhile; the
   control plane is polled about once a second with two resident queries,
   ``SELECT sum(calls_started) FROM call_path_stats_v1`` (every call, captured or not) and
   ``SELECT count(*) FROM calls_v1`` (captured calls: LLM functions, roots, ``capture()``),
   until the first equals the calls the workload made, or ``--timeout`` passes; at the end
   the second is checked against the local catalog of the profilers' stores. Reported from the first
   call: arrival (last call ended), accepted (both publishers' final flushes returned, all
   shipped), queryable; compared with the proof of concept's 40.85 s (accept) and 214.93 s
   (visible) and the 20 s goal.
   ``--arrival-projectors N`` runs N projector processes of ``--arrival-threads`` threads each
   (``projector.processes.run_processes``, as ``baml-studio projector --processes N`` runs
   them; the projector CPU is theirs together, the step table this process's threads only).
   ``--arrival-threads 0`` runs the same workload with no projector: the time the profiler,
   publisher and gateway alone take to accept everything, the floor under the goal on this
   machine.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import math
import multiprocessing
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from baml_studio.catalog import LocalStoreSource
from baml_studio.gateway.keys import evidence_prefix
from baml_studio.gateway.service import load_dataplane_config
from baml_studio.projector.evidence import EvidenceReader
from baml_studio.projector.gather import gather_root_ended
from baml_studio.projector.loop import LoopReport, run_projector
from baml_studio.projector.messages import parse_evidence_key
from baml_studio.projector.processes import HELPER_NAME, ProcessesReport, run_processes
from baml_studio.projector.project import project_executions
from baml_studio.projector.service import Projector, ProjectorConfig, open_projector
from baml_studio.projector.worker import ProjectorWorker, WorkerConfig
from baml_studio.publisher import Publisher
from baml_studio.queue.config import QueueSettings
from baml_studio.queue.sqlite import SqliteQueue
from baml_studio.servergc import tune_for_serving
from baml_studio.workload import plan_workload, run_workload
from projection_rig import (
    SCOPE,
    LogCounter,
    Phases,
    Resident,
    Service,
    control_plane,
    cpu_seconds,
    dataplane,
)

POC_ACCEPT_S = 40.85
POC_VISIBLE_S = 214.93
GOAL_S = 20.0
SEED = 7


def machine() -> str:
    import chdb
    import lance

    one, five, _ = os.getloadavg()
    return (
        f"{os.cpu_count()} cores, {platform.machine()}, Linux {platform.release()}, Python "
        f"{platform.python_version()}, lance {lance.__version__}, chDB {chdb.__version__}; "
        f"load average (1, 5 min) {one:.2f} {five:.2f}"
    )


def total_calls(executions: int, processes: int, seed: int = SEED) -> int:
    report = plan_workload(executions, processes, seed)
    return sum(report.calls_by_function.values())


def open_worker_side(dp_dir: Path, control: Service, visibility_s: int) -> Projector:
    """``open_projector`` over ``dp_dir``, its SQLite queue reopened with a visibility timeout
    of ``visibility_s`` (``dataplane.json`` has no queue settings; the default is 30 s)."""
    dp = load_dataplane_config(dp_dir, host="127.0.0.1", port=1)
    return open_with_visibility(ProjectorConfig(dp, control.url, control.token), visibility_s)


def open_with_visibility(config: ProjectorConfig, visibility_s: int) -> Projector:
    """``open_projector(config)`` with its SQLite queue reopened with ``visibility_s`` (also
    the opener of the ``--arrival-projectors`` helper processes)."""
    opened = open_projector(config)
    opened.queue.close()  # type: ignore[attr-defined]  # reason: the embedded SqliteQueue
    settings = QueueSettings(visibility_timeout_s=visibility_s)
    queue = SqliteQueue.open(dataclasses.replace(config.dataplane.queue_config, settings=settings))
    return Projector(opened.config, opened.store, queue, opened.control)


def fmt_row(cells: list[str], widths: list[int]) -> str:
    return "".join(
        c.ljust(w) if i == 0 else c.rjust(w)
        for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )


# ------------------------------------------------------------------------------ throughput


@dataclass
class DrainRun:
    mode: str
    threads: int
    wall_s: float
    cpu_s: float
    control_cpu_s: float
    stats: dict[str, int]
    phases: Phases
    visible: tuple[int, int]
    """(calls, captured calls) the control plane answers after the drain."""
    problems: list[str] = field(default_factory=list)


def pure_baseline(projector: Projector) -> tuple[float, float, int]:
    """Gather + project every meta object of the bucket on this thread, no writes:
    (wall s, CPU s, executions)."""
    store = projector.store
    keys = [i.key for i in store.list(evidence_prefix(SCOPE)) if i.key.endswith(".bamlmeta.zst")]
    reader = EvidenceReader(store, SCOPE)
    executions = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for key in keys:
        evidence = parse_evidence_key(key)
        if evidence.euid is None or evidence.sequence is None:
            raise SystemExit(f"not a meta segment key: {key}")
        gathered = gather_root_ended(reader, evidence.euid, evidence.sequence)
        carried = gathered.carried_definitions()
        step = WorkerConfig().slice_executions  # as the worker does: a slice at a time
        for start in range(0, len(gathered.executions), step):
            chunk = gathered.executions[start : start + step]
            project_executions([(i, carried.get(i.meta.execution_id, [])) for i in chunk])
            executions += len(chunk)
    return time.perf_counter() - wall0, time.process_time() - cpu0, executions


MODES = {
    "drain": "ProjectorWorker.drain()",
    "loop": "service loop (run_projector once)",
    "single": "threads, 1 message per receive",
}


def drain(dp_dir: Path, cp_dir: Path, mode: str, threads: int, visibility_s: int) -> DrainRun:
    """Empty the queue of ``dp_dir`` (every notification of the shipped store) into a fresh
    control plane and Lance: ``drain`` = ``ProjectorWorker.drain()`` on one thread; ``loop`` =
    the service loop ``run_projector(workers=threads, once=True)`` (each thread leases 10
    messages per receive); ``single`` = ``threads`` workers of one ``Projector``, each
    ``run_once(max_messages=1)`` until nothing is visible."""
    with control_plane(cp_dir) as control:
        projector = open_worker_side(dp_dir, control, visibility_s)
        phases = Phases()
        phases.install(projector)
        warnings = LogCounter().install()
        problems: list[str] = []
        stats: dict[str, int] = {}
        cp0, cpu0, wall0 = cpu_seconds(control.pid), time.process_time(), time.perf_counter()
        if mode == "loop":
            report = run_projector(projector, stop=threading.Event(), workers=threads, once=True)
            stats = report.as_dict()
        else:
            workers = [projector.worker() for _ in range(threads)]

            def run(worker: ProjectorWorker) -> None:
                try:
                    if mode == "drain":
                        worker.drain(max_rounds=1_000_000)
                    else:
                        while worker.run_once(max_messages=1):
                            pass
                except Exception as exc:  # reported below, never hidden
                    problems.append(f"a worker thread stopped: {type(exc).__name__}: {exc}")

            pool = [threading.Thread(target=run, args=(w,)) for w in workers]
            for thread in pool:
                thread.start()
            for thread in pool:
                thread.join()
            for worker in workers:
                for name, value in vars(worker.stats).items():
                    stats[name] = stats.get(name, 0) + value
        wall = time.perf_counter() - wall0
        cpu, cp_cpu = time.process_time() - cpu0, cpu_seconds(control.pid) - cp0
        phases.uninstall()
        warnings.uninstall()
        problems += [f"logged {n}x: {text}" for text, n in sorted(warnings.counts.items())]
        resident = Resident(control.url, control.token)
        try:
            visible = resident.counts()
        finally:
            resident.close()
        left = queue_left(projector)
        if left:
            problems.append(f"{left} messages left in the queue")
        projector.close()
    return DrainRun(mode, threads, wall, cpu, cp_cpu, stats, phases, visible, problems)


def queue_left(projector: Projector) -> int:
    count = getattr(projector.queue, "approximate_count", None)
    return int(count()) if callable(count) else 0


def captured_calls(roots: list[Path]) -> int:
    """``calls_v1`` rows the local catalog folds from the profiler stores at ``roots``."""
    return sum(LocalStoreSource(r).tables(["calls_v1"], None)["calls_v1"].num_rows for r in roots)


def throughput(
    tmp: Path,
    executions: int,
    runs_asked: list[tuple[str, int]],
    target: float,
    visibility_s: int,
    publish_interval_s: float = 1.0,
) -> None:
    root = tmp / "store" / ".baml" / "profiles-v1"
    started = time.perf_counter()
    report = run_workload(
        root, executions, processes=2, seed=SEED, publish_interval_s=publish_interval_s
    )
    build_s = time.perf_counter() - started
    calls = sum(report.calls_by_function.values())
    captured = captured_calls([root])
    dp0 = tmp / "dataplane-shipped"
    with dataplane(dp0) as dp:
        flush = Publisher(root, dp.url, dp.token).flush()
    if not flush.complete:
        raise SystemExit(f"the publisher did not ship everything: {flush.problems}")
    projector = open_worker_side(dp0, Service("http://127.0.0.1:1", "unused", 0), visibility_s)
    try:
        messages = queue_left(projector)
        baseline = pure_baseline(projector)
    finally:
        projector.close()
    print(
        f"store: {executions} executions (seed {SEED}, 2 processes, built in {build_s:.1f} s), "
        f"{calls} calls of which {captured} captured (calls_v1 rows); shipped "
        f"{flush.objects} objects, {messages} queue messages; queue visibility timeout "
        f"{visibility_s} s"
    )
    runs = []
    for mode, threads in runs_asked:
        dp_dir = tmp / f"dataplane-{mode}-{threads}"
        shutil.copytree(dp0, dp_dir)
        runs.append(drain(dp_dir, tmp / f"control-{mode}-{threads}", mode, threads, visibility_s))
    print_throughput(runs, baseline, executions, calls, captured, target)


def run_label(run: DrainRun) -> str:
    return f"{MODES[run.mode]}, {run.threads} thr"


def print_throughput(
    runs: list[DrainRun],
    baseline: tuple[float, float, int],
    executions: int,
    calls: int,
    captured: int,
    target: float,
) -> None:
    widths = [46, 8, 8, 9, 11, 12, 13, 10, 10]
    head = ["run", "wall s", "exec/s", "calls/s", "exec/CPU-s", "calls/CPU-s", "+control CPU",
            "/baseline", "/target"]  # fmt: skip
    print()
    print(fmt_row(head, widths))
    print("-" * sum(widths))
    b_wall, b_cpu, b_exec = baseline
    b_rate = calls * b_exec / executions / b_wall
    for run in runs:
        rate = calls / run.wall_s
        row = [
            run_label(run), f"{run.wall_s:.1f}", f"{executions / run.wall_s:.1f}", f"{rate:.0f}",
            f"{executions / run.cpu_s:.1f}", f"{calls / run.cpu_s:.0f}",
            f"{calls / (run.cpu_s + run.control_cpu_s):.0f}", f"{rate / b_rate:.4f}",
            f"{rate / target:.4f}",
        ]  # fmt: skip
        print(fmt_row(row, widths))
    row = [
        "baseline: gather + project, no writes", f"{b_wall:.1f}", f"{b_exec / b_wall:.1f}",
        f"{b_rate:.0f}", f"{b_exec / b_cpu:.1f}", f"{calls * b_exec / executions / b_cpu:.0f}",
        "-", "1", f"{b_rate / target:.4f}",
    ]  # fmt: skip
    print(fmt_row(row, widths))
    print(
        f"per CPU-s: of the projector process; +control CPU: of the projector and control-plane "
        f"processes; target: {target:,.0f} calls/s (the arrival replay's rate)"
    )
    for run in runs:
        print()
        print(
            f"{run_label(run)}: CPU s projector {run.cpu_s:.1f}, control plane "
            f"{run.control_cpu_s:.1f}; worker stats {run.stats}"
        )
        ok = run.visible == (calls, captured)
        print(
            f"  visible after the drain: {run.visible[0]} calls, {run.visible[1]} calls_v1 rows "
            f"(expected {calls}, {captured}: {'match' if ok else 'MISMATCH'})"
        )
        for problem in run.problems:
            print(f"  problem: {problem}")
        print_phases(run.phases, run.wall_s * run.threads)


def print_phases(phases: Phases, total: float) -> None:
    """Steps by wall time; ``1st/4``, ``4th/4``: mean ms per call over the first and the last
    quarter of the calls (a step that slows down as the datasets grow)."""
    head = f"  {'step (wall s, summed over threads)':<40}{'calls':>8}{'s':>9}{'share':>8}"
    print(head + f"{'ms/call':>9}{'1st/4':>9}{'4th/4':>9}")
    for name, seconds in sorted(phases.seconds.items(), key=lambda kv: -kv[1]):
        n = phases.calls[name]
        first, last = phases.quarters(name)
        print(
            f"  {name:<40}{n:>8}{seconds:>9.2f}{seconds / total:>8.1%}"
            f"{seconds / n * 1000:>9.1f}{first:>9.1f}{last:>9.1f}"
        )


# ------------------------------------------------------------------------------ arrival


@dataclass
class ChildReport:
    index: int
    executions: int
    first_call: float
    last_call: float
    flushed: float
    """``Profiler.flush()`` returned: everything recorded is in the local store."""
    closed: float
    """``Profiler.close()`` returned: the publisher's final flush is done."""
    cpu_s: float
    mismatches: int
    shipped_objects: int
    publish_problems: list[str]
    stats: dict[str, int]


def arrival_child(
    conn: Connection,
    store_root: Path,
    executions: int,
    processes: int,
    index: int,
    url: str,
    token: str,
    concurrency: int,
) -> None:
    """One workload process: the real profiler with its publisher shipping to ``url``; runs its
    share once the parent sends the start time, closes the profiler (final publisher flush)."""
    from baml_studio.profiler import Profiler, ProfilerConfig
    from baml_studio.workload.runner import _drive, share  # the workload's own driver

    try:
        config = ProfilerConfig(store_root=store_root, publish_gateway_url=url, publish_token=token)
        profiler = Profiler(config)
        if profiler.open_error is not None:
            raise profiler.open_error
        conn.send(("ready", None))
        go_at = conn.recv()
        time.sleep(max(0.0, go_at - time.time()))  # both processes start together
        cpu0 = time.process_time()
        profiler.activate()
        ordinals = share(executions, processes, index)
        first = time.time()
        mismatches = asyncio.run(_drive(SEED, ordinals, concurrency))
        last = time.time()
        publisher = profiler.publisher
        profiler.flush(timeout=max(60.0, 0.1 * len(ordinals)))
        flushed = time.time()
        profiler.close(timeout=max(60.0, 0.1 * len(ordinals)))
        closed = time.time()
        problems = [] if publisher is not None else ["the profiler started no publisher"]
        shipped = 0
        if publisher is not None:
            if publisher.last_error is not None:
                problems.append(f"last publisher error: {publisher.last_error}")
            report = publisher.last_report
            if report is None or not report.complete:
                problems.append(
                    f"final flush incomplete: {None if report is None else report.problems}"
                )
            shipped = 0 if report is None else report.objects
        stats = dataclasses.asdict(profiler.stats)
        stats["publish_failures"] = profiler.publish_failures
        conn.send(
            ("ok", ChildReport(index, len(ordinals), first, last, flushed, closed,
                               time.process_time() - cpu0, len(mismatches), shipped, problems,
                               stats))
        )  # fmt: skip
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def plan_for_calls(target: int, processes: int) -> tuple[int, int]:
    """The fewest executions whose planned calls reach ``target``: (executions, calls).
    Execution ``i`` is the same job whatever the count, so one plan gives every prefix."""
    per = total_calls(1000, processes) / 1000
    plan = plan_workload(math.ceil(1.2 * target / per) + 100, processes, SEED)
    running = 0
    for record in plan.executions:
        running += sum(record.calls.values())
        if running >= target:
            return record.ordinal + 1, total_calls(record.ordinal + 1, processes)
    raise SystemExit(f"{len(plan.executions)} executions make fewer than {target} calls")


class ServiceLoop:
    """The projector's service loop (``run_projector``, as ``baml-studio projector`` runs it,
    without sweep and compaction) on a thread of this process; ``projector.worker`` is wrapped
    to keep the workers it makes, so their counters can be read while it runs."""

    def __init__(
        self,
        projector: Projector,
        threads: int,
        wait_s: float = 1.0,
        *,
        processes: int = 1,
        visibility_s: int = 900,
    ) -> None:
        self.workers: list[ProjectorWorker] = []
        self.processes = processes
        self.visibility_s = visibility_s
        self.ready = threading.Event()
        """Set once every process serves (helpers started and their stores open)."""
        self.report: ProcessesReport | None = None
        make = projector.worker

        def worker() -> ProjectorWorker:
            made = make()
            self.workers.append(made)
            return made

        projector.worker = worker  # type: ignore[method-assign]  # reason: keep the workers
        self.stop = threading.Event()
        self.failure: str | None = None
        self.thread = threading.Thread(
            target=self._run, args=(projector, threads, wait_s), daemon=True
        )

    def _run(self, projector: Projector, threads: int, wait_s: float) -> None:
        def run_here() -> LoopReport:
            self.ready.set()
            return run_projector(projector, stop=self.stop, workers=threads, wait_s=wait_s)

        try:
            if self.processes == 1:
                run_here()
            else:  # as ``baml-studio projector --processes N`` runs them
                self.report = run_processes(
                    projector.config,
                    stop=self.stop,
                    processes=self.processes,
                    workers=threads,
                    wait_s=wait_s,
                    run_here=run_here,
                    opener=functools.partial(open_with_visibility, visibility_s=self.visibility_s),
                )
        except Exception as exc:  # reported, never hidden
            self.failure = f"{type(exc).__name__}: {exc}"
            self.ready.set()

    def helpers(self) -> list[int]:
        """The pids of the helper processes now."""
        return [
            p.pid
            for p in multiprocessing.active_children()
            if p.name == HELPER_NAME and p.pid is not None
        ]

    def stats(self) -> dict[str, int]:
        """Every worker's counters: this process's while it runs, every process's once a
        run on several processes has ended."""
        if self.report is not None:
            return dataclasses.asdict(self.report.loop.worker)
        stats: dict[str, int] = {}
        for worker in self.workers:
            for name, value in vars(worker.stats).items():
                stats[name] = stats.get(name, 0) + value
        return stats


def arrival(tmp: Path, args: argparse.Namespace) -> None:
    processes = 2
    executions, calls = plan_for_calls(args.arrival_calls, processes)
    roots = [tmp / f"host-{i}" / ".baml" / "profiles-v1" for i in range(processes)]
    print(
        f"arrival replay: {executions} executions, {calls} calls (seed {SEED}) in {processes} "
        f"processes (own store each), publisher flush every {args.flush_interval} s, "
        f"{args.arrival_threads} projector threads, queue visibility timeout "
        f"{args.visibility_timeout} s, timeout {args.timeout:.0f} s"
    )
    context = multiprocessing.get_context("spawn")
    timeline: list[tuple[float, int, int]] = []
    with (
        dataplane(tmp / "dataplane", flush_interval_s=args.flush_interval) as dp,
        control_plane(tmp / "control") as control,
    ):
        projector = open_worker_side(tmp / "dataplane", control, args.visibility_timeout)
        phases = Phases()
        phases.install(projector)
        warnings = LogCounter().install()
        # --arrival-threads 0: no projector, the ingest side alone (the floor under the goal)
        loop = (
            ServiceLoop(
                projector,
                args.arrival_threads,
                processes=args.arrival_projectors,
                visibility_s=args.visibility_timeout,
            )
            if args.arrival_threads
            else None
        )
        if loop is not None:
            loop.thread.start()
            loop.ready.wait()
        helpers = [] if loop is None else loop.helpers()
        resident = Resident(control.url, control.token)
        children = []
        for index, root in enumerate(roots):
            receiver, sender = context.Pipe(duplex=True)
            child = context.Process(
                target=arrival_child,
                args=(sender, root, executions, processes, index, dp.url, dp.token, 8),
            )
            child.start()
            children.append((child, receiver))
        for _, receiver in children:
            kind, payload = receiver.recv()
            if kind != "ready":
                raise SystemExit(f"a workload process failed:\n{payload}")
        helpers_cpu0 = sum(cpu_seconds(pid) for pid in helpers)
        cpu = {"projector": time.process_time(), "control": cpu_seconds(control.pid),
               "dataplane": cpu_seconds(dp.pid)}  # fmt: skip
        go_at = time.time() + 0.5
        for _, receiver in children:
            receiver.send(go_at)
        reports: dict[int, ChildReport] = {}
        done_at: float | None = None
        deadline = go_at + args.timeout
        while time.time() < deadline:
            for index, (_, receiver) in enumerate(children):
                if index not in reports and receiver.poll():
                    kind, payload = receiver.recv()
                    if kind != "ok":
                        raise SystemExit(f"workload process {index} failed:\n{payload}")
                    reports[index] = payload
            now = time.time()
            seen, seen_captured = resident.counts()
            timeline.append((now, seen, seen_captured))
            if len(timeline) % 30 == 0:  # progress on stderr: the tables go to stdout
                print(f"  {now - go_at:.0f} s: {seen} of {calls} calls", file=sys.stderr)
            if len(reports) == processes and loop is None:
                break
            if seen >= calls and len(reports) == processes:
                done_at = now
                break
            time.sleep(max(0.0, 1.0 - (time.time() - now)))  # poll about once a second
        window = time.time() - go_at
        cpu = {
            "projector": time.process_time()
            - cpu["projector"]
            + sum(cpu_seconds(pid) for pid in helpers)
            - helpers_cpu0,
            "control": cpu_seconds(control.pid) - cpu["control"],
            "dataplane": cpu_seconds(dp.pid) - cpu["dataplane"],
        }
        final = resident.counts()
        resident.close()
        # the figures at the end of the window; threads still inside a message are stopped
        # by ending the services under them (their message is left for a retry)
        stats = {} if loop is None else loop.stats()
        phases_at_end, logged = phases.snapshot(), warnings.snapshot()
        busy = False
        if loop is not None:
            loop.stop.set()
            loop.thread.join(2.0)
            busy = loop.thread.is_alive()
        left = queue_left(projector)
        for index, (child, receiver) in enumerate(children):
            if index not in reports:
                kind, payload = receiver.recv()  # the workload itself always finishes
                if kind != "ok":
                    raise SystemExit(f"workload process {index} failed:\n{payload}")
                reports[index] = payload
            child.join()
    if loop is not None:
        loop.thread.join(120.0)
        if loop.report is not None:  # the helpers' counts arrive when they stop
            stats = loop.stats()
    phases.uninstall()
    warnings.uninstall()
    projector.close()
    problems = [f"{n}x {text}" for text, n in sorted(logged.items())]
    if loop is not None and loop.failure:
        problems.append(f"the service loop failed: {loop.failure}")
    end = Ending(final, stats, problems, left, busy, cpu, window)
    captured = captured_calls(roots)
    print_arrival(args, calls, captured, timeline, reports, done_at, end)
    print_phases(phases_at_end, window * args.arrival_threads)


@dataclass
class Ending:
    """The state at the end of the replay's window."""

    visible: tuple[int, int]
    stats: dict[str, int]
    problems: list[str]
    queued: int
    busy: bool
    """Worker threads were still inside a message when the window ended."""
    cpu: dict[str, float]
    window_s: float
    """Seconds from the go signal to the end of the window (the CPU figures' span)."""


def print_arrival(
    args: argparse.Namespace,
    calls: int,
    captured: int,
    timeline: list[tuple[float, int, int]],
    reports: dict[int, ChildReport],
    done_at: float | None,
    end: Ending,
) -> None:
    first = min(r.first_call for r in reports.values())
    arrival_s = max(r.last_call for r in reports.values()) - first
    accepted_s = max(r.closed for r in reports.values()) - first
    print()
    for r in sorted(reports.values(), key=lambda r: r.index):
        print(
            f"workload process {r.index}: {r.executions} executions, calls from "
            f"{r.first_call - first:+.2f} s to {r.last_call - first:.2f} s, local store "
            f"published at {r.flushed - first:.2f} s, profiler closed (publisher's final flush "
            f"returned) at {r.closed - first:.2f} s, CPU {r.cpu_s:.1f} s, "
            f"mismatches {r.mismatches}, final flush {r.shipped_objects} objects"
            + "".join(f"; problem: {p}" for p in r.publish_problems)
        )
    print(f"{'t s':>8}{'calls visible':>15}{'calls_v1 rows':>15}")
    step = max(1, len(timeline) // 20)
    for i, (t, seen, seen_captured) in enumerate(timeline):
        if i % step == 0 or i == len(timeline) - 1:
            print(f"{t - first:>8.1f}{seen:>15}{seen_captured:>15}")
    print()
    widths = [38, 12, 18, 8]
    asked = args.arrival_seconds
    rows = [
        [f"{calls} calls arrived", f"{arrival_s:.2f}", f"{asked:g} (asked)", arrival_s / asked],
        ["accepted (final flushes shipped)", f"{accepted_s:.2f}", f"{POC_ACCEPT_S}",
         accepted_s / POC_ACCEPT_S],
    ]  # fmt: skip
    last_t, seen, seen_captured = timeline[-1]
    if done_at is not None:
        visible_s = done_at - first
        rows.append(["every call queryable", f"{visible_s:.2f}", f"{POC_VISIBLE_S}",
                     visible_s / POC_VISIBLE_S])  # fmt: skip
        rows.append(["every call queryable vs the goal", f"{visible_s:.2f}", f"{GOAL_S:g} (goal)",
                     visible_s / GOAL_S])  # fmt: skip
    elif args.arrival_threads == 0:
        rows.append(["every call queryable", "no projector", f"{POC_VISIBLE_S}", None])
    else:
        rows.append(["every call queryable", "not reached", f"{POC_VISIBLE_S}", None])
    print(fmt_row(["from the first call", "seconds", "baseline s", "ratio"], widths))
    print("-" * sum(widths))
    for label, seconds, baseline, ratio in rows:
        cells = [str(label), str(seconds), str(baseline), "-" if ratio is None else f"{ratio:.2f}"]
        print(fmt_row(cells, widths))
    if done_at is not None:
        verdict = "met" if done_at - first < GOAL_S else "NOT met"
        print(f"goal: every call queryable in < {GOAL_S:.0f} s: {verdict}")
    elif args.arrival_threads == 0:
        print(
            f"no projector ran (--arrival-threads 0): the profiler, publisher and gateway alone "
            f"took {accepted_s:.2f} s to accept every object, the floor under the {GOAL_S:g} s goal"
        )
    else:
        print(
            f"after {last_t - first:.0f} s (timeout): {seen} of {calls} calls queryable "
            f"({seen / calls:.1%}), {seen_captured} of {captured} calls_v1 rows; goal of "
            f"< {GOAL_S:.0f} s NOT met"
        )
    final = end.visible
    ok = final == (calls, captured)
    print(
        f"visible at the end: {final[0]} calls, {final[1]} calls_v1 rows (workload: {calls} "
        f"calls, local catalog: {captured} calls_v1 rows: {'match' if ok else 'not all visible'})"
    )
    inside = "still inside messages" if end.busy else "idle"
    print(
        f"projector worker stats {end.stats}; {end.queued} messages queued; workers {inside} "
        f"at the end"
    )
    for problem in end.problems:
        print(f"  logged by the projector: {problem}")
    print(
        f"CPU s during the replay: projector {end.cpu['projector']:.1f}, control plane "
        f"{end.cpu['control']:.1f}, data plane {end.cpu['dataplane']:.1f}, workload processes "
        f"{sum(r.cpu_s for r in reports.values()):.1f}"
    )
    # every figure is CPU spent inside the window (the workload's from the go signal to its
    # profiler's close), so the window cannot be shorter than their sum over the cores
    total = sum(end.cpu.values()) + sum(r.cpu_s for r in reports.values())
    cores = os.cpu_count() or 1
    print(
        f"all of it: {total:.1f} CPU s in the {end.window_s:.1f} s window on {cores} cores "
        f"({total / (end.window_s * cores):.0%} busy); at this CPU no run on {cores} cores "
        f"finishes in under {total / cores:.1f} s"
    )


# ------------------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=2000, help="throughput store size")
    parser.add_argument(
        "--runs",
        default="drain:1,loop:2,single:2",
        help="throughput runs, MODE:THREADS with MODE one of " + ", ".join(MODES),
    )
    parser.add_argument(
        "--store-publish-interval",
        type=float,
        default=1.0,
        help="the throughput store's profiler publish interval (s): fewer, larger meta objects "
        "(queue messages) the longer it is",
    )
    parser.add_argument("--arrival-calls", type=int, default=100_000)
    parser.add_argument("--arrival-seconds", type=float, default=2.0)
    parser.add_argument("--flush-interval", type=int, default=1, help="publisher flush (s)")
    parser.add_argument(
        "--arrival-projectors",
        type=int,
        default=1,
        help="projector processes (each with --arrival-threads worker threads)",
    )
    parser.add_argument(
        "--arrival-threads",
        type=int,
        default=2,
        help="projector threads; 0 runs no projector (the ingest side alone)",
    )
    parser.add_argument(
        "--visibility-timeout", type=int, default=900, help="queue visibility timeout (s)"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="arrival replay limit (s)")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-arrival", action="store_true")
    parser.add_argument("--keep", type=Path, help="work under this directory and keep it")
    args = parser.parse_args()
    tune_for_serving()  # the projector runs here: its collector as the CLI's (servergc)
    print(machine())
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        tmp = args.keep.resolve()
    else:
        tmp = Path(tempfile.mkdtemp(prefix="projection-bench-", dir="/tmp"))
    goal = args.arrival_calls / args.arrival_seconds
    try:
        if not args.skip_throughput:
            asked = [(m, int(t)) for m, t in (r.split(":") for r in args.runs.split(","))]
            if any(m not in MODES for m, _ in asked):
                parser.error(f"--runs: modes are {', '.join(MODES)}")
            throughput(
                tmp / "throughput",
                args.executions,
                asked,
                goal,
                args.visibility_timeout,
                args.store_publish_interval,
            )
        if not args.skip_arrival:
            print()
            arrival(tmp / "arrival", args)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
            # the removal frees ~200,000 files: flush it (on a disk mounted with `discard`,
            # its TRIMs) now, so the next run's file creation is not charged for it (seen: a
            # run started within seconds of another's removal took 50-60 s instead of 30-40
            # to accept every object, with the same code)
            os.sync()


if __name__ == "__main__":
    main()
