"""The read cache: hits and misses, LRU eviction, corrupt entries, a vanished directory,
threads and processes sharing it, and the entry decoder fuzzed."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.coordinator.cache import (
    FORMAT_DIR,
    HEADER_BYTES,
    MAGIC,
    STALE_TEMP_S,
    TEMP_PREFIX,
    ReadCache,
    cached,
    decode_entry,
    encode_entry,
    key_digest,
)

GOLDEN = bytes.fromhex(
    "42414d4c52433031"  # magic BAMLRC01
    "0000000000000005"  # length
    "61dfdd5d2344c165547b9ac705c5e4c208fdbbe95bac4e48b7a16e079fd7ad43"  # sha256(values\0cid1)
    "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"  # sha256(hello)
    "68656c6c6f"  # hello
)


def entry_path(directory: Path, namespace: str, key: str) -> Path:
    hexed = key_digest(namespace, key).hex()
    return directory / FORMAT_DIR / namespace / hexed[:2] / hexed


def body(n: int, size: int = 100) -> bytes:
    return hashlib.sha256(str(n).encode()).digest() * (size // 32) + b"x" * (size % 32)


def files_under(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file())


# --- the entry format ----------------------------------------------------------------------


def test_golden_entry() -> None:
    assert encode_entry(key_digest("values", "cid1"), b"hello") == GOLDEN
    assert decode_entry(GOLDEN, key_digest("values", "cid1")) == b"hello"
    assert decode_entry(GOLDEN, key_digest("values", "cid2")) is None
    assert decode_entry(GOLDEN, key_digest("cas", "cid1")) is None
    assert len(GOLDEN) == HEADER_BYTES + 5 and GOLDEN.startswith(MAGIC)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300), st.binary(min_size=32, max_size=32))
def test_decoder_never_raises_on_random_bytes(data: bytes, digest: bytes) -> None:
    assert decode_entry(data, digest) is None
    assert decode_entry(MAGIC + data, digest) is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.binary(max_size=200), st.data())
def test_any_changed_byte_or_length_is_a_miss(
    key: str, payload: bytes, data: st.DataObject
) -> None:
    digest = key_digest("values", key)
    entry = encode_entry(digest, payload)
    assert decode_entry(entry, digest) == payload
    at = data.draw(st.integers(0, len(entry) - 1))
    flip = data.draw(st.integers(1, 255))
    changed = entry[:at] + bytes([entry[at] ^ flip]) + entry[at + 1 :]
    assert decode_entry(changed, digest) is None
    cut = data.draw(st.integers(0, len(entry) - 1))
    assert decode_entry(entry[:cut], digest) is None
    assert decode_entry(entry + data.draw(st.binary(min_size=1, max_size=8)), digest) is None


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_random_file_contents_are_a_miss_and_removed(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    directory = tmp_path_factory.mktemp("fuzz")
    cache = ReadCache(directory, 10_000)
    path = entry_path(directory, "values", "k")
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    assert cache.get("values", "k") is None
    assert not path.exists()
    assert cache.stats.corrupt == 1


# --- hits, misses, eviction ----------------------------------------------------------------


def test_hit_and_miss(tmp_path: Path) -> None:
    cache = ReadCache(tmp_path, 10_000)
    assert cache.get("values", "cid_a") is None
    cache.put("values", "cid_a", b"alpha")
    cache.put("cas", "cid_a", b"other namespace")
    assert cache.get("values", "cid_a") == b"alpha"
    assert cache.get("cas", "cid_a") == b"other namespace"
    assert cache.get("values", "cid_b") is None
    stats = cache.stats
    assert (stats.hits, stats.misses, stats.bytes_read_from_cache) == (2, 2, 5 + 15)
    assert stats.entries == 2 and stats.bytes == 2 * HEADER_BYTES + 5 + 15
    assert entry_path(tmp_path, "values", "cid_a").read_bytes() == encode_entry(
        key_digest("values", "cid_a"), b"alpha"
    )


def test_keys_are_any_text(tmp_path: Path) -> None:
    cache = ReadCache(tmp_path, 10_000)
    keys = ["../../etc/passwd", "a/b/c", "", "\udcff", "ü" * 300]
    for i, key in enumerate(keys):
        cache.put("cas", key, body(i))
    assert [cache.get("cas", key) for key in keys] == [body(i) for i in range(len(keys))]
    assert all(p.is_relative_to(tmp_path / FORMAT_DIR / "cas") for p in files_under(tmp_path))


def test_empty_body_is_a_hit(tmp_path: Path) -> None:
    cache = ReadCache(tmp_path, 10_000)
    cache.put("values", "empty", b"")
    assert cache.get("values", "empty") == b""


def test_cached_fetches_once_and_not_on_error(tmp_path: Path) -> None:
    cache = ReadCache(tmp_path, 10_000)
    calls: list[str] = []

    def fetch() -> bytes:
        calls.append("fetch")
        return b"from the bucket"

    assert cached(cache, "cas", "k", fetch) == b"from the bucket"
    assert cached(cache, "cas", "k", fetch) == b"from the bucket"
    assert calls == ["fetch"]

    def failing() -> bytes:
        raise ConnectionError("bucket down")

    with pytest.raises(ConnectionError):
        cached(cache, "cas", "other", failing)
    assert cache.get("cas", "other") is None


def test_eviction_keeps_the_recently_used(tmp_path: Path) -> None:
    entry = HEADER_BYTES + 100
    cache = ReadCache(tmp_path, 3 * entry)
    for n in range(3):
        cache.put("values", f"k{n}", body(n))
    assert cache.get("values", "k0") == body(0)  # k1 is now the least recently used
    cache.put("values", "k3", body(3))
    assert cache.stats.evictions == 1
    assert cache.get("values", "k1") is None
    assert not entry_path(tmp_path, "values", "k1").exists()
    assert [cache.get("values", f"k{n}") for n in (0, 2, 3)] == [body(0), body(2), body(3)]
    assert cache.stats.bytes == 3 * entry <= cache.max_bytes
    assert len(files_under(tmp_path)) == 3


def test_body_larger_than_the_cache_is_not_stored(tmp_path: Path) -> None:
    cache = ReadCache(tmp_path, HEADER_BYTES + 100)
    cache.put("values", "small", body(0, 100))
    cache.put("values", "big", body(1, 101))
    assert cache.get("values", "big") is None
    assert cache.get("values", "small") == body(0, 100)
    assert cache.stats.evictions == 0


def test_reopen_rebuilds_the_index_oldest_first(tmp_path: Path) -> None:
    entry = HEADER_BYTES + 100
    first = ReadCache(tmp_path, 10 * entry)
    for n in range(3):
        cache_path = entry_path(tmp_path, "values", f"k{n}")
        first.put("values", f"k{n}", body(n))
        os.utime(cache_path, (1_000_000 + n, 1_000_000 + n))
    os.utime(entry_path(tmp_path, "values", "k0"), (2_000_000, 2_000_000))  # used last
    stale = entry_path(tmp_path, "values", "k0").with_name(f"{TEMP_PREFIX}1.dead")
    stale.write_bytes(b"half")
    old = time.time() - STALE_TEMP_S - 10
    os.utime(stale, (old, old))
    fresh = stale.with_name(f"{TEMP_PREFIX}2.live")
    fresh.write_bytes(b"writing")
    again = ReadCache(tmp_path, 2 * entry)  # smaller: the two least recently used go at once
    assert again.stats.entries == 2 and again.stats.evictions == 1
    assert again.get("values", "k1") is None
    assert again.get("values", "k0") == body(0)
    assert again.get("values", "k2") == body(2)
    assert not stale.exists() and fresh.exists()


def test_clear(tmp_path: Path) -> None:
    cache = ReadCache(tmp_path, 10_000)
    cache.put("values", "a", b"a")
    assert cache.get("values", "a") == b"a"
    cache.clear()
    assert cache.get("values", "a") is None
    assert cache.stats.entries == 0 and cache.stats.bytes == 0 and cache.stats.hits == 1
    cache.put("values", "a", b"a")
    assert cache.get("values", "a") == b"a"


def test_disabled_cache_always_misses(tmp_path: Path) -> None:
    cache = ReadCache.disabled()
    assert not cache.enabled
    cache.put("values", "a", b"a")
    assert cache.get("values", "a") is None
    assert cached(cache, "values", "a", lambda: b"fetched") == b"fetched"
    cache.clear()
    assert cache.stats.misses == 2 and cache.stats.entries == 0


def test_bad_arguments(tmp_path: Path) -> None:
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(ValueError, match="max_bytes"):
            ReadCache(tmp_path, bad)  # type: ignore[arg-type]
    cache = ReadCache(tmp_path, 1000)
    for namespace in ("", "Values", "../x", "a/b", ".tmp", "x" * 65):
        with pytest.raises(ValueError, match="namespace"):
            cache.get(namespace, "k")
        with pytest.raises(ValueError, match="namespace"):
            cache.put(namespace, "k", b"")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(ValueError, match="cannot be created"):
        ReadCache(tmp_path / "file", 1000)


# --- damage --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "damage",
    ["flip_body", "truncate", "zeros", "empty", "other_key", "grow"],
)
def test_corrupt_entry_is_a_miss_and_removed(tmp_path: Path, damage: str) -> None:
    cache = ReadCache(tmp_path, 10_000)
    cache.put("values", "k", b"the value body")
    cache.put("values", "other", b"another body")
    path = entry_path(tmp_path, "values", "k")
    data = path.read_bytes()
    damaged = {
        "flip_body": data[:-1] + bytes([data[-1] ^ 1]),
        "truncate": data[:-3],
        "zeros": bytes(len(data)),
        "empty": b"",
        "other_key": entry_path(tmp_path, "values", "other").read_bytes(),
        "grow": data + b"!",
    }[damage]
    path.write_bytes(damaged)
    assert cache.get("values", "k") is None
    assert not path.exists()
    assert cache.stats.corrupt == 1 and cache.stats.misses == 1
    assert cache.get("values", "other") == b"another body"
    cache.put("values", "k", b"the value body")
    assert cache.get("values", "k") == b"the value body"


def test_oversize_file_is_not_read_whole(tmp_path: Path) -> None:
    cache = ReadCache(tmp_path, 1000)
    path = entry_path(tmp_path, "values", "k")
    path.parent.mkdir(parents=True)
    with path.open("wb") as f:
        f.truncate(50 * 1024 * 1024)
    assert cache.get("values", "k") is None
    assert not path.exists()


def test_directory_deleted_while_running(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = ReadCache(root, 10_000)
    cache.put("values", "a", b"alpha")
    cache.put("cas", "b", b"beta")
    shutil.rmtree(root)
    assert cache.get("values", "a") is None
    assert cache.get("cas", "b") is None
    assert cache.stats.entries == 0 and cache.stats.bytes == 0
    cache.put("values", "a", b"alpha")  # recreates what it needs
    assert cache.get("values", "a") == b"alpha"
    shutil.rmtree(root)
    cache.clear()
    assert cache.get("values", "a") is None


def test_unwritable_directory_counts_write_errors(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    cache = ReadCache(root, 10_000)
    shutil.rmtree(root)
    root.write_bytes(b"not a directory")
    cache.put("values", "a", b"alpha")
    cache.put("values", "b", b"beta")
    assert cache.get("values", "a") is None
    assert cache.stats.write_errors == 2 and cache.stats.entries == 0


# --- write-behind --------------------------------------------------------------------------


def test_put_later_is_served_at_once_and_written_by_the_thread(tmp_path: Path) -> None:
    cache = ReadCache(tmp_path, 10_000)
    cache._writing.acquire()  # hold the writer thread before its first write
    try:
        cache.put_later("values", "a", b"alpha")
        assert cache.get("values", "a") == b"alpha"  # from memory, before any file exists
        assert not entry_path(tmp_path, "values", "a").exists()
        assert cache.stats.pending == 1 and cache.stats.hits == 1
    finally:
        cache._writing.release()
    assert cache.flush(timeout=10)
    assert entry_path(tmp_path, "values", "a").exists()
    assert cache.stats.pending == 0 and cache.stats.entries == 1
    again = ReadCache(tmp_path, 10_000)  # another process sees the written entry
    assert again.get("values", "a") == b"alpha"


def test_put_later_drops_past_the_pending_bound(tmp_path: Path) -> None:
    cache = ReadCache(tmp_path, 3 * (HEADER_BYTES + 100))  # the bound is also max_bytes
    cache._writing.acquire()
    try:
        for n in range(400):  # far more than fits while the writer is held
            cache.put_later("values", f"k{n}", body(n))
        waiting = cache.stats.pending
        assert 1 <= waiting < 400 and cache.stats.writes_dropped == 400 - waiting
    finally:
        cache._writing.release()
    assert cache.flush(timeout=10)
    for n in range(400):  # whatever is served is the right body
        got = cache.get("values", f"k{n}")
        assert got is None or got == body(n)


def test_clear_drops_pending_writes_and_none_lands_after_it(tmp_path: Path) -> None:
    cache = ReadCache(tmp_path, 1_000_000)
    cache._writing.acquire()
    cleared = threading.Thread(target=cache.clear)
    try:
        for n in range(50):
            cache.put_later("values", f"k{n}", body(n))
        cleared.start()  # waits for the held writer
        time.sleep(0.05)
        assert cleared.is_alive()
    finally:
        cache._writing.release()
    cleared.join(10)
    assert cache.flush(timeout=10)
    for n in range(50):
        assert cache.get("values", f"k{n}") is None
    files = [f for _d, _s, names in os.walk(tmp_path) for f in names]
    assert files == [] and cache.stats.entries == 0


def test_put_later_on_a_disabled_or_vanished_cache(tmp_path: Path) -> None:
    disabled = ReadCache.disabled()
    disabled.put_later("values", "a", b"alpha")
    assert disabled.get("values", "a") is None and disabled.flush(timeout=1)
    root = tmp_path / "cache"
    cache = ReadCache(root, 10_000)
    shutil.rmtree(root)
    root.write_bytes(b"not a directory")
    cache.put_later("values", "a", b"alpha")
    assert cache.flush(timeout=10)
    assert cache.get("values", "a") is None
    assert cache.stats.write_errors == 1 and cache.stats.entries == 0
    with pytest.raises(ValueError, match="namespace"):
        cache.put_later("../x", "a", b"alpha")


# --- threads and processes -----------------------------------------------------------------


def hammer(
    cache: ReadCache, workers: int, rounds: int, clear_every: int = 0, *, later: bool = False
) -> list[int]:
    """``workers`` threads reading 60 keys and filling misses; the keys whose body was wrong."""
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []
    wrong: list[int] = []

    def run(worker: int) -> None:
        barrier.wait()
        try:
            for i in range(rounds):
                n = (i * 7 + worker * 13) % 60
                got = cache.get("values", f"k{n}")
                if got is None:
                    (cache.put_later if later else cache.put)("values", f"k{n}", body(n))
                elif got != body(n):
                    wrong.append(n)
                if clear_every and worker == 0 and i % clear_every == 0:
                    cache.clear()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    return wrong


def test_threads_stay_within_the_budget(tmp_path: Path) -> None:
    cache = ReadCache(tmp_path, 20 * (HEADER_BYTES + 100))  # 60 keys: constant eviction
    assert hammer(cache, 8, 400) == []
    stats = cache.stats
    assert stats.hits > 0 and stats.evictions > 0 and stats.corrupt == 0
    assert stats.bytes <= cache.max_bytes
    entries = files_under(tmp_path)
    assert sum(p.stat().st_size for p in entries) <= cache.max_bytes
    assert not [p for p in entries if p.name.startswith(TEMP_PREFIX)]
    assert stats.entries >= len(entries)  # every file on disk is indexed (so it can be evicted)


@pytest.mark.parametrize("later", [False, True], ids=["put", "put_later"])
def test_threads_with_clears_never_see_a_wrong_body(tmp_path: Path, later: bool) -> None:
    cache = ReadCache(tmp_path, 20 * (HEADER_BYTES + 100))
    assert hammer(cache, 8, 400, clear_every=37, later=later) == []
    assert cache.flush(timeout=10)
    assert cache.stats.corrupt == 0
    assert cache.stats.bytes <= cache.max_bytes


def test_an_entry_evicted_while_it_is_read_does_not_come_back_into_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hit whose file was evicted between its read and its bookkeeping is still a hit, but
    the index neither counts it again nor leaves the budget (it did both: a rare failure of the
    threaded tests above, ``stats.bytes`` over ``max_bytes``)."""
    import baml_studio.coordinator.cache as cache_mod

    cache = ReadCache(tmp_path, 2 * (HEADER_BYTES + 100))  # two entries fit
    cache.put("values", "a", body(1))
    real = cache_mod.decode_entry

    def evicted_meanwhile(data: bytes, digest: bytes) -> bytes | None:
        monkeypatch.setattr(cache_mod, "decode_entry", real)
        cache.put("values", "b", body(2))
        cache.put("values", "c", body(3))  # evicts "a", the least recently used
        return real(data, digest)

    monkeypatch.setattr(cache_mod, "decode_entry", evicted_meanwhile)
    assert cache.get("values", "a") == body(1)
    stats = cache.stats
    on_disk = files_under(tmp_path)
    assert stats.evictions == 1 and stats.bytes <= cache.max_bytes
    assert (stats.entries, stats.bytes) == (len(on_disk), sum(p.stat().st_size for p in on_disk))
    assert cache.get("values", "a") is None


def test_an_entry_another_process_wrote_joins_the_index_within_the_budget(
    tmp_path: Path,
) -> None:
    cache = ReadCache(tmp_path, 2 * (HEADER_BYTES + 100))
    other = ReadCache(tmp_path, 1 << 20)  # another process sharing the directory
    for n in range(3):
        other.put("values", f"k{n}", body(n))
    for n in range(3):
        assert cache.get("values", f"k{n}") == body(n)
    assert cache.stats.bytes <= cache.max_bytes and cache.stats.entries == 2


def write_in_process(directory: str, worker: int, rounds: int) -> tuple[int, int]:
    """Spawned: writes the shared key and its own keys, reads all back; (wrong bodies, hits)."""
    cache = ReadCache(Path(directory), 40 * (HEADER_BYTES + 100))
    wrong = hits = 0
    for i in range(rounds):
        cache.put("cas", "shared", body(-1, 5000))
        cache.put("cas", f"w{worker}.{i % 10}", body(i % 10))
        for key, expected in (("shared", body(-1, 5000)), (f"w{worker}.{i % 10}", body(i % 10))):
            got = cache.get("cas", key)
            if got is not None:
                hits += 1
                wrong += got != expected
    return wrong, hits


def test_two_processes_share_a_directory(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        results = pool.starmap(write_in_process, [(str(tmp_path), 0, 300), (str(tmp_path), 1, 300)])
    assert [wrong for wrong, _ in results] == [0, 0]
    assert all(hits > 0 for _, hits in results)
    assert not [p for p in files_under(tmp_path) if p.name.startswith(TEMP_PREFIX)]
    after = ReadCache(tmp_path, 1 << 20)
    assert after.get("cas", "shared") == body(-1, 5000)
    assert after.stats.corrupt == 0


@pytest.mark.parametrize("list_at", [1, 10_000])  # listing each directory, or opening each key
def test_get_many_agrees_with_get(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, list_at: int
) -> None:
    import baml_studio.coordinator.cache as cache_mod

    monkeypatch.setattr(cache_mod, "LIST_AT", list_at)
    cache = ReadCache(tmp_path, 1 << 20)
    other = ReadCache(tmp_path, 1 << 20)  # another process sharing the directory
    keys = [f"k{i}" for i in range(300)]
    for key in keys[:100]:
        cache.put("values", key, key.encode() * 3)
    for key in keys[100:150]:
        other.put("values", key, b"other " + key.encode())
    corrupt = entry_path(tmp_path, "values", keys[0])
    corrupt.write_bytes(corrupt.read_bytes()[:-1])  # torn: a miss, removed
    misses = cache.stats.misses
    got = cache.get_many("values", keys)
    expected = {k: k.encode() * 3 for k in keys[1:100]}
    expected |= {k: b"other " + k.encode() for k in keys[100:150]}
    assert got == expected
    assert cache.stats.misses - misses == 300 - len(expected)
    assert not corrupt.exists()
    assert {k: cache.get("values", k) for k in keys if cache.get("values", k)} == expected


def test_get_many_serves_bodies_waiting_to_be_written(tmp_path: Path) -> None:
    cache = ReadCache(tmp_path, 1 << 20)
    with cache._writing:  # reason: hold the writer so the bodies stay pending
        cache.put_many_later("values", [(f"p{i}", b"body %d" % i) for i in range(20)])
        assert cache.stats.pending == 20
        got = cache.get_many("values", [f"p{i}" for i in range(25)])
        assert got == {f"p{i}": b"body %d" % i for i in range(20)}
    assert cache.flush(timeout=30)
    assert ReadCache(tmp_path, 1 << 20).get_many("values", ["p3"]) == {"p3": b"body 3"}


def test_put_many_later_drops_what_does_not_fit_in_the_pending_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import baml_studio.coordinator.cache as cache_mod

    monkeypatch.setattr(cache_mod, "PENDING_BYTES", 100)
    cache = ReadCache(tmp_path, 1 << 20)
    with cache._writing:  # reason: hold the writer so the bound is reached
        cache.put_many_later("values", [(f"d{i}", b"x" * 40) for i in range(5)])
        assert cache.stats.pending == 2 and cache.stats.writes_dropped == 3
    assert cache.flush(timeout=30)
    assert ReadCache.disabled().get_many("values", ["d0"]) == {}
