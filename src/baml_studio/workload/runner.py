"""Drive the synthetic workload through the real profiler, in one or several processes.

:func:`plan_workload` is pure: it says what ``(executions, processes, seed)`` generates, as a
:class:`WorkloadReport`. :func:`run_workload` runs exactly that: process ``i`` of ``P`` runs the
contiguous share :func:`share` of the ordinals under its own :class:`~baml_studio.profiler.Profiler`
(one stream each, all in the same store root), a few executions at a time on one event loop. Every
execution's observed status and escaping error are checked against the plan; a difference is a
bug in the workload and raises :class:`WorkloadMismatch`.

Errors::

    BamlStudioError
    └── WorkloadError
        ├── InvalidWorkload          bad arguments (a negative count, zero processes ...)
        ├── WorkloadProcessFailed    a worker process crashed, timed out or could not profile
        └── WorkloadMismatch         an execution did not end as planned
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
import multiprocessing
import os
import time
import traceback
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from baml_studio.format.errors import BamlStudioError
from baml_studio.profiler import Profiler, ProfilerConfig, active
from baml_studio.workload.data import (
    Job,
    Scalar,
    arguments,
    expect,
    large_values,
    make_job,
    provider_for,
    start_root,
)
from baml_studio.workload.program import PROVIDER, qualified_name

DEFAULT_CONCURRENCY = 8
DEFAULT_TIMEOUT_S = 600.0


class WorkloadError(BamlStudioError):
    """The workload could not be run as asked."""


class InvalidWorkload(WorkloadError):
    """Arguments out of range; the message names the value and the valid range."""


class WorkloadProcessFailed(WorkloadError):
    """A worker process crashed, timed out, or could not open the store."""


class WorkloadMismatch(WorkloadError):
    """Executions that did not end as the plan says (a workload bug)."""


@dataclass(frozen=True, slots=True)
class ExecutionRecord:
    """One planned execution: who runs it, what it is called with, and how it must end."""

    ordinal: int
    process: int
    request_id: str
    root_function: str
    variant: str
    status: str
    """The status the execution must end with: ``succeeded``, ``failed`` or ``cancelled``."""
    error_type: str | None
    error_message: str | None
    arguments: Mapping[str, Scalar]
    calls: Mapping[str, int]
    large_values: int


@dataclass(frozen=True, slots=True)
class WorkloadReport:
    """What a workload generates; equal for equal ``(executions, processes, seed)``."""

    processes: int
    seed: int
    executions: tuple[ExecutionRecord, ...]
    """In ordinal order."""

    @property
    def executions_by_status(self) -> dict[str, int]:
        return dict(sorted(Counter(e.status for e in self.executions).items()))

    @property
    def calls_by_function(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for execution in self.executions:
            total.update(execution.calls)
        return dict(sorted(total.items()))

    @property
    def executions_by_root(self) -> dict[str, int]:
        return dict(sorted(Counter(e.root_function for e in self.executions).items()))

    @property
    def large_values(self) -> int:
        return sum(e.large_values for e in self.executions)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-serialisable data (``json.dumps`` it, or use ``to_json_text``)."""
        return {
            "executions": [
                {**dataclasses.asdict(e), "arguments": dict(e.arguments), "calls": dict(e.calls)}
                for e in self.executions
            ],
            "processes": self.processes,
            "seed": self.seed,
            "totals": {
                "executions": len(self.executions),
                "by_status": self.executions_by_status,
                "by_root": self.executions_by_root,
                "calls_by_function": self.calls_by_function,
                "large_values": self.large_values,
            },
        }

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, indent=2, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class ProcessResult:
    index: int
    pid: int
    executions: int
    elapsed_s: float
    """From the first execution to the profiler closed."""
    close_s: float
    """Of which closing the profiler (publishing whatever was still pending)."""
    stats: Mapping[str, int]
    """The process's :class:`~baml_studio.profiler.ProfilerStats` after close."""
    mismatches: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WorkloadRun:
    report: WorkloadReport
    elapsed_s: float
    processes: tuple[ProcessResult, ...]

    @property
    def stats(self) -> dict[str, int]:
        """Profiler counters summed over the processes."""
        total: Counter[str] = Counter()
        for result in self.processes:
            total.update(result.stats)
        return dict(sorted(total.items()))


def share(executions: int, processes: int, index: int) -> range:
    """The ordinals process ``index`` runs: contiguous, sizes differing by at most one."""
    return range(executions * index // processes, executions * (index + 1) // processes)


def _validate(executions: int, processes: int, concurrency: int = 1) -> None:
    if executions < 0:
        raise InvalidWorkload(f"executions must be 0 or more, got {executions}")
    if processes < 1:
        raise InvalidWorkload(f"processes must be 1 or more, got {processes}")
    if concurrency < 1:
        raise InvalidWorkload(f"concurrency must be 1 or more, got {concurrency}")


def record_for(job: Job, variant: str, ordinal: int, process: int) -> ExecutionRecord:
    outcome = expect(job)
    return ExecutionRecord(
        ordinal, process, job.request_id, job.root, variant, outcome.status,
        outcome.error_type, outcome.error_message, arguments(job),
        dict(sorted(outcome.calls.items())), large_values(job),
    )  # fmt: skip


def plan_workload(executions: int, processes: int = 1, seed: int = 0) -> WorkloadReport:
    """The report of a workload, without running it."""
    _validate(executions, processes)
    records = []
    for index in range(processes):
        for ordinal in share(executions, processes, index):
            variant, job = make_job(seed, ordinal)
            records.append(record_for(job, variant.value, ordinal, index))
    return WorkloadReport(processes, seed, tuple(records))


def run_workload(
    store_root: Path,
    executions: int,
    processes: int = 1,
    seed: int = 0,
    publish_interval_s: float = 1.0,
) -> WorkloadReport:
    """Run the workload into ``store_root`` (a ``profiles-v1`` directory) and return its report.

    Example::

        report = run_workload(Path(".baml/profiles-v1"), executions=1000, processes=2)
        print(report.executions_by_status)
    """
    return execute_workload(store_root, executions, processes, seed, publish_interval_s).report


def execute_workload(
    store_root: Path,
    executions: int,
    processes: int = 1,
    seed: int = 0,
    publish_interval_s: float = 1.0,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> WorkloadRun:
    """:func:`run_workload`, also returning timings and profiler counters.

    With ``processes == 1`` the workload runs in this process (which must have no active
    profiler); otherwise in ``processes`` fresh ("spawn") worker processes.
    """
    _validate(executions, processes, concurrency)
    report = plan_workload(executions, processes, seed)
    started = time.perf_counter()
    args = (Path(store_root), seed, executions, processes, publish_interval_s, concurrency)
    results: tuple[ProcessResult, ...] = (
        (run_share(*args, 0),) if processes == 1 else _run_children(args, timeout_s)
    )
    elapsed = time.perf_counter() - started
    mismatches = [m for result in results for m in result.mismatches]
    if mismatches:
        raise WorkloadMismatch(
            f"{len(mismatches)} executions did not end as planned: " + "; ".join(mismatches[:5])
        )
    return WorkloadRun(report, elapsed, results)


def run_share(
    store_root: Path,
    seed: int,
    executions: int,
    processes: int,
    publish_interval_s: float,
    concurrency: int,
    index: int,
) -> ProcessResult:
    """Run process ``index``'s share in this process, under a new profiler, and close it."""
    if active() is not None:
        raise WorkloadError(
            "a profiler is already active in this process; close it first, or run with "
            "processes > 1"
        )
    config = ProfilerConfig(store_root=store_root, publish_interval_s=publish_interval_s)
    profiler = Profiler(config)
    if profiler.open_error is not None:
        profiler.close()
        raise WorkloadProcessFailed(
            f"process {index} cannot open the store at {store_root}: {profiler.open_error}"
        ) from profiler.open_error
    ordinals = share(executions, processes, index)
    started = time.perf_counter()
    profiler.activate()
    try:
        mismatches = asyncio.run(_drive(seed, ordinals, concurrency))
    finally:
        closing = time.perf_counter()
        # Publishing dominates a run (a CAS file per captured value), so allow for it.
        profiler.close(timeout=max(60.0, 0.1 * len(ordinals)))
    ended = time.perf_counter()
    return ProcessResult(
        index, os.getpid(), len(ordinals), ended - started, ended - closing,
        dataclasses.asdict(profiler.stats), tuple(mismatches),
    )  # fmt: skip


async def _drive(seed: int, ordinals: range, concurrency: int) -> list[str]:
    pending = iter(ordinals)
    mismatches: list[str] = []

    async def worker() -> None:
        for ordinal in pending:
            variant, job = make_job(seed, ordinal)
            observed = await _run_job(job)
            planned = expect(job)
            if observed != (planned.status, planned.error_type, planned.error_message):
                mismatches.append(
                    f"execution {ordinal} ({job.root}, {variant.value}) planned "
                    f"{planned.status} {planned.error_type or ''}, observed {observed}"
                )

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return mismatches


async def _run_job(job: Job) -> tuple[str, str | None, str | None]:
    """Run one execution as its own task; a stalled root is cancelled (its deadline passed)."""
    provider = provider_for(job)
    context = contextvars.copy_context()
    context.run(PROVIDER.set, provider)
    loop = asyncio.get_running_loop()
    task = loop.create_task(start_root(job), name=f"{job.root} {job.request_id}", context=context)
    await provider.settle([task])
    if task.cancelled():
        return "cancelled", None, None
    error = task.exception()
    if error is not None:
        return "failed", qualified_name(type(error)), str(error)
    return "succeeded", None, None


def _run_children(args: tuple[Any, ...], timeout_s: float) -> tuple[ProcessResult, ...]:
    processes = args[3]
    context = multiprocessing.get_context("spawn")
    children = []
    for index in range(processes):
        receiver, sender = context.Pipe(duplex=False)
        child = context.Process(
            target=_child_main, args=(sender, *args, index), name=f"baml-workload-{index}"
        )
        child.start()
        sender.close()
        children.append((child, receiver))
    deadline = time.monotonic() + timeout_s
    try:
        return tuple(
            _receive(index, child, receiver, deadline)
            for index, (child, receiver) in enumerate(children)
        )
    finally:
        for child, receiver in children:
            receiver.close()
            child.join(timeout=max(0.0, deadline - time.monotonic()))
            if child.is_alive():
                child.terminate()
                child.join()


def _receive(index: int, child: Any, receiver: Connection, deadline: float) -> ProcessResult:
    if not receiver.poll(max(0.0, deadline - time.monotonic())):
        raise WorkloadProcessFailed(f"worker process {index} did not finish in time")
    try:
        kind, payload = receiver.recv()
    except EOFError:
        child.join()
        raise WorkloadProcessFailed(
            f"worker process {index} exited with code {child.exitcode} before reporting"
        ) from None
    if kind != "ok":
        raise WorkloadProcessFailed(f"worker process {index} failed:\n{payload}")
    result: ProcessResult = payload
    return result


def _child_main(sender: Connection, *args: Any) -> None:
    """Entry point of a spawned worker: run one share and send back its result."""
    try:
        sender.send(("ok", run_share(*args)))
    except BaseException:
        sender.send(("error", traceback.format_exc()))
    finally:
        sender.close()
