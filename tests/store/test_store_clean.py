"""clean_profiles_v1: only .baml/profiles-v1, only when nothing has it open."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_helpers import meta_encoder

from baml_studio.store import (
    InvalidStoreRoot,
    StoreInUse,
    StoreLayout,
    StoreReader,
    StreamStore,
    clean_profiles_v1,
)
from baml_studio.store.locks import FileLock


def test_clean_removes_the_tree_and_keeps_history(root: Path, euid: bytes) -> None:
    with StreamStore.open(root, euid) as store:
        store.publish_meta(meta_encoder(euid))
        store.publish_cas(1, b"v")
    history = root.parent / "history"
    history.mkdir()
    (history / "keep.txt").write_text("keep")
    assert clean_profiles_v1(root) is True
    assert not root.exists()
    assert (history / "keep.txt").read_text() == "keep"
    assert (root.parent / ".gitignore").exists()
    assert clean_profiles_v1(root) is False
    with StreamStore.open(root, euid) as store:
        assert store.high_water.meta == 0


def test_clean_refuses_while_a_stream_is_open_in_process(root: Path, euid: bytes) -> None:
    with StreamStore.open(root, euid) as store:
        store.publish_meta(meta_encoder(euid))
        with pytest.raises(StoreInUse):
            clean_profiles_v1(root)
        assert StoreReader(root).meta_sequences(euid) == [1]
    assert clean_profiles_v1(root) is True


def test_clean_refuses_during_a_reader_call(root: Path, euid: bytes) -> None:
    with StreamStore.open(root, euid) as store:
        store.publish_meta(meta_encoder(euid))
    # what every StoreReader call holds for its duration
    with (
        FileLock.acquire(StoreLayout(root).lease_lock, exclusive=False),
        pytest.raises(StoreInUse),
    ):
        clean_profiles_v1(root)
    assert clean_profiles_v1(root) is True


@pytest.mark.parametrize(
    "relative", ["profiles-v1", ".baml/other", "baml/profiles-v1", ".baml/history", ".baml"]
)
def test_clean_refuses_other_roots(tmp_path: Path, relative: str) -> None:
    target = tmp_path / relative
    target.mkdir(parents=True)
    (target / "precious").write_text("x")
    with pytest.raises(InvalidStoreRoot):
        clean_profiles_v1(target)
    assert (target / "precious").exists()


def test_clean_of_an_absent_store(tmp_path: Path) -> None:
    assert clean_profiles_v1(tmp_path / ".baml" / "profiles-v1") is False
    assert not (tmp_path / ".baml").exists()


def test_clean_refuses_a_symlinked_root(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / ".baml").mkdir()
    (tmp_path / ".baml" / "profiles-v1").symlink_to(real)
    with pytest.raises(InvalidStoreRoot):
        clean_profiles_v1(tmp_path / ".baml" / "profiles-v1")
    assert real.is_dir()
