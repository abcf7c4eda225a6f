"""The projector end to end: every projected execution's public facts and private rows
together equal what the local catalog returns for the same store (all six relations), and
duplicates, pending values and quarantine behave as the projection contract says."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import zstandard
from malformed_evidence import assert_quarantined, malformed_metas, malformed_packs, ship_behind
from projector_e2e_rig import assert_same_relations, ingest_path
from projector_fixtures import SCOPE, meta_objects, workload_store
from projector_service_rig import receive_all

import baml_studio.projector.worker as worker_module
from baml_studio.control.schemas import PUBLIC_RELATIONS
from baml_studio.gateway.keys import evidence_prefix, segment_key
from baml_studio.projector.errors import InactiveGeneration, ValuesPending
from baml_studio.projector.evidence import EvidenceReader
from baml_studio.projector.gather import gather_root_ended
from baml_studio.projector.project import project_execution
from baml_studio.projector.worker import WorkerConfig
from baml_studio.queue.port import Message

__all__ = ["workload_store"]

DEFINITIONS = "function_definitions_v1"
RELATIONS = [r.name for r in PUBLIC_RELATIONS]


def _drain_all(ingest) -> None:
    ingest.worker.drain()
    assert ingest.dataplane.queue.approximate_count() == 0


def test_projected_facts_and_private_rows_equal_the_local_catalog(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest:
        _drain_all(ingest)
        assert ingest.worker.stats.quarantined == 0
        assert ingest.worker.stats.executions > 0
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())
        _assert_no_private_data_crossed(ingest)
        # one definitions batch an engine a meta object, from its first execution there
        carriers = _carriers(ingest)
        sent = {
            r.path.rsplit("/", 1)[-1]
            for r in ingest.captured
            if r.method == "PUT" and r.headers.get("x-baml-relation") == DEFINITIONS
        }
        assert sent == {f"{root}.{DEFINITIONS}.0" for root in carriers}
        assert 0 < len(carriers) < ingest.worker.stats.executions
        stored = ingest.private.open_dataset(DEFINITIONS)
        assert stored is not None
        assert set(stored.to_table(columns=["execution_id"])["execution_id"].to_pylist()) == set(
            carriers
        )


def _carriers(ingest: Any) -> dict[str, list[dict[str, Any]]]:
    """The executions that carry their engine's definitions, over every meta object."""
    reader = EvidenceReader(ingest.dataplane.store, SCOPE)
    out: dict[str, list[dict[str, Any]]] = {}
    for euid_hex, seq in meta_objects(ingest.dataplane.store):
        out.update(gather_root_ended(reader, euid_hex, seq).carried_definitions())
    return {root: rows for root, rows in out.items() if rows}


def test_a_kept_out_execution_still_delivers_the_definitions_it_carries(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    """A carrier whose facts changed since it was projected (a sweep closed it, then its
    RootEnded came) is kept out of its meta object's projection, but the engine definitions
    it carries for the other executions still become visible, public and private."""
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest:
        reader = EvidenceReader(ingest.dataplane.store, SCOPE)
        euid_hex, seq = meta_objects(ingest.dataplane.store)[-1]
        gathered = gather_root_ended(reader, euid_hex, seq)
        carried = {r: rows for r, rows in gathered.carried_definitions().items() if rows}
        assert carried and len(gathered.executions) > len(carried)
        root = next(iter(carried))
        (inputs,) = [i for i in gathered.executions if i.meta.execution_id == root]
        projection = project_execution(inputs, [])  # as if closed earlier, carrying nothing
        (threads,) = [b for b in projection.public if b.relation == "threads_v1"]
        status = pa.array(["abandoned"] * threads.table.num_rows, threads.table["status"].type)
        changed = threads.table.set_column(
            threads.table.schema.get_field_index("status"), "status", status
        )
        generation = ingest.generation()
        ingest.client.put_batches(SCOPE, generation, [dataclasses.replace(threads, table=changed)])
        ingest.private.write_executions([(root, root, inputs.process.process_id, [])])

        _drain_all(ingest)
        assert ingest.worker.stats.late_root_ended == 1 and ingest.worker.stats.quarantined == 0
        visible = ingest.control.facts.batch_state(SCOPE, generation, f"{root}.{DEFINITIONS}.0")
        assert visible is not None and visible[1] == len(carried[root])
        stored = ingest.private.open_dataset(DEFINITIONS)
        assert stored is not None
        mine = stored.to_table(filter=pc.field("execution_id") == root)
        assert sorted(mine["row_id"].to_pylist()) == sorted(
            f"{root}.{DEFINITIONS}.0:{i}" for i in range(len(carried[root]))
        )


def _assert_no_private_data_crossed(ingest) -> None:
    """DESIGN.md §3: no value, source path or private column reaches the control plane."""
    import pyarrow as pa

    from baml_studio.catalog.schema import RELATIONS

    private_names = {r.name: {c.name for c in r.private_columns()} for r in RELATIONS}
    texts: list[str] = []
    for request in ingest.captured:
        body = request.content
        if request.headers.get("content-encoding") == "zstd":
            raw = zstandard.ZstdDecompressor().decompress(body)
            with pa.ipc.open_stream(pa.BufferReader(raw)) as reader:
                table = reader.read_all()
            relation = request.headers["x-baml-relation"]
            assert not private_names[relation] & set(table.column_names), relation
            # instants as integers: their text ('2026-12-06 03:10:33') is no value of the
            # execution's, yet could equal a workload's date value on the day the test runs
            columns = [
                column.cast(pa.int64()) if pa.types.is_timestamp(column.type) else column
                for column in table.columns
            ]
            texts.append(repr(pa.table(columns, names=table.column_names).to_pylist()))
        else:
            texts.append(body.decode("utf-8", "replace"))
        texts.append(repr(dict(request.headers)))
    sent = "\n".join(texts)
    assert ingest.worker.stats.executions and len(ingest.captured) > ingest.worker.stats.executions
    local = ingest.local_tables()
    secrets = set()
    for name in ("calls_v1", "call_path_stats_v1", "errors_v1"):
        for column in ("call_site_file", "throw_site_file"):
            if column in local[name].column_names:
                secrets.update(v for v in local[name][column].to_pylist() if v)
    paths = ingest.private.open_dataset("value_paths_v1").to_table(columns=["str_value"])
    names = set(local["function_definitions_v1"]["fqn"].to_pylist())  # public identifiers
    values = {v for v in paths["str_value"].to_pylist() if v and len(v) >= 6} - names
    assert secrets and values  # the check below can fail
    leaked = sorted(s for s in secrets | values if s in sent)
    assert not leaked, leaked[:5]


def test_a_meta_object_projected_in_slices_equals_the_local_catalog(
    tmp_path: Path,
    chdb_dsn: str,
    fact_database: str,
    workload_store: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Slices of 2 executions: each slice is sent and committed on its own (one Lance
    commit per slice), and the whole equals the local catalog."""
    config = WorkerConfig(retry_backoff_s=(0,), slice_executions=2)
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store, config=config) as ingest:
        slices: list[int] = []
        write = ingest.private.write_executions

        def counted(executions: Any, **kwargs: Any) -> None:
            slices.append(len(executions))
            write(executions, **kwargs)

        monkeypatch.setattr(ingest.private, "write_executions", counted)
        _drain_all(ingest)
        assert ingest.worker.stats.quarantined == 0
        assert slices and max(slices) <= 2
        assert sum(slices) == ingest.worker.stats.executions > 2
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())


def test_the_log_has_a_line_a_message_not_a_line_a_batch(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path, caplog: Any
) -> None:
    """At INFO the projector says what each pack and meta object came to; each batch's
    answer is DEBUG (a 100,000-call run sends ~50,000)."""
    caplog.set_level(logging.INFO, logger="baml_studio.projector")
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest:
        _drain_all(ingest)
        stats = ingest.worker.stats
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert not [line for line in lines if line.startswith("projection batch")]
    metas = [re.search(r"(\d+) executions projected, (\d+) batches", x) for x in lines]
    counts = [(int(m[1]), int(m[2])) for m in metas if m]
    assert sum(e for e, _ in counts) == stats.executions > 0
    assert all(b >= e for e, b in counts)  # every execution has a threads_v1 batch
    packs = [x for x in lines if x.startswith("pack ") and " values, " in x]
    assert len(packs) == stats.packs > 0


def test_the_next_slice_is_folded_while_a_slice_is_in_flight(
    tmp_path: Path,
    chdb_dsn: str,
    fact_database: str,
    workload_store: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first slice's send waits until the worker folds an execution of the next slice:
    it only returns because folding goes on while batches are in flight."""
    config = WorkerConfig(retry_backoff_s=(0,), slice_executions=2)
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store, config=config) as ingest:
        worker = ingest.worker
        events: list[tuple[str, str]] = []
        first: set[str] = set()
        folded_next = threading.Event()
        fold, send_all = worker_module.project_executions, worker._send_all

        def folding(items: Any, *args: Any, **kwargs: Any) -> Any:
            for inputs, _ in items:
                events.append(("fold", inputs.meta.execution_id))
                if first and inputs.meta.execution_id not in first:
                    folded_next.set()
            return fold(items, *args, **kwargs)

        def sending(scope: Any, generation: str, private: Any, projections: list[Any]) -> Any:
            if not first and len(projections) == 2:
                first.update(p.root_id for p in projections)
                events.append(("send", ",".join(sorted(first))))
                assert folded_next.wait(30), "the next slice was not folded during the send"
            return send_all(scope, generation, private, projections)

        monkeypatch.setattr(worker_module, "project_executions", folding)
        monkeypatch.setattr(worker, "_send_all", sending)
        _drain_all(ingest)
        assert folded_next.is_set() and worker.stats.quarantined == 0
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())


def test_slices_of_one_meta_object_are_in_flight_side_by_side(
    tmp_path: Path,
    chdb_dsn: str,
    fact_database: str,
    workload_store: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``slices_in_flight=2``: the first slice's send waits until the next slice's send has
    begun (one worker thread: only the same meta object can start it), and every slice
    lands whole."""
    config = WorkerConfig(retry_backoff_s=(0,), slice_executions=2, slices_in_flight=2)
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store, config=config) as ingest:
        worker = ingest.worker
        calls: list[list[str]] = []
        second = threading.Event()
        lock = threading.Lock()
        send_all = worker._send_all

        def sending(scope: Any, generation: str, private: Any, projections: list[Any]) -> Any:
            with lock:
                calls.append([p.root_id for p in projections])
                n = len(calls)
            if n == 1:
                assert second.wait(30), "the next slice was not sent while this one was in flight"
            elif n == 2:
                second.set()
            return send_all(scope, generation, private, projections)

        monkeypatch.setattr(worker, "_send_all", sending)
        _drain_all(ingest)
        assert second.is_set() and worker.stats.quarantined == 0
        sent = [root for call in calls for root in call]
        assert len(sent) == len(set(sent)) == worker.stats.executions
        assert ingest.private.projected(sent) == set(sent)
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())


@pytest.mark.parametrize("field", ["slice_executions", "slices_in_flight", "batch_concurrency"])
def test_slice_settings_must_be_positive(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        WorkerConfig(**{field: 0})


def test_a_failure_folding_the_next_slice_still_lands_the_slice_in_flight(
    tmp_path: Path,
    chdb_dsn: str,
    fact_database: str,
    workload_store: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Values missing for the second slice: the first slice's batches, sent meanwhile, are
    visible and its private rows committed; the message is retried and completes."""
    config = WorkerConfig(retry_backoff_s=(0,), slice_executions=2)
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store, config=config) as ingest:
        worker = ingest.worker
        others = []
        while batch := ingest.dataplane.queue.receive(max_messages=10):
            for message in batch:
                if ".bamlpack.zst" in message.body:
                    assert worker.handle(message) == "deleted"
                else:
                    others.append(message)
        sent: list[list[str]] = []
        landed_at_failure: list[set[str]] = []
        send_all, ensure = worker._send_all, worker._ensure_cids

        def sending(scope: Any, generation: str, private: Any, projections: list[Any]) -> Any:
            sent.append([p.root_id for p in projections])
            return send_all(scope, generation, private, projections)

        def ensuring(*args: Any) -> None:
            if sent and not landed_at_failure:  # the next slice, the first one in flight
                landed_at_failure.append(ingest.private.projected(sent[0]))
                raise ValuesPending("injected: the second slice's values are not ingested yet")
            ensure(*args)

        monkeypatch.setattr(worker, "_send_all", sending)
        monkeypatch.setattr(worker, "_ensure_cids", ensuring)
        outcomes = [worker.handle(m) for m in others]
        assert "retry" in outcomes and landed_at_failure == [set()]  # it failed mid-flight
        assert ingest.private.projected(sent[0]) == set(sent[0])  # the slice in flight landed
        monkeypatch.setattr(worker, "_ensure_cids", ensure)
        _drain_all(ingest)
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())


def test_duplicate_notifications_give_one_fact_set(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest:
        bodies = []
        while messages := ingest.dataplane.queue.receive(max_messages=10):
            for message in messages:
                bodies.append(message.body)
                ingest.worker.handle(message)
        first = {name: t.num_rows for name, t in ingest.projected_tables().items()}
        versions = ingest.private.version()
        for body in bodies:  # every notification again: a duplicate projector run
            ingest.dataplane.queue.send(body)
        _drain_all(ingest)
        again = ingest.projected_tables()
        assert {name: t.num_rows for name, t in again.items()} == first
        assert_same_relations(again, ingest.local_tables())
        assert ingest.private.version()["projected_v1"] >= versions["projected_v1"]


def test_root_ended_before_its_pack_is_pending_then_projected(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest:
        messages: list[Message] = []
        while batch := ingest.dataplane.queue.receive(max_messages=10):
            messages.extend(batch)
        metas = [m for m in messages if ".bamlmeta.zst" in m.body]
        packs = [m for m in messages if ".bamlpack.zst" in m.body]
        assert metas and packs
        outcomes = [ingest.worker.handle(m) for m in metas]
        assert "retry" in outcomes  # values not ingested yet: the message stays
        assert ingest.worker.stats.pending > 0
        for message in packs:
            assert ingest.worker.handle(message) == "deleted"
        _drain_all(ingest)  # the retried meta messages are visible again (backoff 0)
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())


def test_a_pending_message_comes_back_sooner_than_another_retry(
    tmp_path: Path,
    chdb_dsn: str,
    fact_database: str,
    workload_store: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the default schedules, a meta object pending on its pack is hidden for 1 s, not
    the 5 s of another retry (the pack is usually a notification or two behind)."""
    with ingest_path(
        tmp_path, chdb_dsn, fact_database, workload_store, config=WorkerConfig()
    ) as ingest:
        queue = ingest.dataplane.queue
        delays: list[float] = []
        hide = queue.change_visibility
        monkeypatch.setattr(
            queue, "change_visibility", lambda receipt, s: (delays.append(s), hide(receipt, s))[1]
        )
        metas = [m for m in receive_all(queue) if ".bamlmeta.zst" in m.body]
        outcomes = [ingest.worker.handle(m) for m in metas]
        assert "retry" in outcomes and ingest.worker.stats.pending == len(delays) > 0
        assert set(delays) == {1}, delays


def test_the_retry_schedules() -> None:
    config = WorkerConfig()
    assert [config.retry_delay_s(n) for n in range(1, 10)] == [
        5,
        15,
        30,
        60,
        120,
        300,
        600,
        600,
        600,
    ]
    pending = [config.retry_delay_s(n, pending=True) for n in range(1, 10)]
    assert pending == [1, 2, 4, 8, 15, 300, 600, 600, 600]
    immediate = WorkerConfig(retry_backoff_s=(0,))  # never later than the general schedule
    assert {immediate.retry_delay_s(n, pending=True) for n in range(1, 10)} == {0}
    with pytest.raises(ValueError, match="retry_backoff_s"):
        WorkerConfig(retry_backoff_s=())


@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed"])
def test_a_409_inactive_generation_refreshes_the_generation_and_resends_at_once(
    tmp_path: Path,
    chdb_dsn: str,
    fact_database: str,
    workload_store: Path,
    monkeypatch: pytest.MonkeyPatch,
    named: bool,
) -> None:
    """The generation moves after the worker read it (cached) and before its batches: the
    control plane answers 409 inactive_generation, and the worker takes the new generation
    (named in the answer, or read again when not) and sends the same batches again within
    the same handling. Every message is deleted on its first delivery (a retry would hide a
    missing resend: by then the client has the new generation) and every fact lands in the
    new generation."""
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest:
        client, queue = ingest.client, ingest.dataplane.queue
        client.generation_ttl_s = 3600  # the stale generation stays cached until a 409
        old = client.active_generation(SCOPE)
        new = ingest.control.metastore.bump_generation(SCOPE)
        assert new != old and client.active_generation(SCOPE) == old
        if not named:
            put_batches = client.put_batches

            def unnamed(*args: Any, **kwargs: Any) -> Any:
                try:
                    return put_batches(*args, **kwargs)
                except InactiveGeneration as exc:
                    raise InactiveGeneration(str(exc), active_generation=None) from exc

            monkeypatch.setattr(client, "put_batches", unnamed)
        messages = receive_all(queue)
        packs = [m for m in messages if ".bamlpack.zst" in m.body]
        metas = [m for m in messages if m not in packs]
        outcomes = [ingest.worker.handle(m) for m in [*packs, *metas]]
        assert outcomes == ["deleted"] * len(messages) and ingest.worker.stats.retried == 0
        puts = [
            (r.headers["x-baml-projection-generation"], r.path)
            for r in ingest.captured
            if r.method == "PUT"
        ]
        stale = {path for generation, path in puts if generation == old}
        assert stale  # the control plane saw the old generation and answered 409
        assert stale <= {path for generation, path in puts if generation == new}  # resent
        assert ingest.generation() == new
        assert all(ingest.control.facts.count(name, SCOPE, old) == 0 for name in RELATIONS)
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())


def test_a_meta_object_failing_its_checksum_is_quarantined_and_others_continue(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    """One valid zstd frame whose content fails the meta segment's trailing SHA-256."""
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest:
        store = ingest.dataplane.store
        euid = "ab" * 16
        key = segment_key(SCOPE, euid, "meta", 1)
        body = zstandard.ZstdCompressor().compress(b"BAMLMETA" + b"\x00" * 64)
        store.put_if_absent(key, body, hashlib.sha256(body).hexdigest())  # the bucket notifies
        _drain_all(ingest)
        assert ingest.worker.stats.quarantined == 1
        dead = ingest.dataplane.queue.dead_letter_queue().receive(max_messages=10)
        assert len(dead) == 1 and key in json.dumps(json.loads(dead[0].body))
        prefix = evidence_prefix(SCOPE)
        marker = json.loads(store.get(f"{prefix}quarantine/{key[len(prefix) :]}.quarantine"))
        assert marker["key"] == key and "InvalidChecksum" in marker["reason"]
        assert store.head(key).size == len(body)  # the bytes are kept
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())


def test_malformed_packs_in_a_valid_frame_are_quarantined_and_others_continue(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    """Packs whose zstd frame is whole but whose content ``decode_pack`` refuses (header,
    manifest, an entry's sha256 or CID, trailing bytes): each goes to the dead-letter queue
    with its marker and its bytes kept, none of its values is ingested (not even the valid
    entries), and every pack and meta object queued behind them is projected."""
    bad = malformed_packs()
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store, ship=False) as ingest:
        ship_behind(ingest, bad)
        _drain_all(ingest)
        stats = ingest.worker.stats
        assert stats.quarantined == len(bad)
        assert stats.packs > 0 and stats.executions > 0
        store = ingest.dataplane.store
        assert_quarantined(store, receive_all(ingest.dataplane.queue.dead_letter_queue()), bad)
        carried = set().union(*(m.cids for m in bad))
        assert ingest.private.missing_values(carried) == carried
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())


def test_malformed_meta_objects_behind_a_valid_checksum_are_quarantined_and_others_continue(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    """Meta objects whose trailing SHA-256 is right but whose header or records are not
    (a status or tag out of range, a record longer than its fields, a misplaced StreamStarted,
    a record count the payload cannot hold, another version, stream or sequence): each goes
    to the dead-letter queue with a marker naming the decode error, its bytes kept, and every
    object queued behind them is projected."""
    bad = malformed_metas()
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store, ship=False) as ingest:
        ship_behind(ingest, bad)
        _drain_all(ingest)
        assert ingest.worker.stats.quarantined == len(bad)
        store = ingest.dataplane.store
        assert_quarantined(store, receive_all(ingest.dataplane.queue.dead_letter_queue()), bad)
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())


def test_local_checksum_failure_marks_exactly_the_covering_executions(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    from baml_studio.catalog import LocalStoreSource
    from baml_studio.publisher import Publisher
    from baml_studio.publisher.config import PublisherSettings
    from baml_studio.store import StoreReader

    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store, ship=False) as ingest:
        root = ingest.store_root
        reader = StoreReader(root)
        euid = reader.list_streams()[0]
        sequences = list(reader.data_sequences(euid))
        bad = sequences[len(sequences) // 2]
        path = root / "streams" / euid.hex() / "data" / f"{bad:020d}.bamldata"
        raw = bytearray(path.read_bytes())
        raw[len(raw) // 2] ^= 0xFF  # the trailing checksum no longer matches
        path.write_bytes(bytes(raw))
        settings = PublisherSettings(root, ingest.gateway_url, corrupt_block_seconds=0)
        report = Publisher(
            root, ingest.gateway_url, ingest.publisher_token, settings=settings
        ).flush()
        assert any(str(bad) in str(p) or "checksum" in str(p).lower() for p in report.problems)
        _drain_all(ingest)
        covering = {
            m.execution_id
            for m in LocalStoreSource(root).index.executions
            if m.ended is not None
            and m.root.euid == euid
            and m.ended.data_first_seq <= bad <= m.ended.data_last_seq
        }
        assert covering
        threads = ingest.projected_tables()["threads_v1"].to_pylist()
        roots = {r["execution_id"]: r for r in threads if r["thread_id"] == r["execution_id"]}
        corrupt = {e for e, r in roots.items() if r["index_state"] == "index_corrupt"}
        assert corrupt == covering
        projected = ingest.projected_tables()
        local = ingest.local_tables()
        keep = set(roots) - covering
        assert keep  # the rest of the stream is projected, and equals the local catalog
        assert_same_relations(
            {n: _only(t, keep) for n, t in projected.items()},
            {n: _only(t, keep) for n, t in local.items()},
        )


def _only(table, executions: set[str]):
    import pyarrow as pa
    import pyarrow.compute as pc

    if "execution_id" not in table.column_names:
        return table
    return table.filter(pc.is_in(table["execution_id"], pa.array(sorted(executions))))
