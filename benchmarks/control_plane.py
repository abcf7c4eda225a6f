"""Control plane: resident query latency over 15 million call facts, and batch ingest over HTTP.

    .venv/bin/python benchmarks/control_plane.py                 # 15,000,000 calls
    .venv/bin/python benchmarks/control_plane.py --small         # 1,000,000 calls
    .venv/bin/python benchmarks/control_plane.py --keep /tmp/cp  # keep (and reuse) the corpus

1. **Load** (a child process): a control plane under a temp dir (SQLite metastore, chDB),
   tenants ``tn_a`` (the corpus, ``--calls``) and ``tn_b`` (10 % as many calls, so the scope
   filter has rows to skip), one generation each, loaded through the fact-store layer's client
   in 500,000-row inserts (the bulk path, not the HTTP path; ``control_plane_corpus.py``),
   then ``OPTIMIZE … FINAL`` so no background merge runs during the timings.
2. **Resident queries** through the real HTTP API (``POST /query-snapshots`` then
   ``POST /resident-queries``, Arrow decoded on the client), served by a child process
   equivalent to ``baml-studio serve control --data DIR`` (same config, app and uvicorn
   options, plus INFO logs to read the server's ClickHouse time). Per query: **cold** = the
   first run in a freshly started server after ``sync; echo 3 > /proc/sys/vm/drop_caches``
   (when this process may write it); **fresh** = the first run in another fresh server,
   page cache kept; **warm** = the worst of the next three runs. Compared with the
   proof of concept's 146 ms (best public-only figure, 146–170 ms) and the 500 ms target.
   Then, in a process of its own without HTTP, each query's compiled SQL against the same
   question in hand-written ClickHouse SQL (the in-run baseline for the compiler's shape).
3. **Ingest**: N client threads PUT pre-built ``calls_v1`` batches (one execution each, zstd
   Arrow IPC, digest and headers as the projector sends them) for ``--ingest-seconds`` into
   a third tenant, of the loaded control plane and of an empty one. Baseline: one client
   thread, same store and batch size. The server counts its coalesced inserts
   (``FactStore.stats``, read through an extra ``GET /_bench/stats`` route).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))

import control_plane_corpus as corpus_mod
from baml_studio.control.config import ControlConfig
from baml_studio.gateway.config import Scope
from control_plane_corpus import (
    DEPLOYMENTS,
    GENERATION,
    MANIFEST,
    SCOPE_A,
    SCOPE_B,
    SCOPE_I,
)

POC_MS = 146.0
TARGET_MS = 500.0
BUDGET = {
    "max_wall_ms": 30_000,
    "max_rows_read": 100_000_000,
    "max_bytes_read": 20_000_000_000,
    "max_result_rows": 1_000_000,
    "max_result_bytes": 1_000_000_000,
}
APPROX = "approx_percentile_cont"
BY_FQN = (
    "SELECT fqn, count(*) AS calls, {f}(0.5) WITHIN GROUP (ORDER BY duration_ns) AS p50, "
    "{f}(0.95) WITHIN GROUP (ORDER BY duration_ns) AS p95 FROM calls_v1 "
    "WHERE started_at >= $1 GROUP BY fqn ORDER BY calls DESC"
)
QUERY_LOG = re.compile(r"resident query .* rows=(\d+) ms=([\d.]+)")


@dataclass(frozen=True)
class Query:
    label: str
    sql: str
    parameters: list[dict[str, Any]]
    check: str
    """What the answer must be, checked against the generator (see :func:`check_answer`)."""
    direct: str
    """The same question as hand-written ClickHouse SQL: scope in the base table's WHERE."""


def queries(manifest: dict[str, Any]) -> list[Query]:
    from baml_studio.control.facts.ddl import scope_where_sql

    window = [{"type": "timestamp", "value": manifest["window_start"]}]
    probe = [{"type": "string", "value": manifest["probe_execution"]}]
    top = "SELECT execution_id, call_id, fqn, duration_ns FROM calls_v1"
    one = "SELECT call_id, fqn, status, duration_ns FROM calls_v1"
    since = manifest["window_start"].replace("T", " ").rstrip("Z")
    scoped = f"FROM baml_facts.calls_v1 WHERE {scope_where_sql(SCOPE_A, GENERATION)}"
    by_fqn = (
        "SELECT fqn, count() AS calls, {f}(0.5)(duration_ns) AS p50, {f}(0.95)(duration_ns) "
        f"AS p95 {scoped} AND started_at >= toDateTime64('{since}', 9, 'UTC') "
        "GROUP BY fqn ORDER BY calls DESC"
    )
    return [
        Query(
            "a scoped count",
            "SELECT count(*) AS n FROM calls_v1",
            [],
            "count",
            f"SELECT count() AS n {scoped}",
        ),
        Query(
            "b by fqn, percentile_cont",
            BY_FQN.format(f="percentile_cont"),
            window,
            "window",
            by_fqn.format(f="quantileExactInclusive"),
        ),
        Query(
            "b' by fqn, approx_percentile",
            BY_FQN.format(f=APPROX),
            window,
            "window",
            by_fqn.format(f="quantileTDigest"),
        ),
        Query(
            "c top 20 by duration",
            f"{top} ORDER BY duration_ns DESC LIMIT 20",
            [],
            "top",
            f"{top.replace('FROM calls_v1', scoped)} ORDER BY duration_ns DESC LIMIT 20",
        ),
        Query(
            "d one execution's calls",
            f"{one} WHERE execution_id = $1 ORDER BY started_ns",
            probe,
            "probe",
            f"{one.replace('FROM calls_v1', scoped)} AND execution_id = "
            f"'{manifest['probe_execution']}' ORDER BY started_ns",
        ),
    ]


# ------------------------------------------------------------------------------ workers


def worker_serve(data_dir: Path, port: int, info_log: bool) -> None:
    """Child process: ``serve control`` (same config, app, uvicorn options) plus
    ``GET /_bench/stats`` (the fact store's counters) and, with ``info_log``, INFO logs."""
    import uvicorn
    from starlette.responses import JSONResponse

    from baml_studio.control.app import create_app
    from baml_studio.control.service import ControlPlane
    from baml_studio.servergc import tune_for_serving

    if info_log:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    control = ControlPlane.open(ControlConfig.from_data_dir(data_dir))
    app = create_app(control, on_started=tune_for_serving)  # as `serve control` does

    async def bench_app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/_bench/stats":
            response = JSONResponse(control.facts.stats.snapshot())
            await response(scope, receive, send)
            return
        await app(scope, receive, send)

    try:
        uvicorn.run(bench_app, host="127.0.0.1", port=port, log_level="info", access_log=False)
    finally:
        control.close()


def worker_direct(data_dir: Path, reps: int) -> None:
    """Child process, no server: each query through ``FactStore.query_arrow`` in this process
    (compiled SQL and the hand-written direct SQL, same settings, warm: worst of ``reps``
    after one warm-up, alternating), and ``FactStore.put_batch`` of 50-row batches on one
    thread. Prints one JSON object."""
    from baml_studio.control.facts import BatchKey, FactStore, FactStoreConfig
    from baml_studio.control.facts import relation_select_sql as relation_sql
    from baml_studio.control.resident import (
        QueryParameter,
        ResidentBudget,
        budget_settings,
        compile_resident,
    )

    config = ControlConfig.from_data_dir(data_dir)
    manifest = json.loads((data_dir / MANIFEST).read_text())
    store = FactStore.connect(FactStoreConfig(config.facts_dsn, config.facts_database))
    limits = budget_settings(ResidentBudget(**BUDGET), config.resident_caps)

    def worst(sql: str, settings: dict[str, Any]) -> float:
        times = []
        for _ in range(reps):
            started = time.perf_counter()
            store.query_arrow(sql, settings)
            times.append((time.perf_counter() - started) * 1000)
        return max(times)

    out: dict[str, Any] = {"select1": worst("SELECT 1", limits), "queries": {}}
    for q in queries(manifest):
        params = [QueryParameter(p["type"], p["value"]) for p in q.parameters]
        compiled = compile_resident(
            q.sql,
            params,
            relation_sql=lambda n: relation_sql(n, config.facts_database, SCOPE_A, GENERATION),
        )
        settings = {**compiled.settings, **limits}
        store.query_arrow(compiled.sql, settings)
        store.query_arrow(q.direct, settings)
        out["queries"][q.label] = [worst(compiled.sql, settings), worst(q.direct, settings)]
    puts = 200
    corpus = corpus_mod.plan(puts * 50, time.time_ns() % 2**31, 50, exact=True)
    calls, _ = corpus_mod.build_chunk(corpus, 0, puts)
    started = time.perf_counter()
    for i in range(puts):
        root = corpus.execution_ids[i].as_py()
        key = BatchKey(SCOPE_I, GENERATION, f"{root}.calls_v1.0", root, "calls_v1", 0)
        store.put_batch(key, calls.slice(i * 50, 50), "sha256:" + "0" * 64)
    out["put_ms"] = (time.perf_counter() - started) * 1000 / puts
    store.close()
    print(json.dumps(out))


def print_direct(data_dir: Path, http_warm: dict[str, float], reps: int) -> None:
    command = [sys.executable, __file__, "--worker", "direct", "--data", str(data_dir)]
    run = subprocess.run([*command, "--warm-runs", str(reps)], capture_output=True, text=True)
    if run.returncode:
        raise SystemExit(f"the direct worker failed:\n{run.stderr[-3000:]}")
    out = json.loads(run.stdout.splitlines()[-1])
    head = (
        f"\n{'query (warm, worst of ' + str(reps) + ')':<30}{'HTTP ms':>9}{'store ms':>10}"
        f"{'direct ms':>11}{'store/direct':>14}"
    )
    print(head)
    print("-" * len(head.strip()))
    for label, (compiled, direct) in out["queries"].items():
        http = http_warm[label]
        print(f"{label:<30}{http:>9.1f}{compiled:>10.1f}{direct:>11.1f}{compiled / direct:>14.2f}")
    print(
        "HTTP = warm column above; store = the compiled SQL through FactStore.query_arrow in "
        "a process of its own (no HTTP, run after the servers); "
        "direct = hand-written ClickHouse SQL, scope in the base table's WHERE, same path and "
        f"settings; FactStore.query_arrow('SELECT 1') {out['select1']:.1f} ms\n"
        f"FactStore.put_batch in-process, one thread, 50-row calls_v1 batches: "
        f"{out['put_ms']:.1f} ms per batch ({1000 / out['put_ms']:.0f} batches/s)"
    )


# ------------------------------------------------------------------------------ servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    start_s: float
    log: list[str] = field(default_factory=list)

    def query_log_after(self, mark: int, timeout_s: float = 2.0) -> tuple[int, float] | None:
        """``(rows, ms)`` of the first resident-query log line after line ``mark``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.log[mark:]:
                match = QUERY_LOG.search(line)
                if match:
                    return int(match.group(1)), float(match.group(2))
            time.sleep(0.01)
        return None


@contextlib.contextmanager
def serve(data_dir: Path, *, info_log: bool) -> Iterator[Server]:
    port = free_port()
    command = [sys.executable, __file__, "--worker", "serve", "--data", str(data_dir)]
    command += ["--port", str(port)] + (["--info-log"] if info_log else [])
    started = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    server = Server(f"http://127.0.0.1:{port}", 0.0)
    assert process.stderr is not None
    stream = process.stderr
    reader = threading.Thread(target=lambda: server.log.extend(stream), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 300
        while True:
            if process.poll() is not None:
                raise SystemExit("the control plane exited:\n" + "".join(server.log[-30:]))
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(server.url + "/healthz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("the control plane did not start in 300 s")
            time.sleep(0.05)
        server.start_s = time.perf_counter() - started
        yield server
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def issue_tokens(data_dir: Path) -> dict[Scope, str]:
    """A workload token per tenant (the metastore and key ring need no chDB)."""
    from baml_studio.control.identity import ControlKeys, TokenIssuer
    from baml_studio.control.metastore import Metastore

    config = ControlConfig.from_data_dir(data_dir)
    with Metastore.open(config.metastore_url) as ms:
        issuer = TokenIssuer(ControlKeys(config.keys_path).ring, ms)
        return {
            scope: issuer.issue_workload(scope.tenant, deployment, "cell-1", ttl_s=3600).token
            for scope, deployment in DEPLOYMENTS.items()
        }


def headers(token: str, **extra: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "X-Baml-Request-Id": f"req_{uuid.uuid4().hex}",
        **extra,
    }


def drop_caches() -> bool:
    """``sync`` and drop the page cache, dentries and inodes; ``False`` if not permitted."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


# ------------------------------------------------------------------------------ queries


@dataclass
class Timing:
    ms: float
    rows: int
    server_ms: float | None
    table: pa.Table


def snapshot(client: httpx.Client, token: str, scope: Scope) -> str:
    body = {
        "scope": {
            "tenant_id": scope.tenant,
            "project_id": scope.project,
            "environment_id": scope.environment,
        },
        "catalog_version": "v1",
    }
    answer = client.post("/query-snapshots", json=body, headers=headers(token))
    if answer.status_code != 200:
        raise SystemExit(f"query snapshot failed: {answer.status_code} {answer.text}")
    return str(answer.json()["snapshot_id"])


def run_query(server: Server, client: httpx.Client, token: str, scope: Scope, q: Query) -> Timing:
    snap = snapshot(client, token, scope)
    body = {"snapshot_id": snap, "sql": q.sql, "parameters": q.parameters, "budget": BUDGET}
    mark = len(server.log)
    started = time.perf_counter()
    answer = client.post("/resident-queries", json=body, headers=headers(token))
    if answer.status_code != 200:
        raise SystemExit(f"{q.label}: {answer.status_code} {answer.text}")
    with pa.ipc.open_stream(pa.BufferReader(answer.content)) as reader:
        table = reader.read_all()
    ms = (time.perf_counter() - started) * 1000
    logged = server.query_log_after(mark)
    return Timing(ms, table.num_rows, None if logged is None else logged[1], table)


def check_answer(q: Query, table: pa.Table, manifest: dict[str, Any], scope: Scope) -> str:
    """``""`` if the answer matches the generator, else what differs."""
    expected_calls = manifest[scope.tenant]["calls"]
    if scope == SCOPE_A:
        expected_calls += manifest.get("tn_a_ingested", 0)
    if q.check == "count":
        got = table.column("n")[0].as_py()
        return "" if got == expected_calls else f"count {got} != {expected_calls}"
    if q.check == "window":
        got = pc.sum(table.column("calls")).as_py()
        want = manifest["window_calls"]
        return "" if got == want else f"window calls {got} != {want}"
    if q.check == "top":
        got = table.column("duration_ns")[0].as_py() if table.num_rows else None
        want = manifest["max_duration"]
        ok = table.num_rows == 20 and got == want
        return "" if ok else f"top rows {table.num_rows}, max {got} != {want}"
    want = manifest["probe_calls"]
    return "" if table.num_rows == want else f"probe rows {table.num_rows} != {want}"


def compile_ms(q: Query, reps: int = 7) -> float:
    """Median ms of ``compile_resident`` for ``q`` in this (warm) process."""
    from baml_studio.control.facts import relation_select_sql
    from baml_studio.control.resident import QueryParameter, compile_resident

    def relation_sql(name: str) -> str:
        return relation_select_sql(name, "baml_facts", SCOPE_A, GENERATION)

    params = [QueryParameter(p["type"], p["value"]) for p in q.parameters]
    times = []
    for _ in range(reps + 1):
        started = time.perf_counter()
        compile_resident(q.sql, params, relation_sql=relation_sql)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times[1:])


def bench_queries(data_dir: Path, manifest: dict[str, Any], warm_runs: int) -> None:
    tokens = issue_tokens(data_dir)
    can_drop = os.access("/proc/sys/vm/drop_caches", os.W_OK)
    print(
        "\ncold: page cache dropped before a fresh server (sync; echo 3 > /proc/sys/vm/drop_caches)"
        if can_drop
        else "\ncold: fresh server; the page cache could NOT be dropped (not permitted)"
    )
    rows = []
    starts: list[float] = []
    snapshot_ms: list[float] = []
    problems = []
    for q in queries(manifest):
        dropped = drop_caches() if can_drop else False
        with (
            serve(data_dir, info_log=True) as server,
            httpx.Client(base_url=server.url, timeout=120) as client,
        ):
            starts.append(server.start_s)
            cold = run_query(server, client, tokens[SCOPE_A], SCOPE_A, q)
        with (
            serve(data_dir, info_log=True) as server,
            httpx.Client(base_url=server.url, timeout=120) as client,
        ):
            starts.append(server.start_s)
            fresh = run_query(server, client, tokens[SCOPE_A], SCOPE_A, q)
            warm = [
                run_query(server, client, tokens[SCOPE_A], SCOPE_A, q) for _ in range(warm_runs)
            ]
            for _ in range(3):
                started = time.perf_counter()
                snapshot(client, tokens[SCOPE_A], SCOPE_A)
                snapshot_ms.append((time.perf_counter() - started) * 1000)
            if q.check == "count":
                other = run_query(server, client, tokens[SCOPE_B], SCOPE_B, q)
                problem = check_answer(q, other.table, manifest, SCOPE_B)
                if problem:
                    problems.append(f"{q.label} (tn_b): {problem}")
        for timing in (cold, fresh, *warm):
            problem = check_answer(q, timing.table, manifest, SCOPE_A)
            if problem:
                problems.append(f"{q.label}: {problem}")
        worst = max(warm, key=lambda t: t.ms)
        rows.append((q, cold, fresh, worst, dropped))
    print_query_table(rows, warm_runs)
    print(
        f"server start (ControlPlane.open + uvicorn, to /healthz): median "
        f"{statistics.median(starts):.2f} s; POST /query-snapshots warm: median "
        f"{statistics.median(snapshot_ms):.1f} ms"
    )
    print(
        "answers checked against the generator (tn_a count, tn_b count, window calls, "
        "top duration, probe rows): " + ("all match" if not problems else "; ".join(problems))
    )
    print_direct(data_dir, {r[0].label: r[3].ms for r in rows}, warm_runs)
    print(loadavg())


def print_query_table(
    rows: list[tuple[Query, Timing, Timing, Timing, bool]], warm_runs: int
) -> None:
    head = (
        f"{'query':<30}{'rows':>5}{'cold ms':>9}{'fresh ms':>9}{'warm ms':>9}"
        f"{'cold/146':>9}{'warm/146':>9}{'warm/500':>9}{'CH cold':>9}{'CH warm':>9}{'compile':>8}"
    )
    print(head)
    print("-" * len(head))
    for q, cold, fresh, warm, _ in rows:
        print(
            f"{q.label:<30}{warm.rows:>5}{cold.ms:>9.1f}{fresh.ms:>9.1f}{warm.ms:>9.1f}"
            f"{cold.ms / POC_MS:>9.2f}{warm.ms / POC_MS:>9.2f}{warm.ms / TARGET_MS:>9.2f}"
            f"{_ms(cold.server_ms):>9}{_ms(warm.server_ms):>9}{compile_ms(q):>8.1f}"
        )
    cold_max = max(r[1].ms for r in rows)
    warm_max = max(r[3].ms for r in rows)
    print(
        f"cold = first run in a fresh server{DROPPED if rows[0][4] else ''}"
        f"; fresh = first run in another fresh server; warm = worst of the next {warm_runs}\n"
        "CH = the server's FactStore.query_arrow ms (its log); compile = compile_resident in "
        "this process (median of 7)\n"
        f"worst cold {cold_max:.0f} ms, worst warm {warm_max:.0f} ms; POC 146-170 ms; "
        f"target < 500 ms: cold {'met' if cold_max < TARGET_MS else 'NOT met'}, "
        f"warm {'met' if warm_max < TARGET_MS else 'NOT met'}"
    )


DROPPED = " after dropping the page cache"


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"


# ------------------------------------------------------------------------------ ingest


@dataclass
class IngestResult:
    scope: str
    threads: int
    rows_per_batch: int
    batches: int
    seconds: float
    latencies_ms: list[float]
    stats: dict[str, int]
    errors: int
    exhausted: bool
    landed: list[corpus_mod.Batch]

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.seconds

    @property
    def rows_per_s(self) -> float:
        return self.batches * self.rows_per_batch / self.seconds


def batch_headers(token: str, scope: Scope, b: corpus_mod.Batch) -> dict[str, str]:
    return headers(
        token,
        **{
            "Content-Encoding": "zstd",
            "Content-Type": "application/vnd.apache.arrow.stream",
            "X-Baml-Root-Id": b.root_id,
            "X-Baml-Project-Id": scope.project,
            "X-Baml-Environment-Id": scope.environment,
            "X-Baml-Relation": "calls_v1",
            "X-Baml-Partition": "0",
            "X-Baml-Projection-Generation": GENERATION,
            "X-Baml-Content-Digest": b.digest,
        },
    )


def run_ingest(
    server: Server,
    token: str,
    scope: Scope,
    batches: list[corpus_mod.Batch],
    threads: int,
    seconds: float,
) -> IngestResult:
    """``threads`` clients PUT batches from the shared pool into ``scope`` until ``seconds``
    pass (or the pool runs out); every PUT must answer 201."""
    counter = itertools.count()
    latencies: list[list[float]] = [[] for _ in range(threads)]
    landed: list[list[corpus_mod.Batch]] = [[] for _ in range(threads)]
    errors = [0] * threads
    before = httpx.get(server.url + "/_bench/stats").json()
    deadline = time.perf_counter() + seconds

    def client_loop(slot: int) -> None:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            while time.perf_counter() < deadline and (i := next(counter)) < len(batches):
                b = batches[i]
                started = time.perf_counter()
                answer = client.put(
                    f"/projection-batches/{b.batch_id}",
                    content=b.body,
                    headers=batch_headers(token, scope, b),
                )
                latencies[slot].append((time.perf_counter() - started) * 1000)
                if answer.status_code == 201:
                    landed[slot].append(b)
                else:
                    errors[slot] += 1
                    if errors[slot] == 1:
                        print(f"  batch refused: {answer.status_code} {answer.text[:300]}")

    started = time.perf_counter()
    workers = [threading.Thread(target=client_loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - started
    after = httpx.get(server.url + "/_bench/stats").json()
    flat = [ms for per in latencies for ms in per]
    return IngestResult(
        scope.tenant,
        threads,
        batches[0].rows,
        len(flat) - sum(errors),
        elapsed,
        flat,
        {k: after[k] - before[k] for k in after},
        sum(errors),
        len(flat) >= len(batches),
        [b for per in landed for b in per],
    )


INGEST_PLANS = {(1, 50): 100, (8, 50): 300, (32, 50): 400, (1, 2000): 50, (8, 2000): 100}
"""(client threads, rows per batch) → batches per second to pre-build (about 3x the rate
measured on the 2-core VM, so the pool lasts the run)."""


def bench_ingest(data_dir: Path, manifest: dict[str, Any], seconds: float) -> None:
    """Every plan into ``tn_a`` (the corpus's scope) and into a new environment of ``tn_i``
    (no facts) of the loaded control plane, one server, the same batches for both scopes. What lands
    in ``tn_a`` is added to the manifest, so the answer checks of a later run still hold."""
    print(f"\ningest: PUT /projection-batches, {seconds:.0f} s per run")
    seed = time.time_ns() % 2**31  # fresh root ids on every run, also in a kept store
    pools = {}
    for plan, per_second in INGEST_PLANS.items():
        started = time.perf_counter()
        seed += 1
        pools[plan] = corpus_mod.build_batches(int(per_second * seconds), plan[1], seed)
        built_s = time.perf_counter() - started
        print(f"  built {len(pools[plan])} {plan[1]}-row batches in {built_s:.1f} s")
    tokens = issue_tokens(data_dir)
    new = new_environment(data_dir, f"run_{seed}")
    tokens[new] = tokens[SCOPE_I]
    results: list[IngestResult] = []
    with serve(data_dir, info_log=False) as server:
        for scope in (SCOPE_A, new):
            for (threads, rows), batches in pools.items():
                result = run_ingest(server, tokens[scope], scope, batches, threads, seconds)
                print(
                    f"  {scope.tenant}: {threads:>2} threads x {rows:>4}-row batches: "
                    f"{result.batches} in {result.seconds:.1f} s"
                    f"{' (pool EXHAUSTED)' if result.exhausted else ''}",
                    flush=True,
                )
                results.append(result)
                if scope == SCOPE_A:
                    _record_landed(data_dir, manifest, result.landed)
    print_ingest_table(results)


def new_environment(data_dir: Path, environment: str) -> Scope:
    """A new environment of ``tn_i`` served by its deployment: a scope with no facts."""
    from baml_studio.control.metastore import Metastore

    scope = Scope(SCOPE_I.tenant, SCOPE_I.project, environment)
    with Metastore.open(ControlConfig.from_data_dir(data_dir).metastore_url) as ms:
        ms.create_environment(scope.tenant, scope.project, scope.environment)
        ms.assign_environment(DEPLOYMENTS[SCOPE_I], scope)
    return scope


def _record_landed(
    data_dir: Path, manifest: dict[str, Any], landed: list[corpus_mod.Batch]
) -> None:
    manifest["tn_a_ingested"] = manifest.get("tn_a_ingested", 0) + sum(b.rows for b in landed)
    manifest["window_calls"] += sum(b.window_calls for b in landed)
    manifest["max_duration"] = max([manifest["max_duration"], *(b.max_duration for b in landed)])
    (data_dir / MANIFEST).write_text(json.dumps(manifest, indent=1))


def print_ingest_table(results: list[IngestResult]) -> None:
    head = (
        f"{'scope':<8}{'threads':>7}{'rows/batch':>11}{'batches':>8}{'batches/s':>10}"
        f"{'rows/s':>9}{'p50 ms':>8}{'p99 ms':>8}{'inserts':>8}{'batch/ins':>10}"
        f"{'errors':>7}{'vs 1 thread':>12}"
    )
    print(head)
    print("-" * len(head))
    baseline = {(r.scope, r.rows_per_batch): r.batches_per_s for r in results if r.threads == 1}
    for r in sorted(results, key=lambda r: (r.scope != "tn_a", r.rows_per_batch, r.threads)):
        lat = np.array(r.latencies_ms)
        base = baseline.get((r.scope, r.rows_per_batch))
        inserts = r.stats.get("inserts", 0)
        print(
            f"{r.scope:<8}{r.threads:>7}{r.rows_per_batch:>11}{r.batches:>8}"
            f"{r.batches_per_s:>10.1f}{r.rows_per_s:>9,.0f}{np.percentile(lat, 50):>8.1f}"
            f"{np.percentile(lat, 99):>8.1f}{inserts:>8}"
            f"{(r.stats.get('batches', 0) / inserts if inserts else 0):>10.1f}{r.errors:>7}"
            f"{(r.batches_per_s / base if base else 0):>12.2f}"
        )
    print(
        "tn_a = the corpus's scope (all its calls), tn_i = a new environment (no facts), same "
        "control plane; vs 1 thread = batches/s over one client thread, same scope and batch "
        "size; inserts = coalesced fact inserts by the server (FactStore.stats)"
    )


# ------------------------------------------------------------------------------ main


def loadavg() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average (1, 5, 15 min): {one:.2f} {five:.2f} {fifteen:.2f}"


def machine() -> str:
    import chdb
    import clickhouse_connect

    return (
        f"{os.cpu_count()} cores, {platform.machine()}, Linux {platform.release()}, Python "
        f"{platform.python_version()}, chDB {chdb.__version__}, clickhouse-connect "
        f"{clickhouse_connect.__version__}, pyarrow {pa.__version__}"
    )


def load(data_dir: Path, calls: int) -> dict[str, Any]:
    path = data_dir / MANIFEST
    if path.exists():
        manifest: dict[str, Any] = json.loads(path.read_text())
        if manifest["calls"] == calls:
            print(f"reusing the corpus in {data_dir}")
            return manifest
        raise SystemExit(
            f"{data_dir} holds a corpus of {manifest['calls']:,} calls; use another --keep DIR"
        )
    if any(data_dir.iterdir()):
        raise SystemExit(f"{data_dir} is not empty and holds no corpus; use an empty --keep DIR")
    print(f"loading {calls:,} + {calls // 10:,} calls into {data_dir} (bulk path)", flush=True)
    command = [sys.executable, __file__, "--worker", "load", "--data", str(data_dir)]
    subprocess.run([*command, "--calls", str(calls)], check=True)
    return json.loads(path.read_text())


def print_load(manifest: dict[str, Any]) -> None:
    total = manifest["tn_a"]["calls"] + manifest["tn_b"]["calls"]
    executions = manifest["tn_a"]["executions"] + manifest["tn_b"]["executions"]
    print(
        f"corpus: tn_a {manifest['tn_a']['calls']:,} calls / {manifest['tn_a']['executions']:,} "
        f"executions, tn_b {manifest['tn_b']['calls']:,} / {manifest['tn_b']['executions']:,}"
        + (
            f"; plus {manifest['tn_a_ingested']:,} calls PUT into tn_a by earlier ingest runs"
            if manifest.get("tn_a_ingested")
            else ""
        )
    )
    print(
        f"load (bulk path): {total:,} calls + {executions:,} threads rows in "
        f"{manifest['load_s']:.1f} s = {total / manifest['load_s']:,.0f} calls/s "
        f"(generate {manifest['build_s']:.1f} s, insert {manifest['insert_s']:.1f} s = "
        f"{total / manifest['insert_s']:,.0f} rows/s); "
        f"OPTIMIZE FINAL {manifest['optimize_s']:.1f} s"
    )
    for table, (parts, rows, on_disk, raw) in sorted(manifest["parts"].items()):
        print(
            f"  {table}: {rows:,} rows, {parts} active parts, {on_disk / 1e9:.2f} GB on disk "
            f"({raw / 1e9:.2f} GB uncompressed)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=15_000_000, help="calls of tenant tn_a")
    parser.add_argument("--small", action="store_true", help="1,000,000 calls")
    parser.add_argument("--keep", type=Path, help="keep (and reuse) the control plane here")
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument("--skip-queries", action="store_true")
    parser.add_argument("--warm-runs", type=int, default=3)
    parser.add_argument("--ingest-seconds", type=float, default=10.0)
    parser.add_argument("--worker", choices=["load", "serve", "direct"], help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--info-log", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "load":
        corpus_mod.worker_load(args.data, args.calls)
        return
    if args.worker == "serve":
        worker_serve(args.data, args.port, args.info_log)
        return
    if args.worker == "direct":
        worker_direct(args.data, args.warm_runs)
        return
    calls = 1_000_000 if args.small else args.calls
    print(machine())
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        data_dir = args.keep.resolve()
    else:
        data_dir = Path(tempfile.mkdtemp(prefix="cp-bench-", dir="/tmp"))
    try:
        manifest = load(data_dir, calls)
        print_load(manifest)
        print(loadavg())
        if not args.skip_queries:
            bench_queries(data_dir, manifest, args.warm_runs)
        if not args.skip_ingest:
            bench_ingest(data_dir, manifest, args.ingest_seconds)
            print(loadavg())
    finally:
        if not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
