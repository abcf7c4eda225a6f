"""PrivateStore over Lance: idempotent ingest and execution writes, the commit marker, conflict
retries, versions, compaction with indexes, and the same on S3 (ministack)."""

from __future__ import annotations

import multiprocessing
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance.commit import CommitConflictError
from lance_fixtures import (
    calls_rows,
    entry,
    execution_private,
    ingest_in_process,
    invoice,
    local_root,
    raw_entry,
    sorted_rows,
)

from baml_studio.format.cas import CODEC_FUNCTION_TABLE, CODEC_VALUE
from baml_studio.projector.errors import LanceCommitFailed
from baml_studio.projector.lance_store import (
    PROJECTED,
    PROJECTED_SCHEMA,
    RELATION_DATASETS,
    VALUE_PATHS,
    VALUES,
    VALUES_SCHEMA,
    PrivateStore,
    PrivateStoreError,
    check_dataset_root,
    relation_schema,
)
from baml_studio.projector.value_paths import VALUE_PATHS_SCHEMA, leaf_rows

EXEC = "baml_thread_1_exec-a"
T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture(params=["remembered", "scanned", "mixed"])
def store(tmp_path: Path, sleeps: Sleeps, request: pytest.FixtureRequest) -> PrivateStore:
    """Each test three times: fragment keys remembered (the default budget), none remembered
    (every presence check a filtered scan), and a budget of 5 keys (small fragments
    remembered and evicted, larger ones scanned)."""
    budget = {"remembered": 1_000_000, "scanned": 0, "mixed": 5}[request.param]
    return PrivateStore(local_root(tmp_path), clock=lambda: T0, sleep=sleeps, key_cache_keys=budget)


def table(store: PrivateStore, name: str, version: int | None = None) -> pa.Table:
    ds = store.open_dataset(name, version=version)
    assert ds is not None, f"{name} does not exist"
    return ds.to_table()


def path_rows_expected(entries: list[tuple[str, int, bytes, str]]) -> int:
    return sum(len(leaf_rows(cid, codec, body)) for cid, codec, body, _ in entries)


def assert_no_duplicate_values(store: PrivateStore, expected_cids: set[str]) -> None:
    values = table(store, VALUES)
    assert Counter(values["cid"].to_pylist()) == Counter(expected_cids)
    paths = table(store, VALUE_PATHS)
    keys = list(zip(paths["cid"].to_pylist(), paths["path"].to_pylist(), strict=True))
    assert len(keys) == len(set(keys))
    assert set(paths["cid"].to_pylist()) <= expected_cids


class Crash(Exception):
    """Stands for the process dying in the middle of a write."""


# --- values -------------------------------------------------------------------------------


def test_ingest_twice_and_overlapping_packs_keep_one_row_per_cid(store: PrivateStore) -> None:
    pack_a = [invoice(n) for n in range(100)]
    pack_b = [invoice(n) for n in range(50, 150)]
    assert store.ingest_values(pack_a) == 100
    assert store.ingest_values(pack_a) == 0
    assert store.ingest_values(pack_b) == 50
    everything = {e[0]: e for e in pack_a + pack_b}
    assert_no_duplicate_values(store, set(everything))
    assert table(store, VALUE_PATHS).num_rows == path_rows_expected(list(everything.values()))
    assert table(store, VALUES).schema == VALUES_SCHEMA
    assert table(store, VALUE_PATHS).schema == VALUE_PATHS_SCHEMA
    first = everything[pack_a[0][0]]
    assert store.get_values([first[0], "bamlv_1_" + "0" * 64]) == {first[0]: (1, first[2])}


def test_ingest_dedupes_inside_one_call_and_keeps_the_first_locator(store: PrivateStore) -> None:
    cid, codec, body, _ = invoice(1)
    assert store.ingest_values([(cid, codec, body, "a#0"), (cid, codec, body, "b#0")]) == 1
    assert table(store, VALUES).to_pylist() == [
        {"cid": cid, "codec": 1, "body": body, "locator": "a#0"}
    ]
    assert store.ingest_values([]) == 0


def test_ingest_rejects_a_cid_that_does_not_match_its_body(store: PrivateStore) -> None:
    cid, codec, _, locator = invoice(1)
    good = invoice(2)
    with pytest.raises(PrivateStoreError, match="does not match"):
        store.ingest_values([good, (cid, codec, b"tampered", locator)])
    with pytest.raises(PrivateStoreError, match="not a value CID"):
        store.ingest_values([("cid-1", 1, b"x", "p")])
    assert store.open_dataset(VALUES) is None  # nothing of the bad batch was written
    assert store.ingest_values([good], verified=False) == 1  # the check is the default


def test_undecodable_bodies_get_a_corrupt_marker_and_other_codecs_no_paths(
    store: PrivateStore,
) -> None:
    corrupt = raw_entry(b"\x1a\x05ab", CODEC_VALUE)
    table_body = raw_entry(b"function table bytes", CODEC_FUNCTION_TABLE)
    fine = entry({"k": "v"})
    assert store.ingest_values([corrupt, table_body, fine]) == 3
    assert store.missing_values([corrupt[0], table_body[0], fine[0]]) == set()
    rows = sorted(table(store, VALUE_PATHS).to_pylist(), key=lambda r: r["cid"] != fine[0])
    assert rows == [
        {"cid": fine[0], "path": "$.k", "kind": "string", "str_value": "v", "num_value": None},
        {"cid": corrupt[0], "path": "$", "kind": "corrupt", "str_value": None, "num_value": None},
    ]


def test_crash_between_paths_and_values_is_repaired_by_the_next_ingest(
    store: PrivateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = [invoice(n) for n in range(20)]
    real_write = lance.write_dataset

    def dying_write(data: Any, uri: Any, *args: Any, **kwargs: Any) -> Any:
        if str(uri).endswith(VALUES):
            raise Crash
        return real_write(data, uri, *args, **kwargs)

    monkeypatch.setattr(lance, "write_dataset", dying_write)
    with pytest.raises(Crash):
        store.ingest_values(entries[:10])
    assert store.open_dataset(VALUES) is None
    assert table(store, VALUE_PATHS).num_rows == path_rows_expected(entries[:10])
    monkeypatch.setattr(lance, "write_dataset", real_write)

    assert store.ingest_values(entries) == 20
    assert_no_duplicate_values(store, {e[0] for e in entries})
    assert table(store, VALUE_PATHS).num_rows == path_rows_expected(entries)


def test_missing_values(store: PrivateStore) -> None:
    entries = [invoice(n) for n in range(2500)]  # more than one IN-list chunk
    cids = {e[0] for e in entries}
    assert store.missing_values(cids) == cids  # no dataset yet: everything is missing
    store.ingest_values(entries[:1200])
    assert store.missing_values(cids) == {e[0] for e in entries[1200:]}
    assert store.missing_values([]) == set()
    assert len(store.get_values(cids)) == 1200


def test_concurrent_ingest_from_threads_writes_each_cid_once(store: PrivateStore) -> None:
    entries = [invoice(n) for n in range(120)]
    barrier = threading.Barrier(6)
    added: list[int] = []
    errors: list[BaseException] = []

    def run(k: int) -> None:
        mine = entries[k * 15 : k * 15 + 45]  # overlapping windows
        barrier.wait()
        try:
            added.append(PrivateStore(store.root_uri).ingest_values(mine))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    expected = {e[0] for e in entries[: 5 * 15 + 45]}
    assert sum(added) == len(expected)
    assert_no_duplicate_values(store, expected)


def test_concurrent_ingest_from_processes_writes_each_cid_once(tmp_path: Path) -> None:
    root = local_root(tmp_path)
    entries = [invoice(n) for n in range(200)]
    context = multiprocessing.get_context("spawn")
    with context.Pool(3) as pool:
        added = pool.starmap(
            ingest_in_process,
            [(root, entries[0:120]), (root, entries[40:160]), (root, entries[80:200])],
        )
    assert sum(added) == 200
    assert_no_duplicate_values(PrivateStore(root), {e[0] for e in entries})


# --- executions ---------------------------------------------------------------------------


def cids_for(store: PrivateStore) -> list[str]:
    entries = [invoice(n) for n in range(3)]
    store.ingest_values(entries)
    return [e[0] for e in entries]


def relation_rows(store: PrivateStore) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for name in ("threads_v1", "calls_v1", "function_definitions_v1"):
        t = table(store, name)
        assert t.schema == relation_schema(name)
        assert max(Counter(t["row_id"].to_pylist()).values()) == 1
        out[name] = sorted_rows(t, name)
    return out


def test_write_execution_twice_gives_one_row_set_and_one_marker(store: PrivateStore) -> None:
    private = execution_private(EXEC, cids_for(store))
    store.write_execution(EXEC, EXEC, "proc-1", private)
    first = relation_rows(store)
    marker_version = store.version()[PROJECTED]
    store.write_execution(EXEC, EXEC, "proc-1", private)
    assert relation_rows(store) == first
    assert [len(first[n]) for n in first] == [3, 5, 2]
    assert {r["execution_id"] for r in first["function_definitions_v1"]} == {EXEC}
    markers = table(store, PROJECTED)
    assert markers.schema == PROJECTED_SCHEMA
    assert markers.to_pylist() == [
        {"execution_id": EXEC, "root_id": EXEC, "process_id": "proc-1", "projected_at": T0}
    ]
    assert store.version()[PROJECTED] == marker_version  # the marker was not rewritten
    assert store.projected([EXEC, "baml_thread_1_other"]) == {EXEC}


def test_crash_before_the_marker_then_redelivery(
    store: PrivateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    private = execution_private(EXEC, cids_for(store))
    real_write = lance.write_dataset

    def dying_write(data: Any, uri: Any, *args: Any, **kwargs: Any) -> Any:
        if str(uri).endswith(PROJECTED):
            raise Crash
        return real_write(data, uri, *args, **kwargs)

    monkeypatch.setattr(lance, "write_dataset", dying_write)
    with pytest.raises(Crash):
        store.write_execution(EXEC, EXEC, "proc-1", private)
    assert store.projected([EXEC]) == set()
    assert store.open_dataset(PROJECTED) is None
    before = relation_rows(store)
    monkeypatch.setattr(lance, "write_dataset", real_write)

    store.write_execution(EXEC, EXEC, "proc-1", private)
    assert relation_rows(store) == before
    assert store.projected([EXEC]) == {EXEC}


def test_a_commit_conflict_is_retried_against_the_newest_version(
    store: PrivateStore, sleeps: Sleeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.ingest_values([invoice(n) for n in range(10)])
    real_commit = lance.LanceDataset.commit
    raised: list[str] = []

    def conflicting_once(base: Any, operation: Any, *args: Any, **kwargs: Any) -> Any:
        if not raised:
            raised.append(str(getattr(base, "uri", base)))
            raise CommitConflictError("injected: preempted by a concurrent commit")
        return real_commit(base, operation, *args, **kwargs)

    monkeypatch.setattr(lance.LanceDataset, "commit", staticmethod(conflicting_once))
    assert store.ingest_values([invoice(n) for n in range(5, 20)]) == 10
    assert len(raised) == 1 and len(sleeps.calls) == 1
    assert_no_duplicate_values(store, {invoice(n)[0] for n in range(20)})


def test_a_real_conflict_with_a_foreign_writer_is_replanned(
    store: PrivateStore, sleeps: Sleeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    cids = cids_for(store)
    store.write_execution(EXEC, EXEC, "proc-1", execution_private(EXEC, cids))
    real_commit = lance.LanceDataset.commit
    foreign_done: list[int] = []
    calls_uri = store.uri("calls_v1")

    def foreign_writer_first(base: Any, operation: Any, *args: Any, **kwargs: Any) -> Any:
        if not foreign_done and str(getattr(base, "uri", base)).endswith("calls_v1"):
            foreign_done.append(1)  # another writer updates the same rows in between
            other = calls_rows(EXEC, 5, cids, tag="foreign/")
            lance.dataset(calls_uri).merge_insert("row_id").when_matched_update_all().execute(
                other.cast(relation_schema("calls_v1"))
            )
        return real_commit(base, operation, *args, **kwargs)

    monkeypatch.setattr(lance.LanceDataset, "commit", staticmethod(foreign_writer_first))
    rerun = [("calls_v1", calls_rows(EXEC, 5, cids, tag="rerun/"))]
    store.write_execution(EXEC, EXEC, "proc-1", rerun)
    assert foreign_done and len(sleeps.calls) == 1  # Lance refused the stale commit once
    calls = table(store, "calls_v1")
    assert calls.num_rows == 5
    assert set(calls["call_site_file"].to_pylist()) == {"src/rerun/main.baml"}


def test_conflicts_past_the_budget_raise_a_transient_error(
    tmp_path: Path, sleeps: Sleeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PrivateStore(local_root(tmp_path), sleep=sleeps, max_attempts=3)
    store.ingest_values([invoice(1)])

    def always(*_: Any, **__: Any) -> Any:
        raise CommitConflictError("injected")

    monkeypatch.setattr(lance.LanceDataset, "commit", staticmethod(always))
    with pytest.raises(LanceCommitFailed, match="3 attempts") as info:
        store.ingest_values([invoice(2)])
    assert info.value.transient
    assert len(sleeps.calls) == 2
    assert store.missing_values([invoice(2)[0]]) == {invoice(2)[0]}


def exact(rows: pa.Table, *, ids: list[str | None] | None = None) -> pa.Table:
    """``calls_v1`` rows cast to :func:`relation_schema` (optionally other execution ids)."""
    schema = relation_schema("calls_v1")
    if ids is not None:
        rows = rows.set_column(
            rows.schema.get_field_index("execution_id"), "execution_id", pa.array(ids, pa.string())
        )
    return pa.Table.from_arrays([rows[f.name].cast(f.type) for f in schema], schema=schema)


@pytest.mark.parametrize(
    ("private", "message"),
    [
        ([("health_v1", pa.table({"row_id": ["r"]}))], "valid relations"),
        ([("calls_v1", pa.table({"row_id": ["r"]}))], "missing columns"),
        ([("calls_v1", calls_rows("baml_thread_1_other", 2, ["bamlv_1_" + "1" * 64]))], "other"),
        (
            [("calls_v1", pa.concat_tables([calls_rows(EXEC, 2, ["bamlv_1_" + "1" * 64])] * 2))],
            "repeated",
        ),
        (
            [
                ("calls_v1", calls_rows(EXEC, 1, ["bamlv_1_" + "1" * 64])),
                ("calls_v1", calls_rows(EXEC, 1, ["bamlv_1_" + "1" * 64])),
            ],
            "repeats",
        ),
        # rows already in the dataset's exact schema (the projector's own) are only checked
        (
            [("calls_v1", exact(calls_rows("baml_thread_1_other", 2, ["bamlv_1_" + "1" * 64])))],
            "other",
        ),
        (
            [("calls_v1", exact(calls_rows(EXEC, 2, ["bamlv_1_" + "1" * 64]), ids=[EXEC, None]))],
            "other",
        ),
        (
            [
                (
                    "calls_v1",
                    exact(pa.concat_tables([calls_rows(EXEC, 1, ["bamlv_1_" + "1" * 64])] * 2)),
                )
            ],
            "repeated",
        ),
    ],
)
def test_write_execution_rejects_bad_rows_and_writes_nothing(
    store: PrivateStore, private: list[tuple[str, pa.Table]], message: str
) -> None:
    with pytest.raises(PrivateStoreError, match=message):
        store.write_execution(EXEC, EXEC, "proc-1", private)
    assert store.version() == {}


def test_rows_in_the_exact_schema_are_written_as_given(store: PrivateStore) -> None:
    cids = cids_for(store)
    rows = exact(calls_rows(EXEC, 3, cids))
    assert rows.schema.equals(relation_schema("calls_v1"))
    store.write_execution(EXEC, EXEC, "p", [("calls_v1", rows)])
    stored = lance.dataset(store.uri("calls_v1")).to_table().sort_by("row_id")
    assert stored.select(rows.column_names).equals(rows.sort_by("row_id"))


def test_delete_executions_removes_rows_and_markers_but_not_values(store: PrivateStore) -> None:
    cids = cids_for(store)
    other = "baml_thread_1_exec-b"
    store.write_execution(EXEC, EXEC, "p", execution_private(EXEC, cids))
    store.write_execution(other, other, "p", execution_private(other, cids))
    store.delete_executions([EXEC])
    assert store.projected([EXEC, other]) == {other}
    for name in ("threads_v1", "calls_v1", "function_definitions_v1"):
        assert set(table(store, name)["execution_id"].to_pylist()) == {other}
    assert store.missing_values(cids) == set()


# --- versions and compaction ----------------------------------------------------------------


def test_reading_older_versions(store: PrivateStore) -> None:
    assert store.projected_at(0) == set()
    store.ingest_values([invoice(n) for n in range(10)])
    bound = store.version()[VALUES]
    store.ingest_values([invoice(n) for n in range(10, 30)])
    assert table(store, VALUES, version=bound).num_rows == 10
    assert table(store, VALUES).num_rows == 30

    cids = cids_for(store)
    store.write_execution(EXEC, EXEC, "p", execution_private(EXEC, cids))
    first_marker = store.version()[PROJECTED]
    store.write_execution("baml_thread_1_b", "baml_thread_1_b", "p", [])
    assert store.projected_at(first_marker) == {EXEC}
    assert store.projected_at(store.version()[PROJECTED]) == {EXEC, "baml_thread_1_b"}
    assert set(store.version()) == {VALUES, VALUE_PATHS, PROJECTED, "threads_v1", "calls_v1",
                                    "function_definitions_v1"}  # fmt: skip
    with pytest.raises(PrivateStoreError, match="no version 999"):
        store.open_dataset(VALUES, version=999)
    with pytest.raises(PrivateStoreError, match="unknown dataset"):
        store.open_dataset("nope_v1")


def test_compaction_indexes_and_keeps_bound_versions(store: PrivateStore) -> None:
    for start in range(1000, 1200, 20):  # ten ingests: ten small fragments
        store.ingest_values([invoice(n) for n in range(start, start + 20)])
    cids = cids_for(store)
    store.write_execution(EXEC, EXEC, "p", execution_private(EXEC, cids))
    bound = store.version()
    paths_before = len(store.open_dataset(VALUE_PATHS).get_fragments())  # type: ignore[union-attr]

    report = store.compact(timedelta(days=7), now=datetime.now(UTC))

    by_name = {d.name: d for d in report.datasets}
    assert set(by_name) == set(bound)
    paths = by_name[VALUE_PATHS]
    assert paths.fragments_removed == paths_before and paths.fragments_added == 1
    assert set(paths.indexes_created) == {"cid_btree", "path_btree", "str_value_ngram"}
    assert by_name[PROJECTED].indexes_created == ("execution_id_btree",)
    assert by_name["calls_v1"].indexes_created == ("row_id_btree", "execution_id_btree")
    assert paths.versions_removed == 0  # all versions are younger than the retention
    # the versions a query bound before compaction still read the same rows
    assert table(store, VALUES, version=bound[VALUES]).num_rows == 203
    assert (
        table(store, VALUE_PATHS, version=bound[VALUE_PATHS]).num_rows
        == table(store, VALUE_PATHS).num_rows
    )

    ds = store.open_dataset(VALUE_PATHS)
    assert ds is not None
    indexes = {d.name: d.type_url for d in ds.describe_indices()}
    assert "NGram" in indexes["str_value_ngram"] and "BTree" in indexes["cid_btree"]
    where = "str_value LIKE '%INV-10%'"
    assert "ScalarIndexQuery" in ds.scanner(filter=where).explain_plan()
    hits = ds.to_table(columns=["path", "str_value"], filter=where).to_pylist()
    assert sorted(h["str_value"] for h in hits) == sorted(f"INV-{n}" for n in range(1000, 1100))
    assert {h["path"] for h in hits} == {"$.invoice.id"}

    # a second run adds later rows to the existing indexes and creates none
    store.ingest_values([invoice(5000)])
    again = {d.name: d for d in store.compact(timedelta(days=7), now=datetime.now(UTC)).datasets}
    assert again[VALUE_PATHS].indexes_created == ()
    ds = store.open_dataset(VALUE_PATHS)
    assert ds is not None
    assert ds.to_table(filter="str_value = 'INV-5000'").num_rows == 1


def test_compaction_removes_versions_past_the_retention(store: PrivateStore) -> None:
    store.ingest_values([invoice(1)])
    old = store.version()[VALUES]
    store.ingest_values([invoice(2)])
    report = store.compact(timedelta(hours=1), now=datetime.now(UTC) + timedelta(days=1))
    assert {d.name: d for d in report.datasets}[VALUES].versions_removed >= 1
    with pytest.raises(PrivateStoreError, match=f"no version {old}"):
        store.open_dataset(VALUES, version=old)
    assert table(store, VALUES).num_rows == 2
    with pytest.raises(PrivateStoreError, match="negative"):
        store.compact(timedelta(seconds=-1))


def test_relation_schemas_drop_metadata_and_keep_types() -> None:
    calls = relation_schema("calls_v1")
    assert calls.names[:3] == ["row_id", "execution_id", "call_id"]
    assert calls.field("args").type == pa.binary() and calls.field("args").metadata is None
    assert relation_schema("function_definitions_v1").names[:3] == [
        "row_id",
        "execution_id",
        "program_id",
    ]
    assert set(RELATION_DATASETS) == {
        "threads_v1",
        "call_path_stats_v1",
        "calls_v1",
        "errors_v1",
        "function_definitions_v1",
    }


# --- S3 (ministack) -------------------------------------------------------------------------


@pytest.fixture
def s3_store(ministack_endpoint: str) -> Iterator[PrivateStore]:
    from ministack_fixture import client, lance_options

    bucket = f"lance-{uuid.uuid4().hex[:20]}"
    client("s3", ministack_endpoint).create_bucket(Bucket=bucket)
    options = lance_options(ministack_endpoint)
    yield PrivateStore(
        f"s3://{bucket}/derived/v1/tenant/project/env", storage_options=options, clock=lambda: T0
    )


def test_s3_ingest_write_execution_and_compact(
    s3_store: PrivateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = [invoice(n) for n in range(40)]
    assert s3_store.missing_values([e[0] for e in entries]) == {e[0] for e in entries}
    assert s3_store.ingest_values(entries[:30]) == 30
    assert s3_store.ingest_values(entries) == 10
    assert_no_duplicate_values(s3_store, {e[0] for e in entries})
    cids = [e[0] for e in entries[:3]]
    private = execution_private(EXEC, cids)
    s3_store.write_execution(EXEC, EXEC, "proc-1", private)
    first = relation_rows(s3_store)
    bound = s3_store.version()

    real_commit = lance.LanceDataset.commit
    raised: list[int] = []

    def conflicting_once(base: Any, operation: Any, *args: Any, **kwargs: Any) -> Any:
        if not raised:
            raised.append(1)
            raise CommitConflictError("injected")
        return real_commit(base, operation, *args, **kwargs)

    monkeypatch.setattr(lance.LanceDataset, "commit", staticmethod(conflicting_once))
    s3_store.write_execution(EXEC, EXEC, "proc-1", private)
    monkeypatch.undo()
    assert raised == [1]
    assert relation_rows(s3_store) == first
    assert s3_store.projected([EXEC]) == {EXEC}

    report = s3_store.compact(timedelta(days=1))
    assert any(d.indexes_created for d in report.datasets)
    assert table(s3_store, VALUES, version=bound[VALUES]).num_rows == 40
    ds = s3_store.open_dataset(VALUE_PATHS)
    assert ds is not None
    assert ds.to_table(filter="str_value LIKE '%INV-1%'").num_rows == 11  # INV-1, INV-10..19
    s3_store.delete_executions([EXEC])
    assert s3_store.projected([EXEC]) == set()


def test_s3_missing_dataset_reads_as_absent(s3_store: PrivateStore) -> None:
    assert s3_store.version() == {}
    assert s3_store.get_values(["bamlv_1_" + "0" * 64]) == {}
    assert s3_store.projected(["x"]) == set()


@pytest.mark.parametrize(
    "root", ["garbage://x", "s3://", "http://bucket/derived", "", "  ", "S3:/bad"]
)
def test_a_dataset_root_lance_cannot_open_is_refused_at_once(root: str) -> None:
    """Refused when the store is made (a typo used to fail every write, and the projector
    quarantined the messages that made them). ``S3:/bad`` has no ``://``: a local path."""
    if root == "S3:/bad":
        assert check_dataset_root(root) == root
        return
    with pytest.raises(ValueError, match="Lance"):
        PrivateStore(root)


def test_the_cli_refuses_a_dataset_root_before_doing_anything(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from baml_studio.cli import main

    (tmp_path / "dp").mkdir()
    args = ["projector", "--data", str(tmp_path / "dp"), "--control-plane", "http://127.0.0.1:9",
            "--token", "t", "--derived", "garbage://x", "--once"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "garbage://x" in result.output, result.output
    assert list((tmp_path / "dp").iterdir()) == []
