"""CAS publication: Published, Reused (re-verified, never rewritten), Conflict."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from store_helpers import FaultyFs

from baml_studio.format.cas import decode_cas_object, encode_cas_object
from baml_studio.format.ids import value_cid
from baml_studio.store import (
    Conflict,
    Published,
    Reused,
    StoreLayout,
    StreamStore,
    scan_physical_usage,
)
from baml_studio.store.usage import read_usage_state


def test_publish_then_reuse(root: Path, euid: bytes) -> None:
    layout = StoreLayout(root)
    cid = value_cid(1, b"hello")
    fs = FaultyFs()
    with StreamStore.open(root, euid, fs=fs) as store:
        assert store.publish_cas(1, b"hello") == Published(cid)
        path = layout.cas_path(cid)
        assert path == root / "cas" / "sha256" / cid.hex()[:2] / f"{cid.hex()}.bamlvalue"
        assert decode_cas_object(path.read_bytes()).body == b"hello"
        usage, creates = read_usage_state(layout), len(fs.ops("create_new"))
        assert store.publish_cas(1, b"hello") == Reused(cid)
        assert len(fs.ops("create_new")) == creates
        assert read_usage_state(layout) == usage == scan_physical_usage(layout)


def test_codec_is_part_of_the_identity(root: Path, euid: bytes) -> None:
    with StreamStore.open(root, euid) as store:
        one = store.publish_cas(1, b"same")
        two = store.publish_cas(2, b"same")
    assert isinstance(one, Published) and isinstance(two, Published)
    assert one.cid != two.cid


@pytest.mark.parametrize("damage", ["flip", "truncate", "append", "other_object", "directory"])
def test_damaged_existing_object_is_a_conflict_and_left_alone(
    root: Path, euid: bytes, damage: str
) -> None:
    layout = StoreLayout(root)
    cid = value_cid(1, b"payload")
    path = layout.cas_path(cid)
    with StreamStore.open(root, euid) as store:
        store.publish_cas(1, b"payload")
        raw = path.read_bytes()
        if damage == "directory":
            path.unlink()
            path.mkdir()
        else:
            damaged = {
                "flip": raw[:60] + bytes([raw[60] ^ 1]) + raw[61:],
                "truncate": raw[:-1],
                "append": raw + b"\x00",
                "other_object": encode_cas_object(1, b"payloaD"),
            }[damage]
            path.write_bytes(damaged)
        before = path.read_bytes() if path.is_file() else None
        assert store.publish_cas(1, b"payload") == Conflict(cid)
        assert (path.read_bytes() if path.is_file() else None) == before


def test_object_appearing_at_the_recheck_is_verified_not_overwritten(
    root: Path, euid: bytes
) -> None:
    """Another writer publishes the same object after our fast path but before our recheck."""
    cid = value_cid(1, b"raced")
    path = StoreLayout(root).cas_path(cid)

    class RacingFs(FaultyFs):
        def fsync(self, fd: int) -> None:
            super().fsync(fd)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(encode_cas_object(1, b"raced"))

    with StreamStore.open(root, euid, fs=RacingFs()) as store:
        assert store.publish_cas(1, b"raced") == Reused(cid)
        assert not list((root / "tmp").glob("*.pending"))


@pytest.mark.parametrize("look", range(1, 7))
def test_an_object_appearing_during_the_first_look_is_never_a_conflict(
    root: Path, euid: bytes, monkeypatch: pytest.MonkeyPatch, look: int
) -> None:
    """Another process publishes the same object (complete, by rename) just before the writer's
    ``look``-th look at its final path. Whatever the writer saw, absent or present, the
    outcome is the object, never a conflict: a look made of several checks (link? file?
    exists?) once saw it absent and then present, and refused an engine's function table."""
    raw = encode_cas_object(2, b"table")
    cid = value_cid(2, b"table")
    final = StoreLayout(root).cas_path(cid)
    real_stat, real_lstat, real_rename = os.stat, os.lstat, os.rename
    looks = 0

    def appear_before_a_look(real):  # type: ignore[no-untyped-def]
        def look_at(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            nonlocal looks
            if os.fspath(path) == str(final):
                looks += 1
                if looks == look:
                    theirs = os.path.join(os.path.dirname(final), "theirs.tmp")
                    os.makedirs(os.path.dirname(final), exist_ok=True)
                    with open(theirs, "wb") as file:
                        file.write(raw)
                    real_rename(theirs, final)
            return real(path, *args, **kwargs)

        return look_at

    with StreamStore.open(root, euid) as store:
        monkeypatch.setattr(os, "stat", appear_before_a_look(real_stat))
        monkeypatch.setattr(os, "lstat", appear_before_a_look(real_lstat))
        result = store.publish_cas(2, b"table")
        monkeypatch.undo()
    assert result in (Published(cid), Reused(cid))
    assert final.read_bytes() == raw
