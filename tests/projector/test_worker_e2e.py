"""The projector end to end: every projected execution's public facts and private rows
together equal what the local catalog returns for the same store (all six relations), and
duplicates, pending values and quarantine behave as the projection contract says."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import zstandard
from projector_e2e_rig import assert_same_relations, ingest_path
from projector_fixtures import SCOPE, workload_store

from baml_studio.gateway.keys import evidence_prefix, segment_key
from baml_studio.queue.port import Message

__all__ = ["workload_store"]


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


def test_malformed_meta_with_valid_frame_is_quarantined_and_others_continue(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
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
        marker = f"{prefix}quarantine/{key[len(prefix) :]}.quarantine"
        assert json.loads(store.get(marker))["key"] == key
        assert store.head(key).size == len(body)  # the bytes are kept
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())
