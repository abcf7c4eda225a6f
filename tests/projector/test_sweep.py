"""The sweep: a process killed mid-execution is closed as ``abandoned`` exactly as the local
catalog reports it (whole ingest path: publisher, gateway, worker, control plane, Lance);
fresh streams are untouched; repeats change nothing; ``--dry-run`` writes nothing; a late
RootEnded is kept out (the message goes on) and :func:`reopen` lets it project; gaps, the
walk bound, listing times, pending values and refusals at the library level; the CLI."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner
from killed_profiler import abandoned_ids, killed_store
from projector_e2e_rig import Ingest, assert_same_relations, ingest_path
from projector_fixtures import (
    SCOPE,
    MemoryStore,
    assert_same,
    copy_store,
    entry_names,
    local_expected,
    reassemble,
    upload_store,
    walk_store,
)

from baml_studio.catalog import LocalStoreSource
from baml_studio.cli_sweep import sweep_command
from baml_studio.control.identity import TokenIssuer
from baml_studio.format.records import RootEnded, RootStarted
from baml_studio.gateway.keys import segment_key
from baml_studio.objectstore.errors import ObjectStoreUnavailable
from baml_studio.objectstore.port import ObjectInfo
from baml_studio.projector.control_client import ControlClient
from baml_studio.projector.errors import ControlPlaneRefused, EvidenceUnavailable
from baml_studio.projector.evidence import EvidenceReader
from baml_studio.projector.gather import gather_abandoned, gather_root_ended
from baml_studio.projector.lance_store import PrivateStore
from baml_studio.projector.project import project_execution
from baml_studio.projector.sweep import (
    SweepReport,
    discover_scopes,
    last_activity_s,
    list_streams,
    open_executions,
    reopen,
    sweep,
)
from baml_studio.publisher import Publisher
from baml_studio.store import Plane, StoreLayout, StoreReader

__all__ = ["killed_store", "walk_store"]

HOUR = 3600.0
FAR = 10 * 365 * 24 * HOUR
"""Added to the wall clock: every stream of these tests is silent by then."""

# --- helpers ------------------------------------------------------------------------------------


def restrict(tables: dict[str, pa.Table], ids: list[str], *, keep: bool) -> dict[str, pa.Table]:
    """Rows of ``ids`` only (``keep``) or all but theirs; relations without ``execution_id``
    (function definitions) as they are."""
    out = {}
    wanted = pa.array(ids, pa.string())
    for name, table in tables.items():
        if "execution_id" not in table.column_names:
            out[name] = table
            continue
        mask = pc.is_in(table["execution_id"], value_set=wanted)
        out[name] = table.filter(mask if keep else pc.invert(mask))
    return out


def facts_but_definitions(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """The walk store registers a function late: its two engines share a program id with
    different function tables, and the local catalog keeps one table per program id while
    the projector sends each execution's own (a worker-side difference, not the sweep's)."""
    return {name: t for name, t in tables.items() if name != "function_definitions_v1"}


def same_but_definitions(ingest: Ingest) -> None:
    got, want = ingest.projected_tables(), ingest.local_tables()
    assert_same_relations(facts_but_definitions(got), facts_but_definitions(want))


def root_row(ingest: Ingest, execution_id: str) -> dict[str, Any]:
    threads = ingest.control.facts.rows("threads_v1", SCOPE, ingest.generation()).to_pylist()
    return next(r for r in threads if r["thread_id"] == execution_id)


def counts(ingest: Ingest) -> dict[str, int]:
    return {name: t.num_rows for name, t in ingest.projected_tables().items()}


def run_sweep(ingest: Ingest, *, now: float, **kwargs: Any) -> SweepReport:
    return sweep(
        ingest.dataplane.store,
        SCOPE,
        ingest.client,
        ingest.private,
        silence_limit_s=HOUR,
        now=now,
        **kwargs,
    )


def puts(ingest: Ingest) -> int:
    return sum(1 for r in ingest.captured if r.method == "PUT")


def meta_holding(root: Path, record_type: type, execution_id: str) -> tuple[bytes, int]:
    """``(euid, meta sequence)`` of the local meta file holding ``record_type`` of one root."""
    reader = StoreReader(root)
    for euid in reader.list_streams():
        for seq in reader.meta_sequences(euid):
            for record in reader.read_meta(euid, seq).records:
                if isinstance(record, record_type) and record.root.wire() == execution_id:
                    return euid, seq
    raise AssertionError(f"no {record_type.__name__} of {execution_id}")


def meta_path(root: Path, euid: bytes, seq: int) -> Path:
    return StoreLayout(root).segment_path(euid, Plane.META, seq)


def long_id(root: Path) -> str:
    (long,) = [e for e, name in entry_names(root).items() if name == "proj.Long"]
    return long


# --- the whole ingest path ----------------------------------------------------------------------


def test_a_killed_process_is_swept_as_abandoned_like_the_local_catalog(
    tmp_path: Path, chdb_dsn: str, fact_database: str, killed_store: Path
) -> None:
    with ingest_path(tmp_path, chdb_dsn, fact_database, killed_store) as ingest:
        ingest.worker.drain()
        assert ingest.worker.stats.quarantined == 0
        local = ingest.local_tables()
        stuck = abandoned_ids(ingest.store_root)
        assert len(stuck) == 1
        # the worker projects the ended roots only
        assert_same_relations(ingest.projected_tables(), restrict(local, stuck, keep=False))
        before, versions, sent = counts(ingest), ingest.private.version(), puts(ingest)

        fresh = run_sweep(ingest, now=time.time())  # records are seconds old: not silent
        assert (fresh.streams, fresh.silent, fresh.swept) == (1, 0, ())
        assert (counts(ingest), puts(ingest)) == (before, sent)

        dry = run_sweep(ingest, now=time.time() + FAR, dry_run=True)
        assert dry.swept == tuple(stuck) and dry.batches > 0 and dry.dry_run
        assert (counts(ingest), ingest.private.version(), puts(ingest)) == (before, versions, sent)

        first = run_sweep(ingest, now=time.time() + FAR)
        assert first.swept == tuple(stuck), first
        assert (first.silent, first.already_projected) == (1, 0)
        assert (first.pending, first.failed) == ((), ())
        assert first.batches == dry.batches == puts(ingest) - sent
        row = root_row(ingest, stuck[0])
        assert (row["status"], row["index_state"]) == ("abandoned", "no_root_ended")
        assert ingest.private.projected(stuck) == set(stuck)
        got = ingest.projected_tables()
        assert_same_relations(restrict(got, stuck, keep=True), restrict(local, stuck, keep=True))
        assert_same_relations(got, local)
        after, versions = counts(ingest), ingest.private.version()

        again = run_sweep(ingest, now=time.time() + FAR)
        assert (again.swept, again.already_projected) == ((), 1)
        assert (counts(ingest), ingest.private.version()) == (after, versions)

        # a sweep that died before its projected_v1 marker: the same batches again (200)
        ingest.private.delete_executions(stuck)
        stats = ingest.control.facts.stats
        existing, written = stats.existing, stats.batches
        redo = run_sweep(ingest, now=time.time() + FAR)
        assert (redo.swept, redo.failed, redo.batches) == (tuple(stuck), (), first.batches)
        assert (stats.existing - existing, stats.batches) == (first.batches, written)
        assert counts(ingest) == after
        assert_same_relations(ingest.projected_tables(), local)


def test_a_late_root_ended_is_kept_out_and_reopen_lets_it_project(
    tmp_path: Path, chdb_dsn: str, fact_database: str, walk_store: Path
) -> None:
    with ingest_path(tmp_path, chdb_dsn, fact_database, walk_store, ship=False) as ingest:
        root = ingest.store_root
        long = long_id(root)
        euid, last = meta_holding(root, RootEnded, long)
        held = meta_path(root, euid, last)
        body = held.read_bytes()
        held.unlink()  # the stream "stops" before Long's RootEnded
        assert Publisher(root, ingest.gateway_url, ingest.publisher_token).flush().complete
        ingest.worker.drain()
        assert abandoned_ids(root) == [long]
        report = run_sweep(ingest, now=time.time() + FAR)
        assert report.swept == (long,)
        same_but_definitions(ingest)

        held.write_bytes(body)  # the stream resumes: RootEnded ships late
        assert Publisher(root, ingest.gateway_url, ingest.publisher_token).flush().complete
        messages = []
        while batch := ingest.dataplane.queue.receive(max_messages=10):
            messages.extend(batch)
        (late,) = messages
        reader = EvidenceReader(ingest.dataplane.store, SCOPE)
        carried = gather_root_ended(reader, euid.hex(), last).carried_definitions()
        assert carried.get(long)  # Long carries its engine's definitions for that meta object
        definitions_batch = f"{long}.function_definitions_v1.0"
        assert ingest.worker.handle(late) == "deleted"  # the other executions are not held
        assert ingest.worker.stats.late_root_ended == 1
        assert ingest.worker.stats.quarantined == 0
        assert root_row(ingest, long)["status"] == "abandoned"  # swept is final...
        # ...and the definitions it carries for that meta object are there, public and private
        stored = ingest.private.open_dataset("function_definitions_v1")
        assert stored is not None
        mine = stored.to_table(filter=pc.field("execution_id") == long)
        assert mine.num_rows == len(carried[long])
        assert set(mine["row_id"].to_pylist()) == {
            f"{definitions_batch}:{i}" for i in range(len(carried[long]))
        }
        visible = ingest.control.facts.batch_state(SCOPE, ingest.generation(), definitions_batch)
        assert visible is not None and visible[1] == mine.num_rows

        assert reopen(SCOPE, [long], ingest.client, ingest.private) == (long,)
        assert ingest.private.projected([long]) == set()
        ingest.dataplane.queue.send(late.body)  # ...until reopened and replayed
        ingest.worker.drain()
        assert root_row(ingest, long)["status"] == "succeeded"
        same_but_definitions(ingest)
        assert run_sweep(ingest, now=time.time() + FAR).swept == ()


def test_the_cli_sweeps_a_data_dir(
    tmp_path: Path, chdb_dsn: str, fact_database: str, killed_store: Path
) -> None:
    with ingest_path(tmp_path, chdb_dsn, fact_database, killed_store) as ingest:
        ingest.worker.drain()
        stuck = abandoned_ids(ingest.store_root)
        ms = ingest.control.metastore
        token = TokenIssuer(ingest.control.keys, ms).issue_workload(
            SCOPE.tenant, "dep_proj", "cell-1"
        )
        alone = tmp_path / "cli-derived"
        base = [
            "--data", str(tmp_path / "dataplane"),  # the directory real_dataplane serves
            "--control-plane", ingest.client._base,
        ]  # fmt: skip
        args = [*base, "--derived", str(alone)]
        env = {"BAML_WORKLOAD_TOKEN": token.token}
        runner = CliRunner()
        scope_arg = f"{SCOPE.tenant}/{SCOPE.project}/{SCOPE.environment}"

        fresh = runner.invoke(sweep_command, [*args, "--scope", scope_arg], env=env)
        assert fresh.exit_code == 0, fresh.output
        assert json.loads(fresh.output)["swept"] == 0  # the default limit is an hour

        dry = runner.invoke(sweep_command, [*args, "--silence", "0.001s", "--dry-run"], env=env)
        assert dry.exit_code == 0, dry.output
        summary = json.loads(dry.output)
        assert summary["dry_run"] and summary["swept"] == 1
        assert summary["scopes"][0]["scope"] == scope_arg  # found under evidence/v1/
        assert summary["scopes"][0]["swept"] == stuck
        assert not alone.exists()

        # Lance without the worker's values_v1: the packs' values are not there, so pending
        waiting = runner.invoke(sweep_command, [*args, "--silence", "0.001s"], env=env)
        assert waiting.exit_code == 0, waiting.output
        summary = json.loads(waiting.output)
        assert (summary["pending"], summary["scopes"][0]["pending"]) == (1, stuck)
        threads = ingest.projected_tables()["threads_v1"]["thread_id"].to_pylist()
        assert stuck[0] not in threads

        shared = tmp_path / "cli-shared"  # DERIVED/<tenant>/<project>/<env> is the worker's
        (shared / SCOPE.tenant / SCOPE.project).mkdir(parents=True)
        (shared / SCOPE.tenant / SCOPE.project / SCOPE.environment).symlink_to(tmp_path / "derived")
        done = runner.invoke(
            sweep_command, [*base, "--derived", str(shared), "--silence", "0.001s"], env=env
        )
        assert done.exit_code == 0, done.output
        assert json.loads(done.output)["scopes"][0]["swept"] == stuck, done.output
        assert root_row(ingest, stuck[0])["status"] == "abandoned"
        assert ingest.private.projected(stuck) == set(stuck)
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())

        bad = runner.invoke(sweep_command, [*args, "--scope", "no-slashes"], env=env)
        assert bad.exit_code == 2 and "TENANT/PROJECT/ENV" in bad.output
        bad = runner.invoke(sweep_command, [*args, "--silence", "soon"], env=env)
        assert bad.exit_code == 2 and "not a duration" in bad.output
        bad = runner.invoke(sweep_command, args, env={"BAML_WORKLOAD_TOKEN": ""})
        assert bad.exit_code == 2 and "--token" in bad.output


def test_cli_help_has_an_example() -> None:
    result = CliRunner().invoke(sweep_command, ["--help"])
    assert result.exit_code == 0
    assert "Example: baml-studio sweep" in result.output and "--dry-run" in result.output


# --- the library over an uploaded store ---------------------------------------------------------


@dataclass
class Cut:
    """The walk store with a short root's RootEnded and Long's RootEnded deleted: both are
    abandoned, and the gap after the short root's RootStarted makes both index_corrupt."""

    root: Path
    store: MemoryStore
    long: str
    short: str
    gap: int
    meta_hw: int


@pytest.fixture
def cut(tmp_path: Path, walk_store: Path) -> Cut:
    root = copy_store(walk_store, tmp_path / "local")
    long = long_id(root)
    shorts = [e for e, name in entry_names(root).items() if name == "proj.Short"]
    short = sorted(shorts, key=lambda e: meta_holding(root, RootStarted, e)[1])[4]
    euid, gap = meta_holding(root, RootEnded, short)
    _, last = meta_holding(root, RootEnded, long)
    meta_path(root, euid, gap).unlink()
    meta_path(root, euid, last).unlink()
    store = MemoryStore()
    upload_store(root, store)
    assert sorted(abandoned_ids(root)) == sorted([long, short])
    return Cut(root, store, long, short, gap, last - 1)


def dry(store: Any, tmp_path: Path, **kwargs: Any) -> SweepReport:
    params: dict[str, Any] = {"silence_limit_s": HOUR, "now": time.time() + FAR}
    params.update(kwargs)
    return sweep(
        store,
        SCOPE,
        ControlClient("http://127.0.0.1:9", "unused"),  # a dry run never calls it
        PrivateStore(str(tmp_path / "lance")),
        dry_run=True,
        **params,
    )


def test_open_executions_fold_like_the_local_catalog_across_a_gap(cut: Cut) -> None:
    reader = EvidenceReader(cut.store, SCOPE)
    (listing,) = list_streams(cut.store, SCOPE)
    assert listing.meta_hw == cut.meta_hw and listing.modified_s is None
    found = open_executions(reader, listing)
    assert found is not None and not found.truncated
    assert found.process.meta_gaps == (cut.gap,) and not found.process.alive
    assert sorted(m.execution_id for m in found.executions) == sorted([cut.long, cut.short])
    gathered = gather_abandoned(reader, found.newest, found.process, found.executions)
    source = LocalStoreSource(cut.root)
    for inputs in gathered.executions:
        execution_id = inputs.meta.execution_id
        projection = project_execution(inputs, gathered.definitions[execution_id])
        want = local_expected(source, execution_id)
        assert_same(reassemble(projection), want, execution_id)
        (row,) = [r for r in want["threads_v1"].to_pylist() if r["thread_id"] == execution_id]
        assert (row["status"], row["index_state"]) == ("abandoned", "index_corrupt")
    long_inputs = next(i for i in gathered.executions if i.meta.execution_id == cut.long)
    assert long_inputs.data.groups  # its data, read past the other roots' groups
    assert {g.root.wire() for _, g in long_inputs.data.groups} == {cut.long}


def test_the_walk_bound(cut: Cut, tmp_path: Path) -> None:
    reader = EvidenceReader(cut.store, SCOPE)
    (listing,) = list_streams(cut.store, SCOPE)
    narrow = open_executions(reader, listing, walk_bound=3)
    assert narrow is not None and narrow.truncated
    assert narrow.executions == ()  # meta 1's RootStarted does not count: its end may be unread
    wide = open_executions(reader, listing, walk_bound=cut.meta_hw - 1)
    assert wide is not None and not wide.truncated
    assert {m.execution_id for m in wide.executions} == {cut.long, cut.short}
    report = dry(cut.store, tmp_path, walk_bound=3)
    assert report.truncated == (listing.euid,) and report.swept == ()
    with pytest.raises(ValueError, match="walk_bound"):
        dry(cut.store, tmp_path, walk_bound=0)


@dataclass(frozen=True, slots=True)
class TimedInfo(ObjectInfo):
    last_modified: float | None = None


class TimedStore:
    """A store whose listing reports modification times (the port's ObjectInfo has none)."""

    def __init__(self, inner: MemoryStore, times: dict[str, float]) -> None:
        self.inner = inner
        self.times = times

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def list(self, prefix: str = "") -> Any:
        for info in self.inner.list(prefix):
            yield TimedInfo(
                info.key, info.size, info.sha256, info.version_id, info.etag,
                self.times.get(info.key),
            )  # fmt: skip


def test_silence_is_the_later_of_evidence_and_listing_times(cut: Cut, tmp_path: Path) -> None:
    reader = EvidenceReader(cut.store, SCOPE)
    (listing,) = list_streams(cut.store, SCOPE)
    evidence = last_activity_s(reader, listing)
    assert evidence is not None and time.time() - 3 * 24 * HOUR < evidence <= time.time()
    now = evidence + 2 * HOUR
    assert set(dry(cut.store, tmp_path, now=now).swept) == {cut.long, cut.short}
    assert dry(cut.store, tmp_path, now=evidence + HOUR / 2).swept == ()
    data_key = segment_key(SCOPE, listing.euid, "data", listing.data_hw)
    timed = TimedStore(cut.store, {data_key: now - 60})  # still shipping data a minute ago
    (timed_listing,) = list_streams(timed, SCOPE)  # type: ignore[arg-type]
    assert timed_listing.modified_s == now - 60
    report = dry(timed, tmp_path, now=now)
    assert (report.silent, report.swept) == (0, ())
    old = TimedStore(cut.store, {data_key: evidence - HOUR})
    assert set(dry(old, tmp_path, now=now).swept) == {cut.long, cut.short}


def test_a_stream_without_meta_1_is_undated_and_left_alone(cut: Cut, tmp_path: Path) -> None:
    (listing,) = list_streams(cut.store, SCOPE)
    cut.store.delete(segment_key(SCOPE, listing.euid, "meta", 1))
    report = dry(cut.store, tmp_path)
    assert (report.undated, report.swept) == ((listing.euid,), ())


def test_scopes_are_discovered_and_listing_failures_are_transient(cut: Cut, tmp_path: Path) -> None:
    assert discover_scopes(cut.store) == [SCOPE]

    class Broken(MemoryStore):
        def list(self, prefix: str = "") -> Any:
            raise ObjectStoreUnavailable("listing throttled", key=None)

    with pytest.raises(EvidenceUnavailable):
        dry(Broken(), tmp_path)


class FakeControl:
    """Answers like the control plane; refuses every batch of the roots in ``refuse``."""

    def __init__(self, refuse: set[str]) -> None:
        self.refuse = refuse
        self.sent: list[str] = []

    def active_generation(self, scope: Any, catalog_version: str = "v1") -> str:
        return "gen_1"

    def invalidate_generation(self, scope: Any) -> None:
        pass

    def put_batches(self, scope: Any, generation: str, batches: Any, **_: Any) -> list[Any]:
        for batch in batches:
            if batch.root_id in self.refuse:
                raise ControlPlaneRefused(
                    "put_batch answered 409 batch_digest_conflict",
                    status=409,
                    code="batch_digest_conflict",
                )
            self.sent.append(batch.batch_id)
        return []


def test_refusals_are_reported_and_pending_values_wait(cut: Cut, tmp_path: Path) -> None:
    private = PrivateStore(str(tmp_path / "lance"))
    control = FakeControl({cut.short})
    params: dict[str, Any] = {"silence_limit_s": HOUR, "now": time.time() + FAR}
    values = {k: v for k, v in cut.store.objects.items() if "/cas/values/" in k}
    assert values
    for key in values:  # no value ingested, none under cas/values/: both pending
        cut.store.delete(key)
    report = sweep(cut.store, SCOPE, control, private, **params)  # type: ignore[arg-type]
    assert set(report.pending) == {cut.long, cut.short} and report.swept == ()
    assert control.sent == [] and private.projected([cut.long, cut.short]) == set()

    cut.store.objects.update(values)  # the values land
    report = sweep(cut.store, SCOPE, control, private, **params)  # type: ignore[arg-type]
    assert report.swept == (cut.long,) and report.pending == ()
    ((failed, reason),) = report.failed
    assert failed == cut.short and "batch_digest_conflict" in reason
    assert control.sent and all(b.startswith(f"{cut.long}.") for b in control.sent)
    assert private.projected([cut.long, cut.short]) == {cut.long}
    assert report.to_json()["failed"] == [{"execution_id": cut.short, "reason": reason}]
