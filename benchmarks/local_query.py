"""Local query latency over a profiles-v1 store, against raw decoding baselines in the same run.

Store: 1,000 synthetic executions written by 50 processes (``baml_studio.workload``), built
once under ``--store`` (default: a temp dir) and reused if it already holds a store.

Queries (reference issue goals in brackets):

* **count roots** — ``SELECT count(*) FROM threads WHERE parent_thread_id IS NULL`` [< 50 ms,
  opening no data file]. Baseline: decoding every meta segment of the store.
* **one execution's call_path_stats** (warm) — ``… FROM call_path_stats WHERE execution_id =
  '…'`` [< 100 ms]. Baseline: reading and decoding that execution's data groups.
* **first batch of a full call_path_stats scan** (cold) — time to the first streamed row of
  ``SELECT * FROM call_path_stats`` [< 500 ms]. Baseline: decoding every data segment.
* **value predicate** — ``SELECT call_id, args['customer']['age'] … WHERE
  args['customer']['age'] >= 30`` (cold and warm). Baseline: reading and decoding every codec-1
  value the predicate looks at, straight from the CAS.

"cold" builds a new source (no fold cache); "warm" repeats on the same source. Medians of
``--reps`` runs. A Python audit hook counts ``.bamldata`` files opened by the count query.

Run: ``.venv/bin/python benchmarks/local_query.py [--store DIR] [--reps 5]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from baml_studio.catalog.local import LocalStoreSource
from baml_studio.format.data import decode_data_segment
from baml_studio.format.meta import decode_meta_segment
from baml_studio.format.values import decode_value
from baml_studio.query import QueryEngine
from baml_studio.store import StoreReader
from baml_studio.workload import run_workload

COUNT_ROOTS = "SELECT count(*) AS n FROM threads WHERE parent_thread_id IS NULL"
ONE_EXECUTION = "SELECT * FROM call_path_stats WHERE execution_id = '{id}'"
FULL_SCAN = "SELECT * FROM call_path_stats"
VALUE_PREDICATE = (
    "SELECT call_id, args['customer']['age'] AS age FROM calls "
    "WHERE fqn = 'ScoreCustomer' AND args['customer']['age'] >= 30"
)
DATA_OPENS: list[str] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and args and str(args[0]).endswith(".bamldata"):
        DATA_OPENS.append(str(args[0]))


def ensure_store(root: Path, executions: int, processes: int) -> None:
    if (root / "streams").is_dir():
        return
    started = time.perf_counter()
    run_workload(root, executions=executions, processes=processes, seed=0)
    print(f"built {executions} executions x {processes} processes in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip


def median_ms(run: Callable[[], object], reps: int) -> float:
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        run()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def query(engine: QueryEngine, sql: str, *, first_only: bool = False) -> int:
    result = engine.execute(sql)
    count = 0
    for _ in result:
        count += 1
        if first_only:
            result.close()
            return count
    outcome = result.outcome()
    if outcome["resultState"] not in ("complete", "incomplete"):
        raise SystemExit(f"query failed: {outcome}")
    return count


def baseline_meta(root: Path) -> int:
    records = 0
    for path in root.glob("streams/*/meta/*.bamlmeta"):
        records += len(decode_meta_segment(path.read_bytes()).records)
    return records


def baseline_data(root: Path, roots: Any = None) -> int:
    groups = 0
    for path in root.glob("streams/*/data/*.bamldata"):
        groups += len(decode_data_segment(path.read_bytes(), roots=roots).groups)
    return groups


def baseline_execution(reader: StoreReader, source: LocalStoreSource, execution_id: str) -> int:
    meta = next(m for m in source.index.executions if m.execution_id == execution_id)
    assert meta.ended is not None
    groups = 0
    for seq in range(meta.ended.data_first_seq, meta.ended.data_last_seq + 1):
        groups += len(reader.read_data(meta.root.euid, seq, roots=[meta.root]).groups)
    return groups


def baseline_values(reader: StoreReader, cids: list[bytes]) -> int:
    for cid in cids:
        decode_value(reader.read_cas(cid).body)
    return len(cids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, default=None, help="store dir (built if empty)")
    parser.add_argument("--executions", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=50)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    tmp = None
    if args.store is None:
        tmp = tempfile.TemporaryDirectory(prefix="baml-local-query-")
        args.store = Path(tmp.name) / ".baml" / "profiles-v1"
    root: Path = args.store
    ensure_store(root, args.executions, args.processes)
    reader = StoreReader(root)
    warm = LocalStoreSource(root)
    warm_engine = QueryEngine(warm)
    executions = warm.execution_ids()
    target = executions[len(executions) // 2]
    cids = [
        bytes.fromhex(row["args_cid"][len("bamlv_1_") :])
        for row in QueryEngine(LocalStoreSource(root)).execute(
            "SELECT args_cid FROM calls WHERE fqn = 'ScoreCustomer' AND args_cid IS NOT NULL"
        )
    ]
    sys.addaudithook(_audit)
    DATA_OPENS.clear()
    (counted,) = list(QueryEngine(LocalStoreSource(root)).execute(COUNT_ROOTS))
    opened = len(DATA_OPENS)
    n = counted["n"]
    rows = [
        ("count roots (cold)", lambda: query(QueryEngine(LocalStoreSource(root)), COUNT_ROOTS),
         "decode every meta segment", lambda: baseline_meta(root), 50),
        ("one execution's call_path_stats (warm)",
         lambda: query(warm_engine, ONE_EXECUTION.format(id=target)),
         "decode its data groups", lambda: baseline_execution(reader, warm, target), 100),
        ("first batch of full call_path_stats (cold)",
         lambda: query(QueryEngine(LocalStoreSource(root)), FULL_SCAN, first_only=True),
         "decode every data segment", lambda: baseline_data(root), 500),
        ("value predicate (cold)",
         lambda: query(QueryEngine(LocalStoreSource(root)), VALUE_PREDICATE),
         "decode the values it reads", lambda: baseline_values(reader, cids), None),
        ("value predicate (warm)", lambda: query(warm_engine, VALUE_PREDICATE),
         "decode the values it reads", lambda: baseline_values(reader, cids), None),
    ]  # fmt: skip
    query(warm_engine, ONE_EXECUTION.format(id=target))  # warm the caches
    query(warm_engine, VALUE_PREDICATE)
    print(f"store: {root} ({len(executions)} executions, {n} roots counted; "
          f"data files opened while counting: {opened})")  # fmt: skip
    print(f"Python {sys.version.split()[0]}, median of {args.reps} runs")
    header = f"{'query':<44}{'ms':>9}  {'baseline':<28}{'ms':>9}{'ratio':>8}  goal"
    print(header)
    print("-" * len(header))
    for label, run, base_label, base, goal in rows:
        ms = median_ms(run, args.reps)
        base_ms = median_ms(base, args.reps)
        verdict = "" if goal is None else f"< {goal} ms: {'met' if ms < goal else 'NOT met'}"
        print(f"{label:<44}{ms:>9.1f}  {base_label:<28}{base_ms:>9.1f}{ms / base_ms:>8.2f}  "
              f"{verdict}")  # fmt: skip
    print(f"values read by the predicate: {len(cids)}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
