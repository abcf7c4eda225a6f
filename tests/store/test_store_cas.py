"""CAS publication: Published, Reused (re-verified, never rewritten), Conflict."""

from __future__ import annotations

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
