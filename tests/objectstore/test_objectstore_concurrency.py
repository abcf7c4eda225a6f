"""Directory bucket puts of different keys commit concurrently; one key stays create-only."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from objectstore_harness import SECRET, sha

from baml_studio.objectstore import InvalidObjectKey, ObjectAlreadyExists
from baml_studio.objectstore.config import DirectoryBucketConfig
from baml_studio.objectstore.directory import DirectoryBucket


def make_bucket(root: Path) -> DirectoryBucket:
    return DirectoryBucket(
        DirectoryBucketConfig(root, "evidence-test", "http://127.0.0.1:1", SECRET)
    )


def run_all(calls: list[object]) -> list[object]:
    """Run each zero-argument call on its own thread, started together; results or errors."""
    start = threading.Barrier(len(calls))
    outcomes: list[object] = [None] * len(calls)

    def worker(i: int) -> None:
        start.wait()
        try:
            outcomes[i] = calls[i]()  # type: ignore[operator]
        except Exception as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return outcomes


def test_many_threads_put_different_keys(tmp_path: Path) -> None:
    bucket = make_bucket(tmp_path)
    bodies = {f"evidence/v1/s{i % 5}/obj-{i:03d}": os.urandom(100 + i) for i in range(64)}
    calls = [lambda k=k, b=b: bucket.put_if_absent(k, b, sha(b)) for k, b in bodies.items()]
    outcomes = run_all(calls)
    assert not [o for o in outcomes if isinstance(o, Exception)]
    for key, body in bodies.items():
        assert bucket.get(key) == body
        assert bucket.head(key).sha256 == sha(body)
    assert [i.key for i in bucket.list("evidence/")] == sorted(bodies)
    assert list((bucket.path / "tmp").iterdir()) == []


def test_commits_of_different_keys_overlap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each put waits, right after its commit point (the link), for the other put to reach its
    # own: under one bucket-wide commit lock the barrier would break and the puts fail.
    bucket = make_bucket(tmp_path)
    bucket.put_if_absent("d/seed", b"seed", sha(b"seed"))
    both = threading.Barrier(2, timeout=10)
    real_link = os.link

    def link_then_meet(src: Path, dst: Path) -> None:
        real_link(src, dst)
        if Path(dst).parent == bucket.path / "objects" / "d":
            both.wait()

    monkeypatch.setattr(os, "link", link_then_meet)
    outcomes = run_all([lambda k=k: bucket.put_if_absent(k, k.encode(), sha(k.encode()))
                        for k in ("d/a", "d/b")])  # fmt: skip
    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    assert bucket.get("d/a") == b"d/a" and bucket.get("d/b") == b"d/b"


def test_two_threads_one_key_exactly_one_wins(tmp_path: Path) -> None:
    bucket = make_bucket(tmp_path)
    for round_ in range(20):
        key = f"race/{round_}"
        bodies = [b"first " * 1000, b"second" * 1000]
        outcomes = run_all([lambda b=b, k=key: bucket.put_if_absent(k, b, sha(b)) for b in bodies])
        winners = [i for i, o in enumerate(outcomes) if not isinstance(o, Exception)]
        assert len(winners) == 1, outcomes
        assert isinstance(outcomes[1 - winners[0]], ObjectAlreadyExists)
        assert bucket.get(key) == bodies[winners[0]]
        assert bucket.head(key).sha256 == sha(bodies[winners[0]])


def test_nesting_keys_racing_leave_one_consistent_object(tmp_path: Path) -> None:
    bucket = make_bucket(tmp_path)
    for round_ in range(10):
        outer, inner = f"n{round_}/a", f"n{round_}/a/b"
        outcomes = run_all([lambda k=k: bucket.put_if_absent(k, k.encode(), sha(k.encode()))
                            for k in (outer, inner)])  # fmt: skip
        failed = [o for o in outcomes if isinstance(o, Exception)]
        assert len(failed) == 1 and isinstance(failed[0], InvalidObjectKey), outcomes
        stored = [i.key for i in bucket.list(f"n{round_}/")]
        assert len(stored) == 1
        assert bucket.head(stored[0]).sha256 == sha(stored[0].encode())


def test_crash_leftovers_are_cleared_while_puts_run_concurrently(tmp_path: Path) -> None:
    bucket = make_bucket(tmp_path)
    (bucket.path / "meta/x").mkdir(parents=True)
    (bucket.path / "meta/x/y").write_text("{}")  # sidecar of a put that crashed before linking
    (bucket.path / "meta/a").write_text("{}")  # orphan file where a directory must go
    (bucket.path / "objects/e").mkdir()  # empty directory where an object must go
    stale = bucket.path / "tmp" / "old.tmp"
    stale.write_bytes(b"left by a crash")
    os.utime(stale, (1, 1))
    bucket = make_bucket(tmp_path)
    assert not stale.exists()
    keys = ["x/y", "a/b", "e", *(f"k/{i}" for i in range(16))]
    outcomes = run_all([lambda k=k: bucket.put_if_absent(k, k.encode(), sha(k.encode()))
                        for k in keys])  # fmt: skip
    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    assert sorted(i.key for i in bucket.list()) == sorted(keys)
    assert list((bucket.path / "tmp").iterdir()) == []
