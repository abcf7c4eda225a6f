"""Query workload (issue 7): 13 frozen queries in four classes through the query coordinator.

    .venv/bin/python benchmarks/query_workload.py                      # 15,000,000 calls
    .venv/bin/python benchmarks/query_workload.py --calls 1000000 --data /tmp/qw-1m  # quick
    .venv/bin/python benchmarks/query_workload.py --data /tmp/qw --reuse   # reuse a load

1. **Load** (a child process, once per ``--data`` directory): the control plane's corpus of
   ``control_plane_corpus.py`` (``--calls`` public ``calls_v1`` rows of ``tn_a`` plus 10 % in
   ``tn_b``, through the fact store's client, then ``OPTIMIZE … FINAL``) with, for ``tn_a``,
   the private Lance datasets the coordinator reads, written by the bulk path of
   ``query_workload_corpus.py`` (value pools, ``calls_v1`` private rows, ``value_paths_v1``,
   ``values_v1``, ``projected_v1`` markers, the compaction's scalar indexes). The public
   ``args_cid`` / ``output_cid`` / ``error_cid`` of every call are those of its private value
   handles, and every ``values_v1`` body hashes to its CID.
2. **Queries**: each of :data:`WORKLOAD` through a
   :class:`~baml_studio.coordinator.service.Coordinator` in this process (``Coordinator.start``
   to the last NDJSON line; background queries with ``mode="background"``, the path a query
   job runs), over the real control plane served over HTTP by a child process
   (``control_plane.serve``: what ``serve control`` does) and the Lance datasets on local disk.
   **cold** = ``sync; echo 3 > /proc/sys/vm/drop_caches`` and the shared libraries read back
   (:func:`read_code`), a fresh control-plane server, a new coordinator (no snapshot cache)
   with an emptied read cache, first run; **warm** = the worst of the next three runs on that
   coordinator (read cache filled). Every answer is checked (:func:`check_answer`; s1-s3
   against the generator's own values, :func:`verify_search`).
3. **Table** beside the proof of concept's figures (``../shared/spec/system-contract.md``, query
   classes): per class the worst query against the POC range, and POC / ours.

``--reuse-datasets`` is an experiment, not the shipped path (``ReusedDatasets``). Timed figures
are not assertions: this is a program. Other work on the machine changes them; the load average
is printed before and after, and the coordinator's CPU time per run beside its wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import control_plane_corpus as corpus_mod
import query_workload_corpus as private_mod
from baml_studio.projector.lance_store import PrivateStore
from baml_studio.servergc import tune_for_serving
from control_plane import drop_caches, issue_tokens, loadavg, machine, serve
from control_plane_corpus import MANIFEST, SCOPE_A

DEFAULT_DATA = Path("/tmp/query-workload")
CLASSES = ("public", "values", "search", "background")
POC = {
    "public": ((146, 170), (146, 170)),
    "values": ((1074, 1074), (943, 943)),
    "search": ((1331, 1606), (959, 1055)),
    "background": ((9705, 9705), (2293, 2293)),
}
"""Class -> ((cold low, cold high), (warm low, warm high)) ms, proof of concept, 15 M calls."""
CLASS_TITLES = {
    "public": "public-only",
    "values": "read a call's values",
    "search": "private or mixed search and grouping",
    "background": "background (anti-join)",
}


# ------------------------------------------------------------------------------ the workload


@dataclass(frozen=True)
class Query:
    name: str
    kind: str
    """One of :data:`CLASSES` (the POC's classes, not the coordinator's classification)."""
    sql: str
    check: str = "rows"
    """What the answer must satisfy (:func:`check_answer`)."""
    background: bool = False


DAY = "$day"
HOURS6 = "$hours6"
PROBE = "$probe"
PROBE_CALL = "$probe_call"

WORKLOAD: tuple[Query, ...] = (
    Query(
        "p1 calls by function, last 24 h",
        "public",
        "SELECT fqn, count(*) AS calls FROM calls WHERE started_at >= $day "
        "GROUP BY fqn ORDER BY calls DESC",
        check="window",
    ),
    Query(
        "p2 top 20 by duration, one function, 24 h",
        "public",
        "SELECT execution_id, call_id, duration_ns FROM calls WHERE fqn = "
        "'support.ClassifyTicket' AND started_at >= $day ORDER BY duration_ns DESC LIMIT 20",
        check="top20",
    ),
    Query(
        "p3 error rate per function, 24 h",
        "public",
        "SELECT fqn, count(*) AS calls, sum(CASE WHEN status = 'errored' THEN 1 ELSE 0 END) "
        "AS errors FROM calls WHERE started_at >= $day GROUP BY fqn ORDER BY errors DESC",
        check="window",
    ),
    Query(
        "p4 one execution's call tree",
        "public",
        "SELECT call_id, parent_call_id, fqn, status, duration_ns FROM calls "
        "WHERE execution_id = $probe ORDER BY started_ns",
        check="probe",
    ),
    Query(
        "v1 one call's args and output",
        "values",
        "SELECT args, output FROM calls WHERE execution_id = $probe AND call_id = $probe_call",
        check="one",
    ),
    Query(
        "v2 one call's fields by path",
        "values",
        "SELECT fqn, args['ticket']['priority'] AS priority, output['summary'] AS summary "
        "FROM calls WHERE execution_id = $probe AND call_id = $probe_call",
        check="one",
    ),
    Query(
        "v3 one execution's calls with values",
        "values",
        "SELECT call_id, fqn, args, output, error FROM calls WHERE execution_id = $probe "
        "ORDER BY started_ns",
        check="probe",
    ),
    Query(
        "s1 path equality, one function, 6 h",
        "search",
        "SELECT execution_id, call_id, started_at FROM calls WHERE fqn = "
        "'support.ClassifyTicket' AND started_at >= $hours6 "
        "AND args['ticket']['priority'] = 'urgent' ORDER BY started_at DESC LIMIT 100",
    ),
    Query(
        "s2 substring in output text, 6 h",
        "search",
        "SELECT call_id, output['label'] AS label FROM calls WHERE fqn = "
        "'support.ClassifyTicket' AND started_at >= $hours6 "
        "AND output['summary'] LIKE '%refund%' ORDER BY call_id LIMIT 100",
    ),
    Query(
        "s3 group by a private field, 6 h",
        "search",
        "SELECT args['ticket']['priority'] AS priority, count(*) AS calls FROM calls "
        "WHERE fqn = 'support.ClassifyTicket' AND started_at >= $hours6 "
        "GROUP BY args['ticket']['priority'] ORDER BY calls DESC",
        check="candidates",
    ),
    Query(
        "s4 order by a value, limit, 6 h",
        "search",
        "SELECT call_id, args['invoice']['amount'] AS amount FROM calls WHERE fqn = "
        "'invoices.RankInvoice' AND started_at >= $hours6 "
        "AND args['invoice']['currency'] = 'EUR' ORDER BY args['invoice']['amount'] DESC "
        "LIMIT 20",
    ),
    Query(
        "b1 escalated tickets never answered, 24 h",
        "background",
        "SELECT c.execution_id, c.call_id FROM calls c WHERE c.fqn = 'support.ClassifyTicket' "
        "AND c.started_at >= $day AND c.output['label'] = 'escalate' AND NOT EXISTS "
        "(SELECT 1 FROM calls a WHERE a.execution_id = c.execution_id "
        "AND a.fqn = 'support.AnswerTicket' AND a.started_at >= $day) ORDER BY c.call_id",
        background=True,
    ),
    Query(
        "b2 ticket runs without an urgent ticket, 24 h",
        "background",
        "SELECT t.execution_id FROM threads t WHERE t.entry_fqn = 'support.HandleTicket' "
        "AND t.started_at >= $day AND t.execution_id NOT IN (SELECT execution_id FROM calls "
        "WHERE fqn = 'support.ClassifyTicket' AND started_at >= $day "
        "AND args['ticket']['priority'] = 'urgent') ORDER BY t.execution_id",
        background=True,
    ),
)


def bound_sql(q: Query, workload: dict[str, Any]) -> str:
    """``q.sql`` with the corpus's window starts and probe ids as literals."""
    end = corpus_mod.CORPUS_END
    values = {
        DAY: _timestamp(end - corpus_mod.DAY_NS),
        HOURS6: _timestamp(end - corpus_mod.DAY_NS // 4),
        PROBE_CALL: f"'{workload['probe']['call_id']}'",
        PROBE: f"'{workload['probe']['execution_id']}'",
    }
    text = q.sql
    for name, literal in values.items():  # longest first: $probe_call before $probe
        text = text.replace(name, literal)
    return text


def _timestamp(ns: int) -> str:
    return f"TIMESTAMP '{corpus_mod._iso(ns).rstrip('Z').replace('T', ' ')}'"


# ------------------------------------------------------------------------------ load


def load(data_dir: Path, calls: int, reuse: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    done = data_dir / private_mod.WORKLOAD_MANIFEST
    if done.exists() and reuse:
        workload = json.loads(done.read_text())
        if workload["calls"] != calls:
            raise SystemExit(
                f"{data_dir} holds {workload['calls']:,} calls, not {calls:,}: pass "
                f"--calls {workload['calls']} or another --data DIR"
            )
        print(f"reusing the corpus in {data_dir}")
        return json.loads((data_dir / MANIFEST).read_text()), workload
    if data_dir.exists() and any(data_dir.iterdir()):
        if not reuse and done.exists():
            raise SystemExit(f"{data_dir} holds a corpus: pass --reuse, or another --data DIR")
        raise SystemExit(f"{data_dir} is not empty and holds no finished corpus; empty it")
    data_dir.mkdir(parents=True, exist_ok=True)
    print(f"loading {calls:,} + {calls // 10:,} calls into {data_dir} (bulk path)", flush=True)
    command = [sys.executable, __file__, "--worker", "load", "--data", str(data_dir)]
    subprocess.run([*command, "--calls", str(calls)], check=True)
    return json.loads((data_dir / MANIFEST).read_text()), json.loads(done.read_text())


# ------------------------------------------------------------------------------ running


@dataclass
class Timing:
    ms: float
    rows: int
    state: str
    query_class: str
    stats: dict[str, int]
    evaluations: dict[str, Any]
    error: str = ""
    lines: list[str] = field(default_factory=list, repr=False)
    """The NDJSON row lines (parsed only by the checks, after the timing)."""
    cpu_ms: float = 0.0
    """CPU time of this process (the coordinator: every thread) during the query."""


@dataclass
class Result:
    query: Query
    cold: Timing
    warm: list[Timing] = field(default_factory=list)

    @property
    def worst_warm(self) -> Timing:
        return max(self.warm, key=lambda t: t.ms)


class Bench:
    """A coordinator over the served control plane and the corpus's Lance root."""

    def __init__(
        self, data_dir: Path, url: str, token: str, cache_dir: Path, *, reuse: bool = False
    ) -> None:
        from baml_studio.coordinator.config import CoordinatorConfig
        from baml_studio.coordinator.service import Coordinator
        from baml_studio.projector.control_client import ControlClient

        self.control = ControlClient(url, token, timeout_s=600.0)
        root = str(data_dir / private_mod.LANCE_DIR)
        store = private_mod.ReusedDatasets(root) if reuse else PrivateStore(root)
        self.coordinator = Coordinator(
            self.control, lambda scope: store, config=CoordinatorConfig(cache_dir=cache_dir)
        )
        tune_for_serving()  # as `baml-studio serve dataplane` does once it has started

    def run(self, q: Query, sql: str) -> Timing:
        from baml_studio.control.identity import UserIdentity
        from baml_studio.coordinator.run import QueryRequest, RequestBudget

        budget = RequestBudget(
            max_wall_ms=600_000 if q.background else 60_000,
            max_result_rows=1_000_000,
            max_result_bytes=1 << 30,
            max_private_bytes_read=64 << 30,
        )
        request = QueryRequest(sql, (), "v1", budget)
        user = UserIdentity(
            SCOPE_A.tenant, SCOPE_A.project, (SCOPE_A.environment,), False, "tok", "kid", 0, 2**40
        )
        mode = "background" if q.background else "interactive"
        started, cpu = time.perf_counter(), time.process_time()
        run = self.coordinator.start(request, user, mode=mode)
        lines = list(run.lines())
        ms = (time.perf_counter() - started) * 1000
        cpu_ms = (time.process_time() - cpu) * 1000
        outcome = json.loads(lines[-1])["queryOutcome"]
        s = run.stats
        stats = {
            "resident": s.resident_queries,
            "public_rows": s.public_rows,
            "scans": s.lance_scans,
            "lance_rows": s.lance_rows_read,
            "lance_bytes": s.lance_bytes_read,
        }
        error = outcome.get("error", {}).get("message", "")
        return Timing(
            ms,
            len(lines) - 1,
            outcome["resultState"],
            run.query_class or "?",
            stats,
            outcome["valueEvaluations"],
            error,
            lines[:-1],
            cpu_ms,
        )

    def close(self) -> None:
        self.control.close()


def probe_call(bench: Bench, probe: dict[str, Any]) -> str:
    """A ``support.*`` call of the probe execution with its arguments and output available (so
    the ``ticket`` paths of query v2 exist), else the loader's choice. Untimed; it also loads
    the query path's modules before the first timing."""
    q = Query("probe", "public", "")
    sql = (
        f"SELECT call_id FROM calls WHERE execution_id = '{probe['execution_id']}' AND fqn "
        "LIKE 'support.%' AND args_state = 'available' AND output_state = 'available' "
        "ORDER BY started_ns LIMIT 1"
    )
    lines = bench.run(q, sql).lines
    return str(json.loads(lines[0])["call_id"]) if lines else str(probe["call_id"])


def read_code() -> None:
    """Read the interpreter's and the packages' shared libraries back into the page cache
    after it was dropped: a cold run measures cold data, not the faults of 1.3 GB of code
    (``--code-cold`` skips this)."""
    roots = {Path(sys.prefix), Path(sys.base_prefix) / "lib"}
    for root in roots:
        for path in root.rglob("*.so*"):
            with contextlib.suppress(OSError), path.open("rb") as f:
                while f.read(16 << 20):
                    pass


def bench(
    data_dir: Path,
    workload: dict[str, Any],
    warm_runs: int,
    only: str,
    code_cold: bool,
    reuse_datasets: bool,
) -> list[Result]:
    token = issue_tokens(data_dir)[SCOPE_A]
    cache_dir = data_dir / "coordinator-cache"
    can_drop = os.access("/proc/sys/vm/drop_caches", os.W_OK)
    code = "" if code_cold else " (then the shared libraries read back: the code is warm)"
    print(
        "\ncold: page cache dropped (sync; echo 3 > /proc/sys/vm/drop_caches)"
        f"{code}, a fresh server, a new coordinator, an empty read cache"
        if can_drop
        else "\ncold: fresh server and coordinator; the page cache could NOT be dropped"
    )
    with serve(data_dir, info_log=False) as server:
        setup = Bench(data_dir, server.url, token, cache_dir)
        workload["probe"]["call_id"] = probe_call(setup, workload["probe"])
        setup.close()
    print(f"probe call {workload['probe']['call_id']}")
    results = []
    for q in WORKLOAD:
        if only and not any(part in q.name for part in only.split(",")):
            continue
        sql = bound_sql(q, workload)
        shutil.rmtree(cache_dir, ignore_errors=True)
        if can_drop:
            drop_caches()
            if not code_cold:
                read_code()
        with serve(data_dir, info_log=False) as server:
            bench_ = Bench(data_dir, server.url, token, cache_dir, reuse=reuse_datasets)
            try:
                result = Result(q, bench_.run(q, sql))
                result.warm = [bench_.run(q, sql) for _ in range(warm_runs)]
            finally:
                bench_.close()
        w = result.worst_warm
        print(
            f"  {q.name:<46} cold {result.cold.ms:8.1f} ms  warm {w.ms:8.1f} ms  "
            f"rows {w.rows:>6}  {w.state}",
            flush=True,
        )
        results.append(result)
    return results


def problems(
    results: list[Result], manifest: dict[str, Any], workload: dict[str, Any]
) -> list[str]:
    """What is wrong with any run's answer (empty: every answer checks out)."""
    out = []
    for r in results:
        for label, t in (("cold", r.cold), *(("warm", t) for t in r.warm)):
            if t.state not in ("complete", "incomplete"):
                out.append(f"{r.query.name} {label}: {t.state} {t.error}")
                continue
            problem = check_answer(r.query, t, manifest, workload)
            if problem:
                out.append(f"{r.query.name} {label}: {problem}")
        if len({t.lines[0] if t.lines else "" for t in (r.cold, *r.warm)}) != 1:
            out.append(f"{r.query.name}: the first row differs between runs")
    return out


def verify_search(results: list[Result], bench: Bench, workload: dict[str, Any]) -> list[str]:
    """Queries s1-s3 against the generator's values (``expected_search``): the candidates come
    from a public query, the expected answers from the decoded pool bodies."""
    ran = {r.query.name[:2]: r for r in results if r.query.name[:2] in ("s1", "s2", "s3")}
    if not ran:
        return []
    window = bound_sql(Query("", "", HOURS6), workload)
    sql = (
        "SELECT call_id, started_at, args_cid, output_cid FROM calls WHERE fqn = "
        f"'support.ClassifyTicket' AND started_at >= {window}"
    )
    rows = [json.loads(line) for line in bench.run(Query("", "public", ""), sql).lines]
    want = private_mod.expected_search(workload["calls"], rows)
    out = []
    for name, r in ran.items():
        got_rows = [json.loads(line) for line in r.cold.lines]
        got: Any = (
            {row["priority"]: row["calls"] for row in got_rows}
            if name == "s3"
            else [row["call_id"] for row in got_rows]
        )
        if got != want[name]:
            out.append(f"{r.query.name}: differs from the generator's answer")
    return out


def check_answer(q: Query, t: Timing, manifest: dict[str, Any], workload: dict[str, Any]) -> str:
    """``""`` if ``t``'s answer fits ``q.check``, else what differs. Every query must return
    rows; ``window``: the calls add up to the generator's count of the last 24 h; ``top20``:
    20 rows by descending duration; ``probe``: the probe execution's calls; ``one``: one row
    with no NULL; ``candidates``: the groups add up to the public candidates the query read."""
    rows = [json.loads(line) for line in t.lines]
    if not rows:
        return "no rows"
    if q.check == "window":
        got = sum(row["calls"] for row in rows)
        want = manifest["window_calls"]
        return "" if got == want else f"calls {got} != {want} (the generator's last 24 h)"
    if q.check == "top20":
        durations = [row["duration_ns"] for row in rows]
        ok = len(rows) == 20 and durations == sorted(durations, reverse=True)
        return "" if ok else f"{len(rows)} rows, durations not descending"
    if q.check == "probe":
        want = workload["probe"]["calls"]
        return "" if len(rows) == want else f"{len(rows)} rows != {want} probe calls"
    if q.check == "one":
        ok = len(rows) == 1 and None not in rows[0].values()
        return "" if ok else f"{len(rows)} rows: {rows[:1]}"
    if q.check == "candidates":
        got, want = sum(row["calls"] for row in rows), t.stats["public_rows"]
        return "" if got == want else f"groups add up to {got}, not the {want} candidates"
    return ""


# ------------------------------------------------------------------------------ tables


def print_results(results: list[Result], warm_runs: int) -> None:
    head = (
        f"{'query':<46}{'class':>8}{'rows':>7}{'cold ms':>10}{'warm ms':>10}{'POC cold':>12}"
        f"{'POC warm':>12}{'CPU cold':>9}{'CPU warm':>9}{'resid':>6}{'public':>9}{'scans':>6}"
        f"{'lance rows':>11}{'lance MB':>9}{'values (unav.)':>16}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        cold, warm = r.cold, r.worst_warm
        (c_lo, c_hi), (w_lo, w_hi) = POC[r.query.kind]
        s = cold.stats
        print(
            f"{r.query.name:<46}{cold.query_class:>8}{warm.rows:>7}{cold.ms:>10.1f}"
            f"{warm.ms:>10.1f}{_range(c_lo, c_hi):>12}{_range(w_lo, w_hi):>12}"
            f"{cold.cpu_ms:>9.0f}{warm.cpu_ms:>9.0f}{s['resident']:>6}{s['public_rows']:>9,}{s['scans']:>6}{s['lance_rows']:>11,}"
            f"{s['lance_bytes'] / 1e6:>9.1f}{_values(cold.evaluations):>16}"
        )
    print(
        f"cold = first run after dropping the page cache, fresh server and coordinator, empty "
        f"read cache; warm = worst of the next {warm_runs}; CPU = ms of CPU used by this process "
        "(the coordinator, all threads; not the control plane's) in that run; class = the "
        "coordinator's classification; resid = resident subqueries, public = public rows they "
        "returned, scans / lance rows / lance MB = Lance reads (Arrow bytes), values = value "
        "evaluations attempted (unavailable: lost or not captured, so the outcome is "
        "incomplete); all of the cold run"
    )
    print(
        f"\n{'class (POC)':<40}{'n':>3}{'worst cold':>12}{'worst warm':>12}{'POC cold':>12}"
        f"{'POC warm':>12}{'POC/ours cold':>15}{'POC/ours warm':>15}  goal: faster"
    )
    for kind in CLASSES:
        mine = [r for r in results if r.query.kind == kind]
        if not mine:
            continue
        cold = max(r.cold.ms for r in mine)
        warm = max(r.worst_warm.ms for r in mine)
        (c_lo, c_hi), (w_lo, w_hi) = POC[kind]
        met = cold < c_lo and warm < w_lo
        print(
            f"{CLASS_TITLES[kind]:<40}{len(mine):>3}{cold:>12.1f}{warm:>12.1f}"
            f"{_range(c_lo, c_hi):>12}{_range(w_lo, w_hi):>12}"
            f"{_ratio(c_lo, c_hi, cold):>15}{_ratio(w_lo, w_hi, warm):>15}  "
            + ("met" if met else "NOT met")
        )
    print(
        "POC/ours = the POC's figure (low-high of its range) / our worst query of the class; "
        "met = every query of the class below the low end, cold and warm"
    )


def _values(evaluations: dict[str, Any]) -> str:
    attempted, unavailable = evaluations.get("attempted", 0), evaluations.get("unavailable", 0)
    return f"{attempted:,} ({unavailable:,})"


def _range(lo: float, hi: float) -> str:
    return f"{lo:,.0f}" if lo == hi else f"{lo:,.0f}-{hi:,.0f}"


def _ratio(lo: float, hi: float, ours: float) -> str:
    return f"{lo / ours:.2f}" if lo == hi else f"{lo / ours:.2f}-{hi / ours:.2f}"


# ------------------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=15_000_000, help="calls of tenant tn_a")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the corpus directory")
    parser.add_argument("--reuse", action="store_true", help="reuse the corpus in --data")
    parser.add_argument("--load-only", action="store_true", help="load (or check) and stop")
    parser.add_argument("--warm-runs", type=int, default=3, help="at least 1")
    parser.add_argument(
        "--only",
        default="",
        help="run only the queries whose name holds one of these (comma-separated)",
    )
    parser.add_argument(
        "--code-cold", action="store_true", help="cold runs: do not read the libraries back"
    )
    parser.add_argument(
        "--reuse-datasets",
        action="store_true",
        help="experiment: keep opened Lance datasets (and their index caches) across queries",
    )
    parser.add_argument("--worker", choices=["load"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warm_runs < 1:
        parser.error("--warm-runs must be at least 1 (warm = the worst of those runs)")
    if args.worker == "load":
        private_mod.worker_load(args.data, args.calls)
        return
    print(machine())
    print(loadavg())
    data_dir = args.data.resolve()
    manifest, workload = load(data_dir, args.calls, args.reuse)
    private_mod.print_load(manifest, workload)
    print(
        f"probe execution {workload['probe']['execution_id']} ({workload['probe']['calls']} calls)"
    )
    print(loadavg())
    if args.load_only:
        return
    results = bench(
        data_dir,
        workload,
        args.warm_runs,
        args.only,
        args.code_cold,
        args.reuse_datasets,
    )
    print()
    print_results(results, args.warm_runs)
    found = problems(results, manifest, workload)
    with serve(data_dir, info_log=False) as server:
        token = issue_tokens(data_dir)[SCOPE_A]
        checker = Bench(data_dir, server.url, token, data_dir / "coordinator-cache")
        found += verify_search(results, checker, workload)
        checker.close()
    print(
        "answers (every run: outcome complete or incomplete, rows, the checks of check_answer;"
        " s1-s3 equal to the generator's answer): "
        + ("all pass" if not found else "; ".join(found))
    )
    print(loadavg())


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
