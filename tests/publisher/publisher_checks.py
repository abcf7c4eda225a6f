"""Checks shared by the two-family publisher tests: what the local store holds, what the
publisher's cursors passed, and what landed in the bucket."""

from __future__ import annotations

from pathlib import Path

from publisher_real_gateway import PREFIX, RealGateway

from baml_studio.publisher import PublisherSettings, PublishState
from baml_studio.store import StoreReader


def fast_settings(root: Path, url: str, **extra: object) -> PublisherSettings:
    """Settings with a short backoff (tests retry within a second)."""
    base: dict[str, object] = {"backoff_base_seconds": 0.01, "backoff_max_seconds": 0.05}
    return PublisherSettings(root, url, **(base | extra))  # type: ignore[arg-type]


def segment_keys(root: Path) -> list[str]:
    """The bucket key of every segment in the local store, per stream and plane in order."""
    reader = StoreReader(root)
    keys = []
    for euid in reader.list_streams():
        for plane, sequences in (
            ("meta", reader.meta_sequences(euid)),
            ("data", reader.data_sequences(euid)),
        ):
            stem = f"{PREFIX}streams/{euid.hex()}/{plane}/"
            keys += [f"{stem}{s:020d}.baml{plane}.zst" for s in sorted(sequences)]
    return keys


def all_shipped(root: Path) -> bool:
    """Every plane's cursor is at its highest local segment."""
    reader, state = StoreReader(root), PublishState(root)
    for euid in reader.list_streams():
        cursor = state.read_cursor(euid)
        if cursor.meta != max(reader.meta_sequences(euid), default=0):
            return False
        if cursor.data != max(reader.data_sequences(euid), default=0):
            return False
    return True


def assert_everything_stored(gateway: RealGateway, root: Path) -> None:
    """Every local segment is in the bucket and the cursors passed every segment."""
    assert all_shipped(root)
    for key in segment_keys(root):
        assert gateway.store.head(key).size > 0, key


def files(root: Path) -> dict[str, int]:
    """Every store file (segments, values, tables) by relative path, with its size."""
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*.baml*")}
