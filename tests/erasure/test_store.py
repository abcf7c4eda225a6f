"""The erasures file: idempotency by key, conditional transitions, and the restart rule (resume,
never fail)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from baml_studio.erasure.errors import ErasureStoreError
from baml_studio.erasure.store import ErasureStore
from baml_studio.gateway.config import Scope

SCOPE = Scope("t", "p", "e")


def test_a_key_holds_one_erasure_per_scope(tmp_path: Path) -> None:
    store = ErasureStore(tmp_path / "e.sqlite")
    first = store.create(SCOPE, '{"process_euids":["a"]}', "k", ("a",))
    held = store.create(SCOPE, '{"process_euids":["b"]}', "k", ("b",))
    assert held.erasure_id == first.erasure_id and held.selector == first.selector
    other = store.create(Scope("t", "p", "e2"), '{"process_euids":["a"]}', "k", ("a",))
    assert other.erasure_id != first.erasure_id
    assert store.find(SCOPE, "k") == first
    assert first.erasure_id.startswith("era_") and len(first.erasure_id) == 30


def test_transitions_are_conditional_and_final_states_stay(tmp_path: Path) -> None:
    store = ErasureStore(tmp_path / "e.sqlite")
    record = store.create(SCOPE, "{}", "k", ("a",))
    assert not store.succeed(record.erasure_id, 1)  # not running yet
    assert store.start(record.erasure_id)
    store.advance(record.erasure_id, "rehome", {"root_ids": ["r"]})
    assert store.record_attempt(record.erasure_id, "down") == 1
    store.advance(record.erasure_id, "delete_objects")
    now = store.get(record.erasure_id)
    assert now is not None and now.step == "delete_objects" and now.attempts == 0
    assert now.plan == {"root_ids": ["r"]}
    assert store.succeed(record.erasure_id, 1)
    assert not store.fail(record.erasure_id, {"code": "x"})
    final = store.get(record.erasure_id)
    assert final is not None and final.state == "succeeded" and final.step == "done"
    assert final.to_json()["streams_deleted"] == 1 and "error" not in final.to_json()


def test_unfinished_erasures_are_resumed_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "e.sqlite"
    store = ErasureStore(path)
    older = store.create(SCOPE, "{}", "k1", ("a",))
    newer = store.create(SCOPE, "{}", "k2", ("b",))
    store.start(older.erasure_id)
    store.advance(older.erasure_id, "erase_facts", {"root_ids": []})
    store.close()
    reopened = ErasureStore(path)
    pending = reopened.unfinished()
    assert [r.erasure_id for r in pending] == [older.erasure_id, newer.erasure_id]
    assert pending[0].state == "running" and pending[0].step == "erase_facts"
    assert reopened.erased_streams(SCOPE) == {"a", "b"}
    assert reopened.earlier_plans(SCOPE, ["a"]) == [{"root_ids": []}]


def test_a_file_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "e.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version=99")
    conn.close()
    with pytest.raises(ErasureStoreError, match="version 99"):
        ErasureStore(path)
