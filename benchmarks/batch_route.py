"""CPU per projection batch through the control plane's real route, new and repeated.

``serve control`` (SQLite metastore + chDB, uvicorn on 127.0.0.1, its own process) receives the
public batches of ``--executions`` synthetic executions from the projector's own client
(:class:`ControlClient` over its HTTP/1.1 client, 512 in flight as the projector sends), sent by
``--threads`` threads in slices of 256 executions as projector workers send them. Each execution
has the batch mix the arrival replay sends (rows per execution as measured there: ``threads_v1`` 3,
``call_path_stats_v1`` 6, ``calls_v1`` 4, ``function_definitions_v1`` 16, ``health_v1`` 31,
and ``errors_v1`` 1 in every 20th execution).

*Baseline* (same run): the same batches sent again, which the control plane answers 200 from its
ledger cache without writing: the cost of the HTTP route and the batch checks alone. The
difference is what writing a batch costs (the coalesced ledger lookup, intents, one insert per
relation, ledger rows, ClickHouse's merges).

    .venv/bin/python benchmarks/batch_route.py                     # 2,000 executions, 2 threads
    .venv/bin/python benchmarks/batch_route.py --executions 4000 --runs 3

Figures are CPU seconds of the control plane's process (``/proc/<pid>/stat``, every thread,
ClickHouse's included) and of this process (the client, which also encodes the batches), per
batch. Recorded in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from baml_studio.control.schemas import registered_schema
from baml_studio.projector.control_client import ControlClient
from baml_studio.projector.project import PublicBatch, batch_id
from projection_rig import SCOPE, Service, control_plane, cpu_seconds

ROWS = {
    "threads_v1": 3,
    "call_path_stats_v1": 6,
    "calls_v1": 4,
    "function_definitions_v1": 16,
    "health_v1": 31,
}
ERRORS_EVERY = 20
SLICE = 256
CONCURRENCY = 512
EPOCH = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def _value(field: pa.Field, root: str, i: int) -> Any:
    kind = field.type
    if field.name == "execution_id":
        return root
    if pa.types.is_string(kind):
        return f"{field.name}-{root}-{i}"
    if pa.types.is_list(kind):
        return [f"{field.name}-{i}"] if i % 2 else []
    if pa.types.is_boolean(kind):
        return i % 2 == 0
    if pa.types.is_timestamp(kind):
        return EPOCH + dt.timedelta(microseconds=i)
    if pa.types.is_binary(kind):
        return root.encode()
    return i


def _table(relation: str, root: str, rows: int) -> pa.Table:
    schema = registered_schema(relation)
    columns = {f.name: [_value(f, root, i) for i in range(rows)] for f in schema}
    return pa.Table.from_pydict(columns, schema=schema)


def execution_batches(index: int) -> list[PublicBatch]:
    root = f"exec_{index:08d}"
    counts = dict(ROWS)
    if index % ERRORS_EVERY == 0:
        counts["errors_v1"] = 1
    return [
        PublicBatch(relation, 0, batch_id(root, relation, 0), root, _table(relation, root, n))
        for relation, n in counts.items()
    ]


@dataclass
class Pass:
    batches: int
    wall_s: float
    server_cpu_s: float
    client_cpu_s: float
    states: dict[str, int]


def send_all(
    control: Service, slices: list[list[PublicBatch]], threads: int, concurrency: int
) -> Pass:
    client = ControlClient(control.url, control.token, max_connections=concurrency)
    generation = client.active_generation(SCOPE, "v1")
    todo = list(slices)
    lock = threading.Lock()
    states: dict[str, int] = {}
    failures: list[BaseException] = []

    def worker() -> None:
        while True:
            with lock:
                if not todo or failures:
                    return
                part = todo.pop(0)
            try:
                acks = client.put_batches(SCOPE, generation, part, concurrency=concurrency)
            except BaseException as exc:  # reported below, never hidden
                with lock:
                    failures.append(exc)
                return
            with lock:
                for ack in acks:
                    key = "created" if ack.created else "existing"
                    states[key] = states.get(key, 0) + 1

    server0, client0, wall0 = cpu_seconds(control.pid), time.process_time(), time.perf_counter()
    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    wall = time.perf_counter() - wall0
    server, client_cpu = cpu_seconds(control.pid) - server0, time.process_time() - client0
    client.close()
    if failures:
        raise SystemExit(f"a batch failed: {type(failures[0]).__name__}: {failures[0]}")
    total = sum(len(s) for s in slices)
    return Pass(total, wall, server, client_cpu, states)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2, help="sending threads (workers)")
    parser.add_argument(
        "--concurrency", type=int, default=CONCURRENCY, help="batches in flight (connections)"
    )
    parser.add_argument("--runs", type=int, default=1, help="fresh control planes, one by one")
    parser.add_argument(
        "--tmp", type=Path, default=Path("/tmp"), help="where the control plane's data dir goes"
    )
    args = parser.parse_args()
    batches = [execution_batches(i) for i in range(args.executions)]
    slices = [
        [b for execution in batches[i : i + SLICE] for b in execution]
        for i in range(0, len(batches), SLICE)
    ]
    total = sum(len(s) for s in slices)
    print(
        f"{args.executions} executions, {total} batches, {args.threads} sending threads, "
        f"{args.concurrency} in flight; data under {args.tmp}; "
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}"
    )
    header = (
        f"{'run':>4} {'pass':<26}{'batches/s':>10}{'server ms/batch':>17}"
        f"{'client ms/batch':>17}{'server vs baseline':>20}  answers"
    )
    print(header)
    print("-" * len(header))
    for run in range(1, args.runs + 1):
        tmp = Path(tempfile.mkdtemp(prefix="batch-route-", dir=args.tmp))
        try:
            with control_plane(tmp / "control") as control:
                new = send_all(control, slices, args.threads, args.concurrency)
                repeat = send_all(control, slices, args.threads, args.concurrency)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if new.states.get("created") != total or repeat.states.get("existing") != total:
            raise SystemExit(f"unexpected answers: new {new.states}, repeated {repeat.states}")
        base = repeat.server_cpu_s / repeat.batches
        for label, p in (("new (written)", new), ("baseline: repeated (200)", repeat)):
            per = p.server_cpu_s / p.batches
            print(
                f"{run:>4} {label:<26}{p.batches / p.wall_s:>10.0f}{per * 1e3:>17.3f}"
                f"{p.client_cpu_s / p.batches * 1e3:>17.3f}{per / base:>20.2f}  {p.states}"
            )


if __name__ == "__main__":
    main()
