"""The private half of the query-workload corpus: codec-1 values and Lance datasets of ``tn_a``.

``benchmarks/query_workload.py`` loads the control-plane corpus of ``control_plane_corpus.py``
(15 M ``calls_v1`` public rows of ``tn_a`` and 1.5 M of ``tn_b``, through the fact store's client)
and, for ``tn_a``, writes the private datasets the coordinator reads, under
``DATA/lance-tn_a`` (a :class:`~baml_studio.projector.lance_store.PrivateStore` root).

**Values.** A pool of distinct codec-1 bodies per module of the corpus's functions
(``invoices``, ``support``, ``search``, ``agents``, ``billing``): ``ARGS_PER_MODULE`` argument
maps, half as many outputs, plus ``ERRORS`` error values shared by every function. Each is a
small JSON-like object (ticket, invoice, account ids, priorities, customer names, amounts and a
free-text ``summary`` built from a fixed vocabulary, so ``LIKE '%refund%'`` finds some) encoded
with :func:`~baml_studio.format.values.encode_python`; its CID is ``value_cid(1, body)``. A call
draws its argument and output from its function's module pool uniformly (seeded per chunk),
its error from the error pool. Pools shrink with the corpus (``calls / 375`` arguments per
module, at least 2,000), so a 15 M corpus holds 302,000 distinct bodies, each argument shared by
about 75 calls. ``tn_b`` keeps the random CIDs of the public generator (it is never queried).

**Bulk path** (instead of the projector's ``PrivateStore.write_executions``, which merges
per execution and would take days for 300,000 executions): :func:`build_private` is the
``on_build`` hook of ``control_plane_corpus.bulk_load``. For each 500,000-call chunk it
replaces the public ``args_cid`` / ``output_cid`` / ``error_cid`` with the pool CIDs (same
NULLs: a CID where the state is ``available``) before the chunk is inserted, and appends the
chunk's private ``calls_v1`` rows to Lance in one write, in :func:`relation_schema` with the
projector's row ids (``<execution>.calls_v1.0:<position>``, the batch id the public loader
uses) and value handles ``0x01 ‖ codec ‖ cid`` (``lost:*`` → ``0x00 ‖ reason``,
``not_captured`` → ``0x00 0xFE``, ``not_applicable`` → NULL). Call sites are per function
(file) with random lines. Then ``value_paths_v1`` (every pool body's leaf rows, from the
projector's pure ``value_paths.leaf_rows``) and ``values_v1`` (every pool body), one write each,
and, last, one ``projected_v1`` marker per execution; then the scalar indexes
``PrivateStore.compact`` builds (:data:`~baml_studio.projector.lance_store.INDEXES`: BTREE on
ids, cids and paths, NGRAM on ``str_value``), with the same index names. The datasets are not
compacted (one fragment per 500,000-call chunk).

Not written: the private datasets of ``threads_v1``, ``errors_v1``, ``call_path_stats_v1`` and
``function_definitions_v1`` (no workload query reads their private columns; a query that did
would see those columns as pending).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from baml_studio.catalog.handles import (
    LOSS_NOT_CAPTURED,
    Available,
    Unavailable,
    encode_handle,
)
from baml_studio.format.ids import value_cid
from baml_studio.format.records import ValueLossReason
from baml_studio.format.values import encode_python
from baml_studio.gateway.config import Scope
from baml_studio.projector.lance_store import (
    INDEXES,
    PROJECTED,
    PROJECTED_SCHEMA,
    VALUE_PATHS,
    VALUES,
    VALUES_SCHEMA,
    PrivateStore,
    relation_schema,
)
from baml_studio.projector.value_paths import leaf_rows, paths_table

MODULES = ("invoices", "support", "search", "agents", "billing")
ARGS_PER_MODULE = 40_000
ERRORS = 2_000
VALUE_SEED = 11
LANCE_DIR = "lance-tn_a"
WORKLOAD_MANIFEST = "query-workload.json"
CALLS = "calls_v1"

_FIRST = ("Ada", "Alan", "Grace", "Linus", "Ken", "Barbara", "Edsger", "Donald", "Margaret")
_LAST = ("Lovelace", "Turing", "Hopper", "Torvalds", "Thompson", "Liskov", "Dijkstra", "Knuth")
_TEXT = (
    "the customer asked about a refund for the order invoice shipment account plan upgrade "
    "password login error timeout payment card charge twice delivery late missing item "
    "replacement cancel subscription billing address email phone support agent escalate "
    "priority urgent resolved pending review follow up thanks issue report bug crash app "
    "mobile web browser export data report dashboard slow search results query filter"
)
_WORDS = tuple(_TEXT.split(" "))
_PRIORITIES = ("low", "medium", "high", "urgent")
_LABELS = ("refund", "billing", "bug", "account", "shipping", "escalate", "other")
_STATES = pa.array(
    [
        "available",
        "not_captured",
        "lost:value_memory_exceeded",
        "lost:value_too_large",
        "not_applicable",
    ]
)
_LOST = (
    encode_handle(Unavailable(LOSS_NOT_CAPTURED)),
    encode_handle(Unavailable(ValueLossReason.VALUE_MEMORY_EXCEEDED)),
    encode_handle(Unavailable(ValueLossReason.VALUE_TOO_LARGE)),
)


# ------------------------------------------------------------------------------ values


def _sentence(r: random.Random, lo: int, hi: int) -> str:
    return " ".join(r.choice(_WORDS) for _ in range(r.randint(lo, hi)))


def _name(r: random.Random) -> str:
    return f"{r.choice(_FIRST)} {r.choice(_LAST)}"


def _args(module: str, i: int, r: random.Random) -> dict[str, Any]:
    if module == "support":
        return {
            "ticket": {
                "id": f"TCK-{i:07d}",
                "priority": r.choices(_PRIORITIES, (40, 30, 20, 10))[0],
                "customer": _name(r),
                "channel": r.choice(("email", "chat", "phone")),
                "subject": _sentence(r, 3, 8),
            },
            "locale": r.choice(("en-US", "en-GB", "de-DE", "fr-FR")),
        }
    if module == "invoices":
        lines = [{"sku": f"SKU-{r.randint(1, 9999):04d}", "qty": r.randint(1, 20)}]
        return {
            "invoice": {
                "id": f"INV-{i:07d}",
                "amount": round(r.lognormvariate(6.0, 1.2), 2),
                "currency": r.choice(("USD", "EUR", "GBP")),
                "customer": _name(r),
                "lines": lines * r.randint(1, 3),
            }
        }
    if module == "search":
        return {"query": _sentence(r, 2, 6), "filters": {"lang": "en", "days": r.randint(1, 90)}}
    if module == "agents":
        return {
            "step": {"goal": _sentence(r, 4, 10), "index": r.randint(0, 40)},
            "context": _sentence(r, 15, 30),
        }
    return {
        "account": {
            "id": f"ACC-{i:06d}",
            "plan": r.choice(("free", "pro", "team", "enterprise")),
            "balance": round(r.uniform(-500, 5000), 2),
            "customer": _name(r),
        }
    }


def _output(module: str, r: random.Random) -> dict[str, Any]:
    summary = _sentence(r, 8, 24)
    if module == "support":
        return {"label": r.choice(_LABELS), "summary": summary, "confidence": r.random()}
    if module == "invoices":
        return {"status": r.choice(("paid", "due", "overdue")), "total": r.uniform(1, 9e3)}
    if module == "search":
        return {"hits": r.randint(0, 500), "summary": summary}
    if module == "agents":
        return {"action": r.choice(("search", "answer", "ask", "stop")), "summary": summary}
    return {"ok": r.random() < 0.9, "delta": round(r.uniform(-100, 100), 2), "summary": summary}


@dataclass(frozen=True)
class ValuePool:
    """Every distinct body: per module ``args_count`` arguments, then ``out_count`` outputs,
    then ``ERRORS`` errors. ``wires[k]`` / ``handles[k]`` belong to ``bodies[k]``; ``handles``
    ends with the three unavailable handles (:data:`_LOST`)."""

    bodies: list[bytes]
    wires: pa.Array
    handles: pa.Array
    args_count: int
    out_count: int

    def args_base(self, module: np.ndarray) -> np.ndarray:
        return module * (self.args_count + self.out_count)

    def out_base(self, module: np.ndarray) -> np.ndarray:
        return self.args_base(module) + self.args_count

    @property
    def err_base(self) -> int:
        return len(MODULES) * (self.args_count + self.out_count)


def pool_sizes(calls: int) -> tuple[int, int]:
    args = int(min(ARGS_PER_MODULE, max(2_000, calls // 375)))
    return args, args // 2


def build_pool(calls: int, seed: int = VALUE_SEED) -> ValuePool:
    args_count, out_count = pool_sizes(calls)
    r = random.Random(seed)
    bodies: list[bytes] = []
    for module in MODULES:
        bodies += [encode_python(_args(module, i, r)) for i in range(args_count)]
        bodies += [encode_python(_output(module, r)) for _ in range(out_count)]
    for _ in range(ERRORS):
        kind = r.choice(("TimeoutError", "RateLimited", "ValidationError", "ProviderError"))
        error = {"type": kind, "message": _sentence(r, 4, 12), "retryable": r.random() < 0.5}
        bodies.append(encode_python(error))
    cids = [value_cid(1, body) for body in bodies]
    wires = pa.array(["bamlv_1_" + cid.hex() for cid in cids], pa.string())
    handles = [encode_handle(Available(1, cid)) for cid in cids]
    return ValuePool(
        bodies, wires, pa.array(handles + list(_LOST), pa.binary()), *pool_sizes(calls)
    )


def value_paths_table(pool: ValuePool) -> pa.Table:
    """The ``value_paths_v1`` rows of every pool body (the projector's ``leaf_rows``)."""
    wires = pool.wires.to_pylist()
    rows = [
        row for cid, body in zip(wires, pool.bodies, strict=True) for row in leaf_rows(cid, 1, body)
    ]
    return paths_table(rows)


def write_values(root: Path, pool: ValuePool) -> int:
    """``value_paths_v1`` then ``values_v1`` (the projector's order), each in one write, and
    their scalar indexes; the number of path rows."""
    paths = value_paths_table(pool)
    lance.write_dataset(paths, str(root / VALUE_PATHS), mode="create")
    lance.write_dataset(values_table(pool), str(root / VALUES), mode="create")
    build_indexes(root, (VALUE_PATHS, VALUES))
    return paths.num_rows


def build_indexes(root: Path, names: tuple[str, ...]) -> None:
    """The scalar indexes ``PrivateStore.compact`` builds for ``names``, with its index names."""
    for name in names:
        ds = lance.dataset(str(root / name))
        for column, kind in INDEXES[name]:
            ds.create_scalar_index(column, kind, name=f"{column}_{kind.lower()}")


def values_table(pool: ValuePool) -> pa.Table:
    n = len(pool.bodies)
    return pa.Table.from_arrays(
        [
            pool.wires,
            pa.array(np.ones(n, np.uint16)),
            pa.array(pool.bodies, pa.large_binary()),
            pa.array([f"bench:values/{k // 1000:05d}.bamlpack.zst#{k % 1000}" for k in range(n)]),
        ],
        schema=VALUES_SCHEMA,
    )


# ------------------------------------------------------------------------------ the hook


@dataclass
class Probe:
    """One execution the read-a-call's-values queries look at (the loader's probe)."""

    execution_id: str = ""
    calls: int = 0
    call_id: str = ""
    """A ``support.*`` call of it with its arguments and output available ("" if none)."""
    errored: int = 0
    outputs: int = 0


@dataclass
class PrivateWriter:
    """The ``on_build`` hook (module docstring) and what it wrote."""

    root: Path
    pool: ValuePool
    fqns: pa.Array
    probe_index: int
    seed: int = VALUE_SEED
    rows: int = 0
    seconds: float = 0.0
    chunks: int = 0
    markers: list[pa.Table] = field(default_factory=list)
    probe: Probe = field(default_factory=Probe)

    def for_scope(self, scope: Scope) -> Any:
        from control_plane_corpus import SCOPE_A

        return self.build_private if scope == SCOPE_A else None

    def build_private(self, e0: int, calls: pa.Table, threads: pa.Table) -> pa.Table:
        started = time.perf_counter()
        n = calls.num_rows
        fn = pc.index_in(calls["fqn"], self.fqns).to_numpy(zero_copy_only=False)
        module = np.array([MODULES.index(str(name).split(".")[0]) for name in self.fqns])[fn]
        rng = np.random.default_rng([self.seed, e0])
        pool = self.pool
        picks = {
            "args": pool.args_base(module) + rng.integers(0, pool.args_count, n),
            "output": pool.out_base(module) + rng.integers(0, pool.out_count, n),
            "error": pool.err_base + rng.integers(0, ERRORS, n),
        }
        columns: dict[str, Any] = {}
        public = calls
        for role, pick in picks.items():
            cid, handle = self._role(calls[f"{role}_state"], pick)
            index = calls.schema.get_field_index(f"{role}_cid")
            public = public.set_column(index, calls.schema.field(index), cid)
            columns[role] = handle
        execution = calls["execution_id"].combine_chunks()
        position = _positions(execution)
        columns["row_id"] = pc.binary_join_element_wise(
            execution, pc.cast(pa.array(position), pa.string()), ".calls_v1.0:"
        )
        columns["execution_id"] = execution
        columns["call_id"] = calls["call_id"]
        files = pa.array([f"src/{str(f).replace('.', '/')}.py" for f in self.fqns])
        columns["call_site_file"] = files.take(pa.array(fn))
        line = rng.integers(5, 400, n)
        columns["call_site_line"] = pa.array(line.astype(np.uint32))
        columns["call_site_start"] = pa.array((line * 40).astype(np.uint32))
        columns["call_site_end"] = pa.array((line * 40 + rng.integers(8, 80, n)).astype(np.uint32))
        schema = relation_schema(CALLS)
        private = pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)
        mode = "append" if self.chunks else "create"
        lance.write_dataset(private, str(self.root / CALLS), mode=mode)
        self.markers.append(threads.select(["execution_id", "process_id"]))
        if e0 <= self.probe_index < e0 + threads.num_rows:
            self._probe(threads["execution_id"][self.probe_index - e0].as_py(), public)
        self.chunks += 1
        self.rows += n
        self.seconds += time.perf_counter() - started
        return public

    def _role(self, state: pa.ChunkedArray, pick: np.ndarray) -> tuple[pa.Array, pa.Array]:
        """The public CID column and the private handle column of one value role."""
        code = pc.index_in(state, _STATES).to_numpy(zero_copy_only=False)
        available = code == 0
        lost = len(self.pool.handles) - len(_LOST)
        index = np.where(available, pick, lost + np.clip(code - 1, 0, 2))
        handle = self.pool.handles.take(pa.array(index, mask=code == 4))
        cid = self.pool.wires.take(pa.array(np.where(available, pick, 0), mask=~available))
        return cid, handle

    def _probe(self, execution_id: str, calls: pa.Table) -> None:
        rows = calls.filter(pc.equal(calls["execution_id"], execution_id))
        both = pc.and_(pc.is_valid(rows["args_cid"]), pc.is_valid(rows["output_cid"]))
        support = pc.starts_with(rows["fqn"], "support.")
        candidates = rows.filter(pc.and_(both, support))
        self.probe = Probe(
            execution_id,
            rows.num_rows,
            candidates["call_id"][0].as_py() if candidates.num_rows else "",
            pc.sum(pc.equal(rows["status"], "errored")).as_py() or 0,
            pc.sum(pc.is_valid(rows["output_cid"])).as_py() or 0,
        )

    def finish(self) -> dict[str, Any]:
        """``value_paths_v1`` and ``values_v1``, the markers (last), the relation's and the
        markers' scalar indexes; the load's figures."""
        started = time.perf_counter()
        path_rows = write_values(self.root, self.pool)
        values_s = time.perf_counter() - started
        markers = pa.concat_tables(self.markers)
        stamp = datetime(2026, 11, 30, tzinfo=UTC)
        marker = pa.Table.from_arrays(
            [
                markers["execution_id"],
                markers["execution_id"],
                markers["process_id"],
                pa.array([stamp] * markers.num_rows, pa.timestamp("us", tz="UTC")),
            ],
            schema=PROJECTED_SCHEMA,
        )
        lance.write_dataset(marker, str(self.root / PROJECTED), mode="create")
        written = time.perf_counter()
        build_indexes(self.root, (CALLS, PROJECTED))
        indexed = time.perf_counter()
        return {
            "private_rows": self.rows,
            "private_write_s": self.seconds,
            "values_s": values_s,
            "markers_s": written - started - values_s,
            "index_s": indexed - written,
            "values": len(self.pool.bodies),
            "value_path_rows": path_rows,
            "value_bytes": sum(len(b) for b in self.pool.bodies),
            "markers": marker.num_rows,
            "lance_bytes": sum(f.stat().st_size for f in self.root.rglob("*") if f.is_file()),
            "probe": self.probe.__dict__,
        }


def _positions(execution: pa.Array) -> np.ndarray:
    """Each row's position within its execution (rows come in execution order)."""
    n = len(execution)
    change = np.ones(n, bool)
    if n > 1:
        later = pc.not_equal(execution.slice(1), execution.slice(0, n - 1))
        change[1:] = later.to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(change)
    return np.arange(n) - np.repeat(starts, np.diff(np.append(starts, n)))


class ReusedDatasets(PrivateStore):
    """Experiment (``--reuse-datasets``), not the shipped path: ``open_dataset`` at a given
    version returns the dataset object it opened before, so Lance's index and metadata caches
    (which live in that object's session) survive from one query to the next. A dataset at a
    version is immutable, so this cannot change an answer."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._opened: dict[tuple[str, int], Any] = {}

    def open_dataset(self, name: str, *, version: int | None = None) -> Any:
        if version is None:
            return super().open_dataset(name)
        key = (name, version)
        if key not in self._opened:
            self._opened[key] = super().open_dataset(name, version=version)
        return self._opened[key]


# ------------------------------------------------------------------------------ loading


def worker_load(data_dir: Path, calls: int) -> None:
    """Child process: the control-plane load (``control_plane_corpus.worker_load``) with the
    private hook, then :meth:`PrivateWriter.finish`; the figures go to
    :data:`WORKLOAD_MANIFEST`."""
    import control_plane_corpus

    started = time.perf_counter()
    corpus = control_plane_corpus.plan(calls, 1)
    pool = build_pool(calls)
    pool_s = time.perf_counter() - started
    root = data_dir / LANCE_DIR
    root.mkdir(parents=True)
    writer = PrivateWriter(root, pool, corpus.fns.fqn, corpus.executions // 2)
    control_plane_corpus.worker_load(data_dir, calls, writer.for_scope)
    figures = writer.finish()
    figures.update(pool_s=pool_s, total_s=time.perf_counter() - started, calls=calls)
    (data_dir / WORKLOAD_MANIFEST).write_text(json.dumps(figures, indent=1))


def print_load(manifest: dict[str, Any], workload: dict[str, Any]) -> None:
    a, b = manifest["tn_a"], manifest["tn_b"]
    w = workload
    print(
        f"corpus: tn_a {a['calls']:,} calls / {a['executions']:,} executions (public facts, "
        f"private Lance rows, values), tn_b {b['calls']:,} / {b['executions']:,} (public only)"
    )
    print(
        f"load: {w['total_s']:.1f} s in all: value pool {w['pool_s']:.1f} s "
        f"({w['values']:,} bodies, {w['value_bytes'] / 1e6:.1f} MB); public generate and insert "
        f"{manifest['load_s']:.1f} s, of which Lance calls_v1 rows {w['private_write_s']:.1f} s;"
        f" OPTIMIZE FINAL {manifest['optimize_s']:.1f} s; value_paths_v1 "
        f"({w.get('value_path_rows', 0):,} rows) and values_v1 with their indexes "
        f"{w.get('values_s', 0):.1f} s; projected_v1 {w.get('markers_s', 0):.1f} s; calls_v1 "
        f"and projected_v1 indexes {w['index_s']:.1f} s"
    )
    print(
        f"  Lance: {w['private_rows']:,} calls_v1 rows, {w['markers']:,} markers,"
        f" {w['lance_bytes'] / 1e9:.2f} GB on disk; chDB: "
        + ", ".join(
            f"{t} {r:,} rows {d / 1e9:.2f} GB"
            for t, (_, r, d, _) in sorted(manifest["parts"].items())
        )
    )


# ------------------------------------------------------------------------------ ground truth


def expected_search(calls: int, candidates: list[dict[str, Any]]) -> dict[str, Any]:
    """The answers of queries s1, s2 and s3 of ``query_workload.WORKLOAD`` from the generator's
    own values: ``candidates`` are the public rows (``call_id``, ``started_at``, ``args_cid``,
    ``output_cid``) of ``support.ClassifyTicket`` in the 6 h window, each CID looked up in the
    rebuilt pool and decoded with the format codec (not the query engine)."""
    from baml_studio.format.values import decode_value, to_json

    pool = build_pool(calls)
    bodies = dict(zip(pool.wires.to_pylist(), pool.bodies, strict=True))

    def get(cid: str | None, *path: str) -> Any:
        node: Any = to_json(decode_value(bodies[cid])) if cid else None
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    priority = {r["call_id"]: get(r["args_cid"], "ticket", "priority") for r in candidates}
    urgent = [r for r in candidates if priority[r["call_id"]] == "urgent"]
    refund = [r for r in candidates if "refund" in (get(r["output_cid"], "summary") or "")]
    groups: dict[str | None, int] = {}
    for value in priority.values():
        groups[value] = groups.get(value, 0) + 1
    return {
        "s1": [r["call_id"] for r in sorted(urgent, key=_started, reverse=True)][:100],
        "s2": sorted(r["call_id"] for r in refund)[:100],
        "s3": groups,
    }


def _started(row: dict[str, Any]) -> np.datetime64:
    return np.datetime64(str(row["started_at"]).rstrip("Z"), "ns")
