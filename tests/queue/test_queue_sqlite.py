"""SQLite adapter: durability across SIGKILL, cross-process safety, retention, errors."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from queue_harness import FakeClock

from baml_studio.queue import (
    QueueError,
    QueueRequestFailed,
    QueueSettings,
    QueueUnavailable,
    SqliteQueueConfig,
    open_queue,
)
from baml_studio.queue.sqlite import SqliteQueue

CHILD = str(Path(__file__).with_name("queue_sqlite_child.py"))
CHILD_TIMEOUT_S = 60


def _child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, CHILD, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def _all_ids(path: Path) -> set[str]:
    """Every message id in the queue file, leased or not (read with a clock past any lease)."""
    ids: set[str] = set()
    with SqliteQueue(path, clock=FakeClock(time.time() + 3600)) as queue:
        while batch := queue.receive(max_messages=10):
            ids.update(m.id for m in batch)
    return ids


def test_acknowledged_sends_and_deletes_survive_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite3"
    child = _child("durability", str(path), "120")
    watchdog = threading.Timer(CHILD_TIMEOUT_S, child.kill)
    watchdog.start()
    sent: set[str] = set()
    deleted: set[str] = set()
    extra_after_ready = 0
    ready = False

    def record(line: str) -> None:
        nonlocal ready, extra_after_ready
        if line == "ready":
            ready = True
            return
        verb, message_id = line.split()
        (sent if verb == "sent" else deleted).add(message_id)
        extra_after_ready += ready and verb == "sent"

    try:
        assert child.stdout is not None
        for line in child.stdout:
            record(line.strip())
            if extra_after_ready >= 30:
                os.kill(child.pid, signal.SIGKILL)
                break
        for line in child.stdout.read().splitlines(keepends=True):
            if line.endswith("\n"):  # a line is printed only after its call returned
                record(line.strip())
        child.wait(CHILD_TIMEOUT_S)
    finally:
        watchdog.cancel()
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL, child.stderr.read() if child.stderr else ""
    assert ready and len(deleted) == 60 and len(sent) >= 150

    present = _all_ids(path)
    assert present.isdisjoint(deleted), "an acknowledged delete came back"
    assert (sent - deleted) <= present, "an acknowledged send was lost"
    assert len(present - sent) <= 1, "only the send in flight at the kill may be unacknowledged"


def test_consumers_in_threads_and_another_process_get_each_message_once(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite3"
    with SqliteQueue(path) as producer:
        expected = {producer.send(f"m{i}") for i in range(300)}
    child = _child("consume", str(path), "100")  # leaves at least 200 for the threads
    results: list[list[str]] = [[] for _ in range(3)]

    def consume(slot: list[str]) -> None:
        with SqliteQueue(path) as own:
            # a lease long enough that a thread starved by a loaded machine keeps it: this test
            # is about each message going to one consumer, not about lease expiry
            while batch := own.receive(max_messages=3, wait_s=0.5, visibility_timeout_s=600):
                for message in batch:
                    own.delete(message.receipt)
                    slot.append(message.id)

    threads = [threading.Thread(target=consume, args=(slot,)) for slot in results]
    assert child.stdout is not None
    first = child.stdout.readline()  # the child is consuming: start the threads against it
    for thread in threads:
        thread.start()
    # read the rest through the same file object: ``communicate`` reads the pipe itself and
    # would miss lines ``readline`` already buffered (the child may have printed several by
    # then on a loaded machine: the suite once came up eight messages short this way)
    watchdog = threading.Timer(CHILD_TIMEOUT_S, child.kill)
    watchdog.start()
    try:
        out = child.stdout.read()
        err = child.stderr.read() if child.stderr else ""
        child.wait(CHILD_TIMEOUT_S)
    finally:
        watchdog.cancel()
    for thread in threads:
        thread.join(CHILD_TIMEOUT_S)
    assert child.returncode == 0, err
    child_ids = [first.strip(), *out.split()]
    received = child_ids + [i for slot in results for i in slot]
    assert sorted(received) == sorted(expected), "a message was lost or delivered twice"
    assert len(child_ids) > 1 and any(results), "both processes should have taken messages"


def test_a_send_through_another_instance_wakes_a_long_poll_at_once(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite3"
    with SqliteQueue(path, poll_interval_s=30) as waiter, SqliteQueue(path) as sender:
        timer = threading.Timer(0.2, sender.send, args=("wake",))
        started = time.monotonic()
        timer.start()
        messages = waiter.receive(wait_s=20)
        timer.join()
    assert [m.body for m in messages] == ["wake"]
    assert time.monotonic() - started < 5, "the in-process wakeup did not fire"


def test_a_send_from_another_process_ends_a_long_poll(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite3"
    with SqliteQueue(path, poll_interval_s=0.05) as waiter:
        child = _child("send", str(path), "from-child")
        started = time.monotonic()
        messages = waiter.receive(wait_s=30)
        out, err = child.communicate(timeout=CHILD_TIMEOUT_S)
    assert child.returncode == 0, err
    assert [(m.id, m.body) for m in messages] == [(out.strip(), "from-child")]
    assert time.monotonic() - started < 20


def test_retention_drops_old_messages_in_both_queues(tmp_path: Path) -> None:
    clock = FakeClock()
    settings = QueueSettings(retention_s=60, dead_letter_retention_s=120)
    with SqliteQueue(tmp_path / "q.sqlite3", settings=settings, clock=clock) as queue:
        queue.send("old")
        clock.advance(30)
        queue.send("young")
        clock.advance(31)  # "old" is 61 s old, "young" 31 s
        assert queue.approximate_count() == 1
        [young] = queue.receive()
        assert young.body == "young"
        queue.send_to_dead_letter(young, "kept for inspection")
        dlq = queue.dead_letter_queue()
        assert dlq.approximate_count() == 1
        clock.advance(90)  # 121 s after the original send: past the dead-letter retention
        assert dlq.approximate_count() == 0
        assert dlq.receive() == []
        assert queue.approximate_count() == 0


def test_a_busy_database_is_a_transient_error(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite3"
    with SqliteQueue(path, busy_timeout_s=0.2) as queue:
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(QueueUnavailable) as caught:
                queue.send("blocked")
            assert caught.value.transient
            with pytest.raises(QueueUnavailable):
                queue.receive()
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        queue.send("after")
        assert queue.approximate_count() == 1


def test_a_file_that_is_not_a_database_is_a_terminal_error(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite3"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(QueueRequestFailed) as caught:
        SqliteQueue(path)
    assert not caught.value.transient
    assert str(path) in str(caught.value)


def test_an_unknown_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite3"
    SqliteQueue(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version=99")
    with pytest.raises(QueueError, match="schema version 99"):
        SqliteQueue(path)


def test_the_file_is_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite3"
    SqliteQueue(path).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_open_queue_from_config(tmp_path: Path) -> None:
    config = SqliteQueueConfig(path=tmp_path / "dir" / "q.sqlite3", name="work")
    queue = open_queue(config)
    try:
        queue.send("configured")
        [message] = queue.receive()
        assert message.body == "configured"
    finally:
        queue.close()
    assert config.path.exists()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_receive_count": 0},
        {"visibility_timeout_s": -1},
        {"visibility_timeout_s": 43_201},
        {"retention_s": 59},
        {"dead_letter_retention_s": 1_209_601},
    ],
)
def test_settings_outside_sqs_limits_are_rejected(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="invalid QueueSettings"):
        QueueSettings(**kwargs)
