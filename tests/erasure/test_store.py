"""The erasures file: idempotency by key, conditional transitions, and the restart rule (resume,
never fail)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baml_studio.erasure.errors import ErasureStoreError
from baml_studio.erasure.store import ErasureStore
from baml_studio.gateway.config import Scope
from sqlite_damage import SQLITE_VALUES, damage_row

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


COLUMNS = (
    "tenant", "selector", "state", "step", "streams", "plan", "streams_deleted", "attempts",
    "error", "created_at", "updated_at",
)  # fmt: skip


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(column=st.sampled_from(COLUMNS), value=SQLITE_VALUES)
def test_fuzz_a_damaged_row_fails_only_what_reads_it(
    tmp_path_factory: pytest.TempPathFactory, column: str, value: object
) -> None:
    """One erasure's row damaged in any column: reading it is ErasureStoreError naming it (or
    a valid record), the other erasures read, resume and are listed, the file still opens;
    erased_streams refuses rather than leave the damaged row's streams out."""
    path = tmp_path_factory.mktemp("damaged") / "e.sqlite"
    store = ErasureStore(path)
    damaged = store.create(SCOPE, "{}", "k1", ("a",))
    healthy = store.create(SCOPE, "{}", "k2", ("b",))
    store.start(healthy.erasure_id)
    store.advance(healthy.erasure_id, "erase_facts", {"root_ids": []})
    store.close()
    damage_row(path, "erasures", ("erasure_id", damaged.erasure_id), column, value)
    reopened = ErasureStore(path)
    try:
        try:
            record = reopened.get(damaged.erasure_id)
        except ErasureStoreError as exc:
            assert damaged.erasure_id in str(exc) and "cannot be read" in str(exc)
        else:
            assert record is not None
            record.to_json()
        found = reopened.get(healthy.erasure_id)
        assert found is not None and found.step == "erase_facts" and found.streams == ("b",)
        pending = [r.erasure_id for r in reopened.unfinished()]
        assert healthy.erasure_id in pending
        try:
            streams = reopened.erased_streams(SCOPE)
        except ErasureStoreError:
            assert column == "streams"
        else:
            assert "b" in streams
    finally:
        reopened.close()
