"""The directory bucket's shared durability barrier (``dirfs.GroupSync``): every caller's writes
are covered by a sync that started after them, syncs never overlap, failures reach exactly
the callers a failed sync served."""

from __future__ import annotations

import errno
import threading

import pytest

from baml_studio.objectstore.dirfs import GroupSync


class Disk:
    """A fake filesystem: ``write`` bumps a counter, a sync makes the value it saw durable."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.written = 0
        self.durable = 0
        self.syncs = 0
        self.running = 0
        self.overlaps = 0
        self.fail: list[BaseException] = []
        """Raised by the next syncs, one each."""

    def write(self) -> int:
        with self.lock:
            self.written += 1
            return self.written

    def sync(self) -> None:
        with self.lock:
            self.running += 1
            self.overlaps += self.running > 1
            seen = self.written
            failure = self.fail.pop(0) if self.fail else None
        try:
            if failure is not None:
                raise failure
            with self.lock:
                self.durable = max(self.durable, seen)
                self.syncs += 1
        finally:
            with self.lock:
                self.running -= 1


def test_every_caller_returns_only_once_its_writes_are_durable() -> None:
    disk = Disk()
    group = GroupSync(disk.sync)
    start = threading.Barrier(16)
    lapses: list[int] = []

    def caller() -> None:
        start.wait()
        for _ in range(50):
            mine = disk.write()
            group.sync()
            if disk.durable < mine:
                lapses.append(mine)

    threads = [threading.Thread(target=caller) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not lapses
    assert disk.overlaps == 0
    assert disk.durable == disk.written == 16 * 50
    assert 1 <= disk.syncs <= 16 * 50


def test_a_caller_arriving_during_a_sync_waits_for_the_next_one() -> None:
    # the running sync saw the disk before the late caller wrote: joining it would return
    # with the late write not durable
    disk = Disk()
    late_wrote = threading.Event()
    late_write: list[int] = []

    def sync() -> None:
        first = disk.syncs == 0 and not late_wrote.is_set()
        disk.sync()
        if first:
            threading.Thread(target=late).start()
            assert late_wrote.wait(10)

    def late() -> None:
        late_write.append(disk.write())
        late_wrote.set()
        group.sync()
        done.set()

    done = threading.Event()
    group = GroupSync(sync)
    disk.write()
    group.sync()
    assert done.wait(10)
    assert disk.durable >= late_write[0] and disk.syncs == 2


def test_a_failed_sync_fails_its_callers_and_the_next_sync_is_fresh() -> None:
    disk = Disk()
    disk.fail.append(OSError(errno.EIO, "injected", "/bucket"))
    group = GroupSync(disk.sync)
    with pytest.raises(OSError) as caught:
        group.sync()
    assert caught.value.errno == errno.EIO and caught.value.filename == "/bucket"
    group.sync()  # a new sync, not the failed one
    assert disk.syncs == 1


def test_an_interrupt_in_the_sync_propagates_to_the_caller_running_it() -> None:
    disk = Disk()
    disk.fail.append(KeyboardInterrupt())
    group = GroupSync(disk.sync)
    with pytest.raises(KeyboardInterrupt):
        group.sync()
    group.sync()  # the barrier is usable afterwards
    assert disk.syncs == 1
