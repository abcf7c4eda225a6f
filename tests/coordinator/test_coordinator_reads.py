"""What the coordinator reads, proved with instrumentation (never timings): a public-only query
reads no Lance; a private or mixed query reads Lance only for the candidates its public part
pruned; facts whose Lance commit is held back are ``pending`` until it lands."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from coordinator_rig import CoordinatorRig, coordinator_over
from lance_probe import ProbedStore
from projector_fixtures import workload_store

from baml_studio.projector.lance_store import PROJECTED, VALUES

__all__ = ["workload_store"]

PUBLIC = [
    "SELECT fqn, count(*) AS n FROM calls GROUP BY fqn ORDER BY fqn",
    "SELECT execution_id, status FROM threads WHERE parent_thread_id IS NULL",
    "SELECT c.fqn, e.kind FROM calls c JOIN errors e ON e.execution_id = c.execution_id "
    "AND e.error_id = c.error_id",
    "SELECT metric, sum(value) AS v FROM health GROUP BY metric",
    "SELECT fqn, args_state, count(*) AS n FROM calls GROUP BY fqn, args_state",
]


@pytest.fixture(scope="module")
def probed(
    tmp_path_factory: pytest.TempPathFactory, chdb_dsn: str, workload_store: Path
) -> Iterator[tuple[CoordinatorRig, ProbedStore]]:
    tmp = tmp_path_factory.mktemp("reads")
    with coordinator_over(tmp, chdb_dsn, f"t_{uuid.uuid4().hex[:16]}", workload_store) as rig:
        probe = ProbedStore(rig.ingest.private)
        rig.coordinator.private_store = lambda scope: probe  # type: ignore[assignment,return-value]
        yield rig, probe


@pytest.mark.parametrize("sql", PUBLIC)
def test_a_public_only_query_reads_no_lance(
    probed: tuple[CoordinatorRig, ProbedStore], sql: str
) -> None:
    rig, probe = probed
    before = len(probe.scans)
    answer = rig.remote(sql)
    assert answer.outcome["resultState"] == "complete" and answer.rows
    assert answer.run.query_class == "public"
    assert probe.scans[before:] == []
    assert answer.run.stats.lance_scans == 0 and answer.run.stats.lance_bytes_read == 0
    assert answer.run.resident_sql == [answer.run.resident_sql[0]]  # one resident subquery


def test_reading_a_calls_values_reads_only_that_execution(
    probed: tuple[CoordinatorRig, ProbedStore],
) -> None:
    rig, probe = probed
    (one,) = rig.local(
        "SELECT execution_id FROM threads WHERE parent_thread_id IS NULL "
        "ORDER BY execution_id LIMIT 1 OFFSET 3"
    ).rows
    execution = one["execution_id"]
    before = len(probe.scans)
    answer = rig.remote(
        f"SELECT call_id, args, output FROM calls WHERE execution_id = '{execution}' "
        "ORDER BY call_id"
    )
    assert answer.run.query_class == "private"
    assert answer.rows and answer.outcome["resultState"] == "complete"
    scans = probe.scans[before:]
    # value handles follow from the public state and CID: no calls_v1 row is read for them
    assert [s for s in scans if s.dataset not in (VALUES, PROJECTED)] == []
    assert all(s.version is not None for s in scans)  # every read at the bound version
    cids = {
        r["args_cid"]
        for r in rig.local(
            f"SELECT args_cid FROM calls WHERE execution_id = '{execution}' "
            "AND args_cid IS NOT NULL UNION SELECT output_cid FROM calls WHERE execution_id = "
            f"'{execution}' AND output_cid IS NOT NULL"
        ).rows
    }
    read = set().union(*(s.cids for s in scans if s.dataset == VALUES))
    assert read and read <= cids
    before = len(probe.scans)
    answer = rig.remote(  # a private column that is not a handle: read from calls_v1
        f"SELECT call_id, call_site_file, args FROM calls WHERE execution_id = '{execution}'"
    )
    assert answer.rows and answer.outcome["resultState"] == "complete"
    relation_scans = [s for s in probe.scans[before:] if s.dataset not in (VALUES, PROJECTED)]
    assert relation_scans and all(s.execution_ids == {execution} for s in relation_scans)


def test_a_mixed_query_reads_lance_only_within_the_pruned_candidates(
    probed: tuple[CoordinatorRig, ProbedStore],
) -> None:
    rig, probe = probed
    candidates = {
        r["execution_id"]
        for r in rig.local(
            "SELECT DISTINCT execution_id FROM calls WHERE fqn = 'ScoreCustomer'"
        ).rows
    }
    everything = {
        r["execution_id"] for r in rig.local("SELECT DISTINCT execution_id FROM calls").rows
    }
    assert candidates and candidates < everything
    candidate_cids = {
        r["args_cid"]
        for r in rig.local(
            "SELECT args_cid FROM calls WHERE fqn = 'ScoreCustomer' AND args_cid IS NOT NULL"
        ).rows
    }
    rig.coordinator.shared.values.clear()  # so the values are read here, not served from memory
    for sql in (
        "SELECT call_id, args['customer']['age'] AS age FROM calls "
        "WHERE fqn = 'ScoreCustomer' AND args['customer']['age'] >= 30 ORDER BY call_id",
        "SELECT call_id, call_site_file, args['customer']['age'] AS age FROM calls "
        "WHERE fqn = 'ScoreCustomer' AND args['customer']['age'] >= 30 ORDER BY call_id",
    ):
        before = len(probe.scans)
        answer = rig.remote(sql)
        assert answer.run.query_class == "mixed" and answer.rows
        scans = probe.scans[before:]
        values_read = set().union(*(s.cids for s in scans if s.dataset == VALUES))
        assert values_read <= candidate_cids
        relation_scans = [s for s in scans if s.dataset == "calls_v1"]
        read = set().union(*(s.execution_ids for s in relation_scans))
        assert read <= candidates
        if "call_site_file" in sql:
            assert read
            fqn_calls = rig.local(
                "SELECT count(*) AS n FROM calls WHERE execution_id IN ("
                + ", ".join(f"'{e}'" for e in sorted(candidates))
                + ")"
            ).rows[0]["n"]
            assert sum(s.rows for s in relation_scans) <= fqn_calls
        else:
            assert relation_scans == [] and values_read  # handles from public columns
        assert any("fqn = 'ScoreCustomer'" in q for q in answer.run.resident_sql)


def test_every_lance_read_of_a_query_uses_one_bound_version(
    probed: tuple[CoordinatorRig, ProbedStore],
) -> None:
    rig, probe = probed
    before = len(probe.scans)
    answer = rig.remote(
        "SELECT e.value, c.args FROM errors e JOIN calls c "
        "ON c.execution_id = e.execution_id AND c.call_id = e.throw_call_id"
    )
    bound = answer.run._snapshot.dataset_versions  # reason: the run's bound snapshot
    for scan in probe.scans[before:]:
        assert scan.version == bound[scan.dataset]
    assert answer.outcome["snapshot"]["lanceVersion"] == bound[PROJECTED]


class HeldBack:
    """The worker's private store with its execution writes held (the Lance commit delayed)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.held: list[Any] = []

    def write_executions(self, executions: Any, **kwargs: Any) -> None:
        self.held.append((list(executions), kwargs))

    def write_execution(self, *args: Any) -> None:
        self.held.append(([args], {}))

    def release(self) -> None:
        for executions, kwargs in self.held:
            self._store.write_executions(executions, **kwargs)
        self.held.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_facts_without_their_lance_commit_are_pending_then_indexed(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    with coordinator_over(tmp_path, chdb_dsn, fact_database, workload_store, project=False) as rig:
        held = HeldBack(rig.ingest.private)
        rig.ingest.worker.private_store = lambda scope: held
        rig.ingest.worker.drain()
        assert held.held  # facts are in ClickHouse, the private rows are not committed
        sql = "SELECT execution_id, call_id, args, call_site_line FROM calls ORDER BY call_id"
        before = rig.remote(sql)
        local = rig.local(sql).rows
        assert len(before.rows) == len(local)
        state = before.outcome["privateState"]
        assert state == {"indexed": 0, "pending": len(local)}
        evaluations = before.outcome["valueEvaluations"]
        assert evaluations["byReason"].get("pending", 0) > 0
        assert before.outcome["resultState"] == "incomplete"
        # a value predicate over pending rows is not a non-match: it is counted as pending
        pred = rig.remote("SELECT count(*) AS n FROM calls WHERE args['customer']['age'] >= 0")
        assert pred.outcome["valueEvaluations"]["byReason"].get("pending", 0) > 0
        assert pred.outcome["resultState"] == "incomplete"
        public = rig.remote("SELECT count(*) AS n FROM calls")
        assert public.rows == [{"n": len(local)}] and public.outcome["resultState"] == "complete"

        held.release()
        after = rig.remote(sql)
        assert after.rows == local
        assert after.outcome["privateState"] == {"indexed": len(local), "pending": 0}
        assert (
            after.outcome["snapshot"]["lanceVersion"] > before.outcome["snapshot"]["lanceVersion"]
        )


def test_without_a_value_index_nothing_is_pruned(
    probed: tuple[CoordinatorRig, ProbedStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    from baml_studio.projector.lance_store import VALUE_PATHS

    rig, _ = probed
    real_bind = rig.coordinator.binder.bind

    def without_index(*args: Any, **kwargs: Any) -> Any:
        bound = real_bind(*args, **kwargs)
        versions = {k: v for k, v in bound.dataset_versions.items() if k != VALUE_PATHS}
        return dataclasses.replace(bound, dataset_versions=versions)

    monkeypatch.setattr(rig.coordinator.binder, "bind", without_index)
    sql = (
        "SELECT call_id, args['customer']['age'] AS age FROM calls "
        "WHERE args['customer']['age'] >= 30 ORDER BY call_id"
    )
    answer = rig.remote(sql)
    assert answer.rows and answer.rows == rig.local(sql).rows
    assert answer.run.stats.index_lookups == 0 and answer.run.stats.index_pruned_rows == 0


def test_chunked_lance_reads_run_in_parallel_and_keep_the_answer(
    probed: tuple[CoordinatorRig, ProbedStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    from baml_studio.coordinator import source

    rig, probe = probed
    monkeypatch.setattr(source, "ID_CHUNK", 2)  # many chunks, so the scan pool runs several
    rig.coordinator.shared.values.clear()
    sql = (
        "SELECT call_id, call_site_file, args, output FROM calls "
        "WHERE args['customer']['age'] >= 0 ORDER BY call_id"
    )
    before = len(probe.scans)
    answer = rig.remote(sql)
    assert answer.rows and answer.rows == rig.local(sql).rows
    scans = probe.scans[before:]
    assert sum(1 for s in scans if s.dataset == "calls_v1") > source.SCAN_THREADS
    assert sum(1 for s in scans if s.dataset == VALUES) > source.SCAN_THREADS
    assert len({s.thread for s in scans if s.thread.startswith("lance-scan")}) > 1
    bound = answer.run._snapshot.dataset_versions  # reason: the run's bound snapshot
    assert all(s.version == bound[s.dataset] for s in scans)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT call_id, args FROM calls WHERE args['customer']['age'] >= 0 ORDER BY call_id",
        "SELECT args['customer']['age'] AS age, count(*) AS n FROM calls "
        "GROUP BY args['customer']['age']",
    ],
)
def test_a_finished_query_frees_its_resolver_and_decoded_values(
    probed: tuple[CoordinatorRig, ProbedStore], sql: str
) -> None:
    import gc
    import weakref

    rig, _ = probed
    answer = rig.remote(sql)
    assert answer.rows and answer.outcome["resultState"] in ("complete", "incomplete")
    result = answer.run._engine_result  # reason: the engine result whose lifetime is tested
    resolver = weakref.ref(result._resolver)
    del answer, result
    gc.collect()
    # the session's UDFs (held in Rust) reach the resolver, which reaches the run: a cycle
    # the collector cannot see unless the result drops its frames when it finishes
    assert resolver() is None


def test_a_repeated_query_reuses_decoded_values_and_answers_the_same(
    probed: tuple[CoordinatorRig, ProbedStore],
) -> None:
    rig, _ = probed
    decoded = rig.coordinator.shared.decoded
    decoded.clear()
    sql = "SELECT call_id, args['customer']['age'] AS age FROM calls ORDER BY call_id"
    first = rig.remote(sql)
    hits = decoded.hits
    second = rig.remote(sql)
    assert first.rows and first.rows == second.rows == rig.local(sql).rows
    assert first.outcome["valueEvaluations"] == second.outcome["valueEvaluations"]
    assert decoded.hits > hits and len(decoded) > 0
    rig.coordinator.forget_values()  # after an erasure: nothing decoded is kept
    assert len(decoded) == 0


def test_a_running_query_keeps_its_versions_through_a_compaction(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    """The versions a query binds are leased: a compaction with no retention at all, run
    while the query is bound but has read nothing, removes older versions but not those."""
    import dataclasses
    import json
    import time
    from datetime import timedelta

    from coordinator_rig import BUDGET, identity, request
    from lance_fixtures import invoice

    from baml_studio.coordinator.config import CoordinatorConfig
    from baml_studio.projector.version_leases import EXTEND_S, LEASE_DIR, decode_leases

    config = CoordinatorConfig(max_wall_ms=120_000)
    with coordinator_over(tmp_path, chdb_dsn, fact_database, workload_store, config=config) as rig:
        sql = "SELECT call_id, args, output FROM calls ORDER BY call_id"
        expected = rig.local(sql).rows
        store = rig.ingest.private
        time.sleep(0.1)  # a newest values_v1 version well after the others
        store.ingest_values([invoice(10_000)])
        started = time.time()
        run = rig.coordinator.start(request(sql), identity())  # bound, nothing read yet
        bound = run.bound.dataset_versions
        leases = sorted((Path(rig.ingest.private.root_uri) / LEASE_DIR).glob("*.json"))
        assert len(leases) == 1
        (lease,) = decode_leases(leases[0].read_bytes())
        assert lease.versions == {name: v for name, v in bound.items() if v}
        # the request asked for 60 s: the lease covers it, with the spare minute
        assert lease.expires_at >= started + BUDGET.max_wall_ms / 1000 + EXTEND_S

        report = store.compact(timedelta(0), superseded_grace=timedelta(0))
        by_name = {d.name: d for d in report.datasets}
        assert by_name[VALUES].versions_removed > 0  # it did remove the older versions
        kept = {d.name: d.kept_from_version for d in report.datasets}
        assert kept[PROJECTED] == bound[PROJECTED] and kept[VALUES] == bound[VALUES]
        assert all(store.version()[name] > v for name, v in bound.items() if v)

        lines = [json.loads(line) for line in run.lines()]
        assert lines[-1]["queryOutcome"]["resultState"] == "complete"
        assert lines[:-1] == expected

        # a wall budget over the configured longest query is capped to it
        huge = dataclasses.replace(BUDGET, max_wall_ms=10**9)
        long = rig.coordinator.start(request(sql, budget=huge), identity())
        assert long.budget.max_wall_ms == 120_000
        for _ in long.lines():
            pass


def test_the_engine_gets_what_is_left_of_the_wall_budget(
    probed: tuple[CoordinatorRig, ProbedStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wall budget runs from the bind (when the versions were leased for it), so the
    engine is given what is left of it, not the whole budget again."""
    import time

    from coordinator_rig import BUDGET, identity, request

    from baml_studio.coordinator import execute

    rig, _ = probed
    given: list[float] = []
    real = execute.QueryEngine

    def capturing(source: Any, budgets: Any, **kwargs: Any) -> Any:
        given.append(budgets.max_wall_s)
        return real(source, budgets, **kwargs)

    monkeypatch.setattr(execute, "QueryEngine", capturing)
    run = rig.coordinator.start(request("SELECT call_id, args FROM calls"), identity())
    time.sleep(0.5)
    lines = list(run.lines())
    assert len(lines) > 1 and len(given) == 1
    assert given[0] <= BUDGET.max_wall_ms / 1000 - 0.5


def test_a_background_run_gets_its_whole_budget_from_its_first_line(
    probed: tuple[CoordinatorRig, ProbedStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A background job may wait in the queue after its snapshot was bound: its wall budget
    runs from its first line, and its versions are leased for the budget again then."""
    import time

    from coordinator_rig import BUDGET, identity, request

    from baml_studio.coordinator import execute
    from baml_studio.projector.version_leases import LEASE_DIR, MIN_SPARE_S, decode_leases

    rig, _ = probed
    given: list[tuple[float, float]] = []
    real = execute.QueryEngine

    def capturing(source: Any, budgets: Any, **kwargs: Any) -> Any:
        given.append((budgets.max_wall_s, time.monotonic()))
        return real(source, budgets, **kwargs)

    renewed: list[float] = []
    renew = rig.coordinator.renew

    def spying(snapshot: Any, hold_s: float) -> None:
        renewed.append(hold_s)
        renew(snapshot, hold_s)

    monkeypatch.setattr(execute, "QueryEngine", capturing)
    monkeypatch.setattr(rig.coordinator, "renew", spying)
    run = rig.coordinator.start(
        request("SELECT call_id, args FROM calls"), identity(), mode="background"
    )
    time.sleep(1.5)  # queued
    began, began_wall = time.monotonic(), time.time()
    lines = list(run.lines())
    assert len(lines) > 1 and len(given) == 1
    (left_s, at), budget_s = given[0], BUDGET.max_wall_ms / 1000
    # all of the budget but what passed since the first line (not since the bind)
    assert left_s >= budget_s - (at - began) - 0.01
    leases = [
        lease
        for path in (Path(rig.ingest.private.root_uri) / LEASE_DIR).glob("*.json")
        for lease in decode_leases(path.read_bytes())
        if lease.versions == {name: v for name, v in run.bound.dataset_versions.items() if v}
    ]
    assert renewed == [budget_s]
    # the entry is rewritten only when it would not cover the renewed budget with MIN_SPARE_S
    assert max(lease.expires_at for lease in leases) >= began_wall + budget_s + MIN_SPARE_S
