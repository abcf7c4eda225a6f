"""The reference count and the plan over an in-memory bucket: doomed CIDs are exactly those no
remaining stream references; packs carrying them are rewritten; the index saves every re-read;
an unreadable object is counted, not fatal. Also the rewritten pack's flush id."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from json_fuzz import JSON_VALUES, mutations

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "projector"))

from projector_fixtures import SCOPE, MemoryStore, put, upload_store, workload_store

from baml_studio.erasure.errors import ErasureError, ErasureStoreError, is_transient
from baml_studio.erasure.plan import ErasurePlan, PlanStats, build_plan
from baml_studio.erasure.refs import ObjectRefs, RefIndex, RefReader, list_streams
from baml_studio.erasure.steps import MAX_GENERATIONS, generations_through, rewritten_flush_id
from baml_studio.gateway.keys import cas_key, check_flush_ulid, evidence_prefix, pack_key
from baml_studio.projector.gather import referenced_values
from baml_studio.publisher.pack import encode_pack
from baml_studio.store import StoreReader
from baml_studio.store.layout import StoreLayout

__all__ = ["workload_store"]

FLUSH = "01J8ZK3V5N4Q2W8X7Y6T5R4E3D"


def bucket(root: Path) -> tuple[MemoryStore, list[str], dict[str, set[bytes]]]:
    """The store in memory (every value under cas/values/) plus one pack under the first
    stream carrying every small value of both streams, as the publisher's carrier does."""
    store = MemoryStore()
    upload_store(root, store)
    reader = StoreReader(root)
    euids = [e.hex() for e in reader.list_streams()]
    refs: dict[str, set[bytes]] = {}
    for euid in reader.list_streams():
        refs[euid.hex()] = set()
        for seq in reader.data_sequences(euid):
            refs[euid.hex()] |= referenced_values(reader.read_data(euid, seq).groups)
    small = sorted({c for cids in refs.values() for c in cids})[:40]
    files = [StoreLayout(root).cas_path(c).read_bytes() for c in small]
    put(store, pack_key(SCOPE, euids[0], FLUSH), encode_pack(files))
    return store, euids, refs


def plan(store: MemoryStore, erased: list[str], index: RefIndex | None = None) -> ErasurePlan:
    reader = RefReader(store, SCOPE, index, max_object_bytes=1 << 28)
    return build_plan(erased, list_streams(store, SCOPE), reader)


def test_doomed_values_are_those_no_remaining_stream_references(workload_store: Path) -> None:
    store, (first, second), refs = bucket(workload_store)
    made = plan(store, [second])
    doomed = {bytes.fromhex(c) for c in made.doomed_values}
    assert doomed == refs[second] - refs[first] and doomed
    assert made.doomed_tables == ()  # one program: the first stream still uses its table
    assert made.rewrite_packs == (pack_key(SCOPE, first, FLUSH),)  # it carries doomed values
    assert made.packs == ()
    assert set(made.object_keys) == {
        i.key for i in store.list(f"{evidence_prefix(SCOPE)}streams/{second}/")
    }
    assert made.root_ids and made.stats.remaining_streams == 1

    both = plan(store, [first, second])
    assert {bytes.fromhex(c) for c in both.doomed_values} == refs[first] | refs[second]
    tables = [i.key for i in store.list(f"{evidence_prefix(SCOPE)}cas/tables/")]
    assert [cas_key(SCOPE, "tables", t) for t in both.doomed_tables] == tables
    assert both.packs == (pack_key(SCOPE, first, FLUSH),) and both.rewrite_packs == ()
    assert ErasurePlan.from_json(both.to_json()) == both


def test_the_index_saves_every_reread_and_gives_the_same_plan(
    workload_store: Path, tmp_path: Path
) -> None:
    store, (_first, second), _ = bucket(workload_store)
    index = RefIndex(tmp_path / "refs.sqlite")
    cold = plan(store, [second], index)
    warm = plan(store, [second], RefIndex(tmp_path / "refs.sqlite"))
    assert cold.stats.objects_read == cold.stats.objects_listed and cold.stats.objects_cached == 0
    assert warm.stats.objects_read == 0 and warm.stats.objects_cached == cold.stats.objects_listed
    strip = {"stats": None}
    assert {**cold.to_json(), **strip} == {**warm.to_json(), **strip}


def test_an_unreadable_object_is_counted_and_the_plan_goes_on(workload_store: Path) -> None:
    store, (first, second), _refs = bucket(workload_store)
    data = next(k for k in store.objects if f"/{first}/data/" in k)
    put(store, data, b"not a zstd frame")
    made = plan(store, [second])
    assert [c.split(":")[0] for c in made.stats.corrupt] == [data]
    assert made.doomed_values  # what the readable objects say still counts


def test_a_rewritten_pack_gets_a_valid_deterministic_flush_id() -> None:
    kept = [b"\x01" * 32, b"\x02" * 32]
    one = rewritten_flush_id(FLUSH, "k", kept)
    assert one == rewritten_flush_id(FLUSH, "k", list(reversed(kept)))
    assert check_flush_ulid(one) == one and one[:10] == FLUSH[:10] and one != FLUSH
    assert rewritten_flush_id(FLUSH, "k", kept[:1]) != one


PLAN = ErasurePlan(
    streams=("a" * 32,),
    object_keys=("k/meta", "k/data"),
    packs=("k/pack",),
    root_ids=("root_1",),
    doomed_values=("c" * 64,),
    doomed_tables=(),
    rewrite_packs=("k/other-pack",),
    stats=PlanStats(remaining_streams=2, objects_listed=5, corrupt=("k/bad",)),
)
PLAN_JSON = json.loads(json.dumps(PLAN.to_json()))


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES | mutations(PLAN_JSON))
def test_fuzz_stored_plans_load_or_raise_erasure_store_error(raw: Any) -> None:
    try:
        loaded = ErasurePlan.from_json(raw)
    except ErasureStoreError as exc:
        assert exc.message.startswith("the stored erasure plan")
        return
    assert ErasurePlan.from_json(json.loads(json.dumps(loaded.to_json()))) == loaded
    texts = (*loaded.streams, *loaded.object_keys, *loaded.root_ids, *loaded.stats.corrupt)
    assert all(isinstance(text, str) for text in texts)
    assert type(loaded.stats.objects_read) is int


def test_a_stored_plan_reads_back_from_its_json() -> None:
    assert ErasurePlan.from_json(PLAN_JSON) == PLAN
    without_stats = {k: v for k, v in PLAN_JSON.items() if k != "stats"}
    assert ErasurePlan.from_json(without_stats).stats == PlanStats()
    assert ErasurePlan.from_json({**without_stats, "stats": None}).stats == PlanStats()


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (None, "must be a JSON object {...}, not None"),
        ([], "must be a JSON object {...}, not []"),
        (True, "must be a JSON object {...}, not True"),
        ({**PLAN_JSON, "streams": "ab"}, "streams is 'ab'; it must be a list of strings"),
        ({**PLAN_JSON, "root_ids": [1]}, "root_ids is [1]"),
        ({k: v for k, v in PLAN_JSON.items() if k != "packs"}, "lacks the settings ['packs']"),
        ({**PLAN_JSON, "stats": {"x": 1}}, "stats has unknown settings ['x']"),
        ({**PLAN_JSON, "stats": {"corrupt": None}}, "stats.corrupt is None"),
    ],
)
def test_a_malformed_stored_plan_raises_erasure_store_error(raw: Any, fragment: str) -> None:
    with pytest.raises(ErasureStoreError) as caught:
        ErasurePlan.from_json(raw)
    assert fragment in caught.value.message and caught.value.status == 500


def test_generations_through_walks_gen_1_to_the_active_one() -> None:
    assert generations_through("gen_3") == ("gen_1", "gen_2", "gen_3")
    assert generations_through(f"gen_{MAX_GENERATIONS}")[-1] == f"gen_{MAX_GENERATIONS}"
    assert generations_through("blue") == ("blue",)  # another naming: that one only


@given(st.integers(MAX_GENERATIONS + 1, 10**18 - 1) | st.text(max_size=30))
def test_fuzz_generations_through_is_bounded_or_a_terminal_erasure_error(answer: Any) -> None:
    """Whatever generation the control plane answers, the steps get a short tuple or a
    terminal ErasureError (gen_999999999999999999 used to build a tuple of 10^18 names)."""
    active = f"gen_{answer}" if isinstance(answer, int) else answer
    try:
        done = generations_through(active)
    except ErasureError as exc:
        assert not is_transient(exc)
        assert active in str(exc)
    else:
        assert 1 <= len(done) <= MAX_GENERATIONS
        assert done[-1] == active


@pytest.mark.parametrize(
    ("cids", "roots"), [(b"\x01" * 31, "[]"), (b"", "{not json"), (b"", '{"a": 1}'), ("x", "[]")]
)
def test_a_damaged_reference_index_row_is_a_miss(tmp_path: Path, cids: object, roots: str) -> None:
    """The reference index is a cache: a row it cannot read is read again from the object
    (a miss), then replaced (it was JSONDecodeError, or CIDs cut at the wrong length)."""
    path = tmp_path / "refs.sqlite"
    index = RefIndex(path)
    good = ObjectRefs(frozenset({b"\x02" * 32}), ("root_1",))
    index.put("k", "etag", good)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE object_refs SET cids = ?, roots = ? WHERE key = 'k'", (cids, roots))
    conn.close()
    assert index.get("k", "etag") is None
    index.put("k", "etag", good)
    assert index.get("k", "etag") == good
