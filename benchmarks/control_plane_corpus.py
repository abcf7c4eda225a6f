"""Synthetic public call facts for ``benchmarks/control_plane.py`` (seeded, vectorised).

A corpus is ``calls`` rows of ``calls_v1`` (the registered public schema) grouped into
executions of about 50 calls, plus one root ``threads_v1`` row per execution:

* 50 functions with Zipf-like popularity (s = 1.1); a call's function is one of 5 entry
  functions at position 0 (the root call), else drawn by popularity;
* durations log-normal per function (LLM functions: median 0.4–3 s, others 0.1–40 ms,
  sigma 0.6–1.2); a root call spans its children;
* executions start uniformly over 7 days ending at :data:`CORPUS_END`; calls of an execution
  follow each other with overlap; ``started_ns`` counts from the process zero (one process
  per ~150 executions), ``started_at`` is wall-clock;
* statuses 96.5 % ok, 2.8 % errored, 0.5 % cancelled, 0.2 % exited; value states mostly
  ``available`` with ``bamlv_1_`` + 64-hex CIDs, else ``lost:…``, ``not_captured`` or
  ``not_applicable``; thread and call ids in the real wire format (58 and 67 characters).

:func:`worker_load` (run in a child process: chDB opens one path per process) provisions a
control plane and calls :func:`bulk_load`, which writes the corpus **through the fact-store
layer's client, not the HTTP path**: 500,000-row Arrow inserts into the relation tables with
the internal columns filled the way ``FactStore.put_batch`` fills them (scope, generation,
``_root_id`` = execution id, ``_batch_id`` = ``<root>.<relation>.0``, ``_row`` = position in
the batch) and the store's insert settings. No ledger rows
are written: resident queries do not read the ledger.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zstandard

from baml_studio.control.config import ControlConfig
from baml_studio.control.schemas import registered_schema
from baml_studio.gateway.config import Scope

SCOPE_A = Scope("tn_a", "prj_a", "prod")
SCOPE_B = Scope("tn_b", "prj_b", "prod")
SCOPE_I = Scope("tn_i", "prj_i", "prod")
DEPLOYMENTS = {SCOPE_A: "dep_a", SCOPE_B: "dep_b", SCOPE_I: "dep_i"}
GENERATION = "gen_1"
MANIFEST = "bench-corpus.json"
LOAD_CHUNK = 500_000
"""Rows per bulk insert."""
CORPUS_END = np.datetime64("2026-11-30T00:00:00", "ns").astype(np.int64).item()
"""Wall-clock end of every corpus (ns since the epoch)."""
DAY_NS = 86_400 * 10**9
SPAN_NS = 7 * DAY_NS
CALLS_PER_EXECUTION = 50
EXECUTIONS_PER_PROCESS = 150
SPAWN_SHARE = 0.08
STATUSES = ("ok", "errored", "cancelled", "exited")
STATUS_P = (0.965, 0.028, 0.005, 0.002)

_MODULES = {
    "invoices": "Invoice",
    "support": "Ticket",
    "search": "Query",
    "agents": "Step",
    "billing": "Account",
}
_LLM = ("Extract", "Classify", "Summarize", "Answer", "Rank")
_HELPERS = ("Normalize", "Validate", "Lookup", "Render", "Merge")
_ENTRIES = (
    "agents.RunAgent",
    "invoices.ProcessInvoice",
    "support.HandleTicket",
    "search.RunSearch",
    "billing.ReconcileAccount",
)


@dataclass(frozen=True)
class Functions:
    fqn: pa.Array
    kind: pa.Array
    definition_key: pa.Array
    call_path: pa.Array
    """64-hex call path id per (function, parent) pair: index ``fn * (n + 1) + parent``, where
    parent is 0 for a root call, else the parent's function index + 1."""
    llm: np.ndarray
    log_median: np.ndarray
    sigma: np.ndarray
    popularity: np.ndarray
    entries: np.ndarray


def functions(seed: int = 7) -> Functions:
    rng = np.random.default_rng(seed)
    names = list(_ENTRIES)
    for verb in (*_LLM, *_HELPERS):
        for module, noun in _MODULES.items():
            if len(names) < 50:
                names.append(f"{module}.{verb}{noun}")
    n = len(names)
    llm = np.array([any(v in name for v in _LLM) for name in names])
    median_ns = np.where(
        llm, rng.uniform(0.4e9, 3e9, n), np.exp(rng.uniform(np.log(1e5), np.log(4e7), n))
    )
    ranked = 1.0 / np.arange(1, n - len(_ENTRIES) + 1) ** 1.1
    popularity = np.concatenate([np.zeros(len(_ENTRIES)), rng.permutation(ranked)])
    kinds = ["bytecode" if i % 7 else "native" for i in range(n)]
    keys = [f"{name}#{rng.bytes(8).hex()}" for name in names]
    return Functions(
        fqn=pa.array(names),
        kind=pa.array(kinds),
        definition_key=pa.array(keys),
        call_path=hex_strings(rng.bytes(32 * n * (n + 1)), n * (n + 1)),
        llm=llm,
        log_median=np.log(median_ns),
        sigma=rng.uniform(0.6, 1.2, n),
        popularity=popularity / popularity.sum(),
        entries=np.arange(len(_ENTRIES)),
    )


# ------------------------------------------------------------------------------ strings


def fixed_width(chars: np.ndarray) -> pa.Array:
    """A string array from an ``(n, width)`` uint8 matrix of ASCII characters."""
    n, width = chars.shape
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    data = np.ascontiguousarray(chars).tobytes()
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data))


def wire_ids(prefix: str, raw: np.ndarray) -> pa.Array:
    """``prefix`` + base64url-nopad of each row of ``raw`` (``(n, k)`` uint8)."""
    n, k = raw.shape
    pad = -k % 3
    if pad:
        raw = np.concatenate([raw, np.zeros((n, pad), np.uint8)], axis=1)
    encoded = np.frombuffer(base64.urlsafe_b64encode(raw.tobytes()), np.uint8).reshape(n, -1)
    width = (4 * k + 2) // 3
    head = np.frombuffer(prefix.encode(), np.uint8)
    out = np.empty((n, len(head) + width), np.uint8)
    out[:, : len(head)] = head
    out[:, len(head) :] = encoded[:, :width]
    return fixed_width(out)


def hex_strings(raw: bytes, n: int, prefix: str = "") -> pa.Array:
    """``prefix`` + lowercase hex of each of ``n`` equal slices of ``raw``."""
    digits = np.frombuffer(raw.hex().encode(), np.uint8).reshape(n, -1)
    head = np.frombuffer(prefix.encode(), np.uint8)
    out = np.empty((n, len(head) + digits.shape[1]), np.uint8)
    out[:, : len(head)] = head
    out[:, len(head) :] = digits
    return fixed_width(out)


def be_bytes(values: np.ndarray) -> np.ndarray:
    """``(n, 8)`` big-endian bytes of uint64 ``values``."""
    return values.astype(">u8").view(np.uint8).reshape(-1, 8)


def masked(values: pa.Array, valid: np.ndarray) -> pa.Array:
    return pc.if_else(pa.array(valid), values, pa.scalar(None, values.type))


def lists(options: list[list[str]], index: np.ndarray) -> pa.Array:
    return pa.array(options, pa.list_(pa.field("item", pa.string(), nullable=False))).take(
        pa.array(index)
    )


def states(rng: np.random.Generator, n: int, choices: list[tuple[str, float]]) -> np.ndarray:
    p = np.array([w for _, w in choices])
    return rng.choice(len(choices), n, p=p / p.sum())


# ------------------------------------------------------------------------------ corpus


@dataclass(frozen=True)
class Corpus:
    """Per-execution draws of one tenant's corpus; rows are built chunk by chunk."""

    seed: int
    counts: np.ndarray
    """Calls per execution; sums to the corpus size."""
    start_wall: np.ndarray
    process: np.ndarray
    entry: np.ndarray
    thread_raw: np.ndarray
    """``(E, 33)`` wire bytes of each execution's root thread id."""
    execution_ids: pa.Array
    process_zero: np.ndarray
    process_ids: pa.Array
    runtime_ids: list[list[str]]
    """Per process ``[runtime wire id]``, then ``[]`` last."""
    fns: Functions

    @property
    def calls(self) -> int:
        return int(self.counts.sum())

    @property
    def executions(self) -> int:
        return len(self.counts)


def plan(
    calls: int, seed: int, per_execution: int = CALLS_PER_EXECUTION, *, exact: bool = False
) -> Corpus:
    """A corpus of exactly ``calls`` calls in about ``calls / per_execution`` executions
    (1 + Poisson per execution; with ``exact``, exactly ``per_execution`` each)."""
    rng = np.random.default_rng(seed)
    executions = max(1, round(calls / per_execution))
    if exact:
        counts = np.full(executions, per_execution, np.int64)
    else:
        counts = 1 + rng.poisson(per_execution - 1, executions)
        _adjust(rng, counts, calls)
    processes = max(1, executions // EXECUTIONS_PER_PROCESS)
    process = rng.integers(0, processes, executions)
    start_wall = CORPUS_END - SPAN_NS + rng.integers(0, SPAN_NS - 3600 * 10**9, executions)
    process_zero = np.full(processes, CORPUS_END, np.int64)
    np.minimum.at(process_zero, process, start_wall)
    process_zero -= rng.integers(10**9, 60 * 10**9, processes)
    rank = np.empty(executions, np.int64)
    order = np.argsort(process, kind="stable")
    first = np.searchsorted(process[order], process[order])
    rank[order] = np.arange(executions) - first
    euids = np.frombuffer(rng.bytes(16 * processes), np.uint8).reshape(processes, 16)
    thread_raw = np.concatenate(
        [
            np.ones((executions, 1), np.uint8),
            euids[process],
            be_bytes(np.zeros(executions, np.uint64)),
            be_bytes((rank + 1).astype(np.uint64)),
        ],
        axis=1,
    )
    runtime = wire_ids(
        "baml_id_1_", np.frombuffer(rng.bytes(16 * processes), np.uint8).reshape(-1, 16)
    )
    fns = functions()
    entry = rng.choice(fns.entries, executions, p=[0.4, 0.25, 0.15, 0.12, 0.08])
    return Corpus(
        seed=seed,
        counts=counts,
        start_wall=start_wall,
        process=process,
        entry=entry,
        thread_raw=thread_raw,
        execution_ids=wire_ids("baml_thread_1_", thread_raw),
        process_zero=process_zero,
        process_ids=hex_strings(euids.tobytes(), processes),
        runtime_ids=[[r] for r in runtime.to_pylist()] + [[]],
        fns=fns,
    )


def _adjust(rng: np.random.Generator, counts: np.ndarray, total: int) -> None:
    """Add or remove single calls at random executions until ``counts`` sums to ``total``."""
    while (diff := total - int(counts.sum())) != 0:
        if diff > 0:
            np.add.at(counts, rng.integers(0, len(counts), diff), 1)
        else:
            candidates = np.flatnonzero(counts > 1)
            picked = rng.choice(candidates, min(-diff, len(candidates)), replace=False)
            counts[picked] -= 1


def chunk_bounds(corpus: Corpus, rows: int) -> Iterator[tuple[int, int]]:
    """Execution ranges ``[e0, e1)`` of about ``rows`` calls each."""
    ends = np.cumsum(corpus.counts)
    e0 = 0
    while e0 < corpus.executions:
        base = ends[e0 - 1] if e0 else 0
        e1 = int(np.searchsorted(ends, base + rows, side="right"))
        e1 = max(e1, e0 + 1)
        yield e0, min(e1, corpus.executions)
        e0 = e1


def build_chunk(corpus: Corpus, e0: int, e1: int) -> tuple[pa.Table, pa.Table]:
    """``(calls_v1 rows, threads_v1 root rows)`` of executions ``[e0, e1)``, in execution
    order, each with its relation's registered schema."""
    fns = corpus.fns
    rng = np.random.default_rng([corpus.seed, e0])
    counts = corpus.counts[e0:e1]
    n = int(counts.sum())
    seg = np.concatenate([[0], np.cumsum(counts)[:-1]])
    ex = np.repeat(np.arange(e0, e1), counts)
    pos = np.arange(n) - np.repeat(seg, counts)
    root = pos == 0

    fn = np.where(root, corpus.entry[ex], rng.choice(len(fns.popularity), n, p=fns.popularity))
    duration = np.exp(rng.normal(fns.log_median[fn], fns.sigma[fn])).astype(np.int64) + 1000
    gap = np.where(root, 0, (duration * rng.uniform(0.1, 1.0, n)).astype(np.int64))
    exclusive = np.cumsum(gap) - gap
    offset = exclusive - np.repeat(exclusive[seg], counts) + np.where(root, 0, 2_000_000)
    started = corpus.start_wall[ex] + offset
    ended = started + duration
    last_end = np.maximum.reduceat(ended, seg) + 1_000_000
    ended = np.where(root, np.repeat(last_end, counts), ended)
    duration = ended - started

    status = rng.choice(len(STATUSES), n, p=STATUS_P)
    spawned = ~root & (rng.random(n) < SPAWN_SHARE)
    thread_raw = corpus.thread_raw[ex].copy()
    spawned_thread = thread_raw[spawned, 25:].copy().view(">u8").ravel()
    thread_raw[spawned, 25:] = be_bytes(spawned_thread + np.uint64(1 << 32))
    thread_ids = wire_ids("baml_thread_1_", thread_raw)
    call_ids = wire_ids("baml_call_1_", np.concatenate([thread_raw, be_bytes(pos + 1)], axis=1))
    parent_pos = np.maximum(pos - 1, 0) // 3
    parent_idx = np.repeat(seg, counts) + parent_pos
    parent_raw = np.concatenate(
        [thread_raw[parent_idx], be_bytes((parent_pos + 1).astype(np.uint64))], axis=1
    )
    parent_ids = masked(wire_ids("baml_call_1_", parent_raw), ~root)
    parent_fn = np.where(root, 0, fn[parent_idx] + 1)

    ok, errored = status == 0, status == 1
    args_state = states(
        rng,
        n,
        [
            ("available", 95),
            ("not_captured", 3),
            ("lost:value_memory_exceeded", 1.5),
            ("lost:value_too_large", 0.5),
        ],
    )
    out_state = np.where(
        ok,
        states(rng, n, [("available", 96), ("lost:value_memory_exceeded", 2), ("not_captured", 2)]),
        3,
    )
    err_state = np.where(
        errored, states(rng, n, [("available", 90), ("lost:value_memory_exceeded", 10)]), 2
    )
    state_names = pa.array(
        ["available", "lost:value_memory_exceeded", "not_captured", "not_applicable"]
    )
    args_names = pa.array(
        ["available", "not_captured", "lost:value_memory_exceeded", "lost:value_too_large"]
    )
    out_names = pa.array(
        ["available", "lost:value_memory_exceeded", "not_captured", "not_applicable"]
    )
    reasons = np.where(root, 0, np.where(fns.llm[fn], 1, 2))
    roles = np.select([ok, errored], [0, 1], 2)
    has_runtime = rng.random(n) < 0.3
    runtime = np.where(has_runtime, corpus.process[ex], len(corpus.runtime_ids) - 1)
    execution_ids = corpus.execution_ids.take(pa.array(ex))
    error_ids = pc.binary_join_element_wise(thread_ids, pa.scalar("1"), "#")
    cid = "bamlv_1_"

    columns: dict[str, pa.Array] = {
        "execution_id": execution_ids,
        "call_id": call_ids,
        "parent_call_id": parent_ids,
        "thread_id": thread_ids,
        "call_path_id": fns.call_path.take(pa.array(fn * (len(fns.fqn) + 1) + parent_fn)),
        "call_path_overflow_reason": pa.nulls(n, pa.string()),
        "function_id": pa.array((fn + 1).astype(np.uint32)),
        "fqn": fns.fqn.take(pa.array(fn)),
        "definition_key": fns.definition_key.take(pa.array(fn)),
        "kind": fns.kind.take(pa.array(fn)),
        "edge_kind": pa.array(["call", "root", "spawn"]).take(
            pa.array(np.where(root, 1, np.where(spawned & (rng.random(n) < 0.2), 2, 0)))
        ),
        "started_ns": pa.array(
            (started - corpus.process_zero[corpus.process[ex]]).astype(np.uint64)
        ),
        "ended_ns": pa.array((ended - corpus.process_zero[corpus.process[ex]]).astype(np.uint64)),
        "duration_ns": pa.array(duration.astype(np.uint64)),
        "started_at": pa.array(started, pa.timestamp("ns", tz="UTC")),
        "ended_at": pa.array(ended, pa.timestamp("ns", tz="UTC")),
        "status": pa.array(STATUSES).take(pa.array(status)),
        "selection_reasons": lists([["root"], ["llm"], ["manual"]], reasons),
        "roles": lists([["input", "output"], ["input", "error"], ["input"]], roles),
        "runtime_ids": lists(corpus.runtime_ids, runtime),
        "args_state": args_names.take(pa.array(args_state)),
        "output_state": out_names.take(pa.array(out_state)),
        "error_state": state_names.take(pa.array(np.where(err_state == 2, 3, err_state))),
        "args_cid": masked(hex_strings(rng.bytes(32 * n), n, cid), args_state == 0),
        "output_cid": masked(hex_strings(rng.bytes(32 * n), n, cid), out_state == 0),
        "error_cid": masked(hex_strings(rng.bytes(32 * n), n, cid), errored & (err_state == 0)),
        "error_id": masked(error_ids, errored),
        "error_lost_reason": masked(pa.repeat(pa.scalar("budget"), n), errored & (err_state == 1)),
    }
    calls = _table("calls_v1", columns)
    threads = _threads(corpus, e0, e1, seg, counts, started, ended, status, spawned, args_state)
    return calls, threads


def _threads(
    corpus: Corpus,
    e0: int,
    e1: int,
    seg: np.ndarray,
    counts: np.ndarray,
    started: np.ndarray,
    ended: np.ndarray,
    status: np.ndarray,
    spawned: np.ndarray,
    args_state: np.ndarray,
) -> pa.Table:
    e = np.arange(e0, e1)
    m = len(e)
    process = corpus.process[e]
    zero = corpus.process_zero[process]
    root_status = status[seg]
    errors = np.add.reduceat((status == 1).astype(np.int64), seg)
    cancelled = np.add.reduceat((status == 2).astype(np.int64), seg)
    threads_total = 1 + (np.add.reduceat(spawned.astype(np.int64), seg) > 0)
    complete = np.add.reduceat((args_state != 0).astype(np.int64), seg) == 0
    fns = corpus.fns
    entry = corpus.entry[e]
    programs = hex_strings(np.random.default_rng(corpus.seed).bytes(16 * 20), 20)
    u64 = pa.uint64()
    columns: dict[str, pa.Array] = {
        "execution_id": corpus.execution_ids.slice(e0, m),
        "thread_id": corpus.execution_ids.slice(e0, m),
        "parent_thread_id": pa.nulls(m, pa.string()),
        "spawn_call_id": pa.nulls(m, pa.string()),
        "spawn_function_id": pa.nulls(m, pa.uint32()),
        "spawn_fqn": pa.nulls(m, pa.string()),
        "kind": pa.repeat(pa.scalar("root"), m),
        "started_ns": pa.array((started[seg] - zero).astype(np.uint64)),
        "ended_ns": pa.array((ended[seg] - zero).astype(np.uint64)),
        "started_at": pa.array(started[seg], pa.timestamp("ns", tz="UTC")),
        "ended_at": pa.array(ended[seg], pa.timestamp("ns", tz="UTC")),
        "end_status": pa.array(["completed", "errored", "cancelled", "completed"]).take(
            pa.array(root_status)
        ),
        "process_id": corpus.process_ids.take(pa.array(process)),
        "engine_id": pa.array(np.zeros(m, np.uint64)),
        "program_id": programs.take(pa.array(process % 20)),
        "revision_id": pa.array([f"rev-{p % 20}" for p in process]),
        "source_label": pa.repeat(pa.scalar("main"), m),
        "runtime_id": pa.array([corpus.runtime_ids[p][0] for p in process]),
        "entry_function_id": pa.array((entry + 1).astype(np.uint32)),
        "entry_fqn": fns.fqn.take(pa.array(entry)),
        "status": pa.array(["succeeded", "failed", "cancelled", "succeeded"]).take(
            pa.array(root_status)
        ),
        "index_state": pa.repeat(pa.scalar("complete"), m),
        "duration_ns": pa.array((ended[seg] - started[seg]).astype(np.uint64)),
        "total_calls": pa.array((counts * 4).astype(np.uint64)),
        "total_errors": pa.array(errors.astype(np.uint64)),
        "total_cancelled": pa.array(cancelled.astype(np.uint64)),
        "calls_retained": pa.array(counts.astype(np.uint64)),
        "threads_total": pa.array(threads_total.astype(np.uint64)),
        "value_state": pa.array(["partial", "complete"]).take(pa.array(complete.astype(np.int64))),
        "data_first_seq": pa.array((e // 40).astype(np.uint64), u64),
        "data_last_seq": pa.array((e // 40 + 1).astype(np.uint64), u64),
        "data_file_count": pa.array(np.full(m, 2, np.uint64)),
    }
    return _table("threads_v1", columns)


def _table(relation: str, columns: dict[str, pa.Array]) -> pa.Table:
    schema = registered_schema(relation)
    arrays = [columns[f.name].cast(f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


# ------------------------------------------------------------------------------ loading


def with_internal(relation: str, rows: pa.Table, scope: Scope, generation: str) -> pa.Table:
    """``rows`` of many batches (one per execution, ``partition`` 0) with the internal columns
    ``FactStore.put_batch`` adds: the same names, types and values ``fact_rows`` gives each
    batch, computed for all batches at once."""
    n = rows.num_rows
    roots = rows.column("execution_id").combine_chunks()
    table = rows.replace_schema_metadata(None)
    for name, value in (
        ("tenant_id", scope.tenant),
        ("project_id", scope.project),
        ("environment_id", scope.environment),
        ("generation", generation),
    ):
        table = table.append_column(
            pa.field(name, pa.string(), nullable=False), pa.repeat(pa.scalar(value), n)
        )
    batch_ids = pc.binary_join_element_wise(roots, pa.scalar(f"{relation}.0"), ".")
    change = np.ones(n, bool)
    if n > 1:
        later = pc.not_equal(roots.slice(1), roots.slice(0, n - 1))
        change[1:] = later.to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(change)
    position = np.arange(n) - np.repeat(starts, np.diff(np.append(starts, n)))
    table = table.append_column(pa.field("_root_id", pa.string(), nullable=False), roots)
    table = table.append_column(pa.field("_batch_id", pa.string(), nullable=False), batch_ids)
    return table.append_column(
        pa.field("_row", pa.uint32(), nullable=False), pa.array(position.astype(np.uint32))
    )


Insert = Callable[[str, pa.Table], None]
OnBuild = Callable[[int, pa.Table, pa.Table], pa.Table]
"""``on_build(e0, calls, threads)`` -> the calls rows to insert instead (same schema); run on
each built chunk before its insert, inside the timed build (``query_workload_corpus.py``
replaces the value CIDs and writes the chunk's private rows)."""


def bulk_load(
    insert: Insert,
    corpus: Corpus,
    scope: Scope,
    generation: str,
    chunk_rows: int,
    on_chunk: Callable[[pa.Table, float, float], None],
    on_build: OnBuild | None = None,
) -> None:
    """Build and insert ``corpus`` chunk by chunk (calls, then the chunk's threads);
    ``on_chunk(calls, build_s, insert_s)`` after each chunk."""
    for e0, e1 in chunk_bounds(corpus, chunk_rows):
        started = time.perf_counter()
        calls, threads = build_chunk(corpus, e0, e1)
        if on_build is not None:
            calls = on_build(e0, calls, threads)
        fact_calls = with_internal("calls_v1", calls, scope, generation)
        fact_threads = with_internal("threads_v1", threads, scope, generation)
        built = time.perf_counter()
        insert("calls_v1", fact_calls)
        insert("threads_v1", fact_threads)
        on_chunk(calls, built - started, time.perf_counter() - built)


@dataclass(frozen=True)
class Batch:
    batch_id: str
    root_id: str
    body: bytes
    digest: str
    rows: int
    window_calls: int
    """Rows starting in the last day of the corpus (the queries' window)."""
    max_duration: int


def build_batches(count: int, rows: int, seed: int) -> list[Batch]:
    """``count`` one-execution ``calls_v1`` batches of ``rows`` rows, as the projector sends
    them: Arrow IPC stream, zstd level 3, ``sha256:`` of the uncompressed stream."""
    corpus = plan(count * rows, seed, rows, exact=True)
    compressor = zstandard.ZstdCompressor(level=3)
    batches = []
    for e0, e1 in chunk_bounds(corpus, 200_000):
        calls, _ = build_chunk(corpus, e0, e1)
        in_window = calls["started_at"].to_numpy().astype(np.int64) >= CORPUS_END - DAY_NS
        durations = calls["duration_ns"].to_numpy()
        for i in range(e1 - e0):
            table = calls.slice(i * rows, rows)
            sink = io.BytesIO()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            raw = sink.getvalue()
            root = corpus.execution_ids[e0 + i].as_py()
            part = slice(i * rows, (i + 1) * rows)
            batches.append(
                Batch(
                    f"{root}.calls_v1.0",
                    root,
                    compressor.compress(raw),
                    "sha256:" + hashlib.sha256(raw).hexdigest(),
                    rows,
                    int(in_window[part].sum()),
                    int(durations[part].max()),
                )
            )
    return batches


# ------------------------------------------------------------------------------ worker


def worker_load(
    data_dir: Path, calls: int, on_build: Callable[[Scope], OnBuild | None] | None = None
) -> None:
    """Child process: create the control plane under ``data_dir``, provision the three
    tenants (one BYOC deployment each), bulk-load ``calls`` calls into ``tn_a`` and a tenth
    as many into ``tn_b``, and write :data:`MANIFEST`. ``on_build(scope)`` gives the hook
    :func:`bulk_load` runs on each of that scope's chunks (``None``: none)."""
    from baml_studio.control.model import DeploymentKind
    from baml_studio.control.service import ControlPlane

    config = ControlConfig.from_data_dir(data_dir)
    control = ControlPlane.open(config)
    ms = control.metastore
    for scope, deployment in DEPLOYMENTS.items():
        ms.create_tenant(scope.tenant)
        ms.create_project(scope.tenant, scope.project)
        ms.create_environment(scope.tenant, scope.project, scope.environment)
        ms.create_deployment(deployment, DeploymentKind.BYOC, "cell-1", tenant_id=scope.tenant)
        ms.assign_environment(deployment, scope)
    manifest = _load_corpora(config, calls, on_build)
    control.close()
    (data_dir / MANIFEST).write_text(json.dumps({"calls": calls, **manifest}, indent=1))


def _load_corpora(
    config: ControlConfig, calls: int, on_build: Callable[[Scope], OnBuild | None] | None = None
) -> dict[str, Any]:
    from baml_studio.control.facts.config import FactStoreConfig
    from baml_studio.control.facts.connection import Connector
    from baml_studio.control.facts.tables import INSERT_SETTINGS

    database = config.facts_database
    client = Connector(FactStoreConfig(dsn=config.facts_dsn, database=database)).open()

    def insert(relation: str, table: pa.Table) -> None:
        client.insert_arrow(relation, table, database=database, settings=INSERT_SETTINGS)

    tally = LoadTally(CORPUS_END - DAY_NS)
    manifest: dict[str, Any] = {}
    for scope, size, seed in ((SCOPE_A, calls, 1), (SCOPE_B, max(1, calls // 10), 2)):
        corpus = plan(size, seed)
        tally.begin(scope.tenant, corpus.calls, checked=scope == SCOPE_A)
        hook = on_build(scope) if on_build is not None else None
        bulk_load(insert, corpus, scope, GENERATION, LOAD_CHUNK, tally.chunk, hook)
        manifest[scope.tenant] = {"calls": corpus.calls, "executions": corpus.executions}
        if scope == SCOPE_A:
            probe = corpus.executions // 2
            manifest["probe_execution"] = corpus.execution_ids[probe].as_py()
            manifest["probe_calls"] = int(corpus.counts[probe])
    loaded = time.perf_counter()
    for relation in ("calls_v1", "threads_v1"):
        client.command(f"OPTIMIZE TABLE `{database}`.`{relation}` FINAL")
    optimized = time.perf_counter()
    parts = client.query(
        "SELECT table, count(), sum(rows), sum(bytes_on_disk), sum(data_uncompressed_bytes) "
        f"FROM system.parts WHERE database = '{database}' AND active GROUP BY table"
    ).result_rows
    client.close()
    return {
        **manifest,
        "load_s": loaded - tally.started,
        "build_s": tally.build_s,
        "insert_s": tally.insert_s,
        "optimize_s": optimized - loaded,
        "window_start": _iso(tally.window_start),
        "window_calls": tally.window_calls,
        "max_duration": tally.max_duration,
        "parts": {str(t): [int(c), int(r), int(b), int(u)] for t, c, r, b, u in parts},
    }


@dataclass
class LoadTally:
    """Load times, and what the checked tenant's answers must be (from the generated rows)."""

    window_start: int
    started: float = field(default_factory=time.perf_counter)
    build_s: float = 0.0
    insert_s: float = 0.0
    window_calls: int = 0
    max_duration: int = 0
    tenant: str = ""
    total: int = 0
    done: int = 0
    checked: bool = False

    def begin(self, tenant: str, total: int, *, checked: bool) -> None:
        self.tenant, self.total, self.done, self.checked = tenant, total, 0, checked

    def chunk(self, rows: pa.Table, build_s: float, insert_s: float) -> None:
        self.build_s += build_s
        self.insert_s += insert_s
        self.done += rows.num_rows
        if self.checked:
            window = pa.scalar(self.window_start, pa.timestamp("ns", tz="UTC"))
            self.window_calls += pc.sum(pc.greater_equal(rows["started_at"], window)).as_py()
            self.max_duration = max(self.max_duration, pc.max(rows["duration_ns"]).as_py())
        print(
            f"  {self.tenant}: {self.done:>11,} / {self.total:,} calls  "
            f"{time.perf_counter() - self.started:7.1f} s",
            flush=True,
        )


def _iso(ns: int) -> str:
    return str(np.datetime64(ns, "ns")) + "Z"
