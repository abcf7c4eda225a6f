"""``PrivateStore.delete_values``: the rows of the given CIDs leave values_v1 and
value_paths_v1, the others stay, and a call that matches nothing commits no version."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "projector"))

from lance_fixtures import invoice

from baml_studio.projector.lance_store import VALUE_PATHS, VALUES, PrivateStore


def cids(store: PrivateStore, name: str) -> set[str]:
    dataset = store.open_dataset(name)
    assert dataset is not None
    return set(dataset.to_table(columns=["cid"])["cid"].to_pylist())


def test_deleted_values_lose_their_paths_and_the_rest_stay(tmp_path: Path) -> None:
    store = PrivateStore(str(tmp_path / "derived"))
    entries = [invoice(n) for n in range(1200)]  # more than one IN-list chunk
    assert store.ingest_values(entries) == 1200
    doomed = {e[0] for e in entries[:1100]}
    kept = {e[0] for e in entries[1100:]}
    assert store.delete_values([*doomed, "bamlv_1_" + "0" * 64]) == 1100
    assert cids(store, VALUES) == kept
    assert cids(store, VALUE_PATHS) == kept
    assert store.missing_values(doomed) == doomed

    before = store.version()
    assert store.delete_values(doomed) == 0
    assert store.version() == before  # nothing matched: no new version
    assert store.ingest_values(entries[:1]) == 1  # an erased value can be stored again
    assert cids(store, VALUE_PATHS) == kept | {entries[0][0]}
