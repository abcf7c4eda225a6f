"""One conformance suite for both queue adapters (SQLite on a temp dir, SQS on ministack)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from baml_studio.queue import (
    InvalidQueueArgument,
    NoDeadLetterQueue,
    QueueSettings,
    ReceiptInvalid,
)


def test_send_receive_delete(harness: Any) -> None:
    queue = harness.make()
    before = time.time()
    message_id = queue.send('{"hello": "world"}')
    [message] = queue.receive()
    assert message.id == message_id
    assert message.body == '{"hello": "world"}'
    assert message.receive_count == 1
    assert message.dead_letter_reason is None
    assert before - 1 <= message.sent_at <= time.time() + 1
    queue.delete(message.receipt)
    assert queue.receive() == []
    assert queue.approximate_count() == 0


def test_body_round_trips_any_sqs_text(harness: Any) -> None:
    queue = harness.make()
    body = 'tab\there\nnewline é 日本 \U0001f600 "quotes" \\ back'
    queue.send(body)
    [message] = queue.receive()
    assert message.body == body


def test_leased_message_is_invisible_until_its_timeout(harness: Any) -> None:
    queue = harness.make(QueueSettings(visibility_timeout_s=harness.visibility_s))
    queue.send("work")
    [first] = queue.receive()
    assert queue.receive() == []
    [again] = harness.receive_after(queue, harness.visibility_s)
    assert again.id == first.id
    assert again.receipt != first.receipt
    assert again.receive_count == 2


def test_receive_visibility_argument_overrides_the_default(harness: Any) -> None:
    queue = harness.make(QueueSettings(visibility_timeout_s=600))
    queue.send("work")
    [first] = queue.receive(visibility_timeout_s=harness.visibility_s)
    assert queue.receive() == []
    [again] = harness.receive_after(queue, harness.visibility_s)
    assert again.id == first.id


def test_change_visibility_to_zero_makes_it_visible_at_once(harness: Any) -> None:
    queue = harness.make()
    queue.send("work")
    [first] = queue.receive()
    queue.change_visibility(first.receipt, 0)
    [again] = queue.receive()
    assert again.id == first.id
    assert again.receive_count == 2


def test_change_visibility_extends_the_lease(harness: Any) -> None:
    queue = harness.make(QueueSettings(visibility_timeout_s=harness.visibility_s))
    queue.send("work")
    [first] = queue.receive()
    queue.change_visibility(first.receipt, 600)
    # Past the original timeout the message is still leased.
    assert harness.receive_after(queue, harness.visibility_s + 1, slack_s=0) == []
    queue.delete(first.receipt)
    assert queue.approximate_count() == 0


def test_receive_count_increments_per_delivery(harness: Any) -> None:
    queue = harness.make()
    queue.send("work")
    counts = []
    for _ in range(3):
        [message] = queue.receive(visibility_timeout_s=0)
        counts.append(message.receive_count)
    assert counts == [1, 2, 3]


def test_ninth_receive_finds_the_message_in_the_dead_letter_queue(harness: Any) -> None:
    queue = harness.make()  # max_receive_count defaults to 8
    message_id = queue.send("poison")
    for expected in range(1, 9):
        [message] = queue.receive(visibility_timeout_s=0)
        assert message.receive_count == expected
    assert queue.receive() == []
    assert queue.approximate_count() == 0
    [dead] = queue.dead_letter_queue().receive()
    assert dead.id == message_id
    assert dead.body == "poison"
    assert dead.receive_count >= 9  # SQS keeps counting in the dead-letter queue


def test_send_to_dead_letter_quarantines_with_reason(harness: Any) -> None:
    queue = harness.make()
    queue.send("malformed")
    queue.send("healthy")
    messages = queue.receive()
    bad = next(m for m in messages if m.body == "malformed")
    good = next(m for m in messages if m.body == "healthy")
    queue.send_to_dead_letter(bad, "quarantine: manifest does not decode")
    queue.delete(good.receipt)
    assert queue.approximate_count() == 0
    dlq = queue.dead_letter_queue()
    [dead] = dlq.receive()
    assert dead.body == "malformed"
    assert dead.dead_letter_reason == "quarantine: manifest does not decode"
    dlq.delete(dead.receipt)
    assert dlq.approximate_count() == 0
    with pytest.raises(NoDeadLetterQueue):
        dlq.dead_letter_queue()
    with pytest.raises(NoDeadLetterQueue):
        dlq.send_to_dead_letter(dead, "again")


def test_stale_receipts_are_rejected(harness: Any) -> None:
    queue = harness.make()
    queue.send("work")
    [first] = queue.receive(visibility_timeout_s=0)
    [second] = queue.receive()
    with pytest.raises(ReceiptInvalid):
        queue.delete(first.receipt)
    with pytest.raises(ReceiptInvalid):
        queue.change_visibility(first.receipt, 0)
    queue.delete(second.receipt)
    with pytest.raises(ReceiptInvalid) as caught:
        queue.delete(second.receipt)
    assert not caught.value.transient


def test_delay_hides_a_message_until_due(harness: Any) -> None:
    queue = harness.make()
    queue.send("later", delay_s=1)
    assert queue.receive() == []
    assert queue.approximate_count() == 1
    [message] = harness.receive_after(queue, 1)
    assert message.body == "later"


def test_receive_returns_at_most_max_messages_and_each_once(harness: Any) -> None:
    queue = harness.make()
    sent = {queue.send(f"m{i}") for i in range(15)}
    first = queue.receive(max_messages=10)
    assert 1 <= len(first) <= 10
    seen = [m.id for m in first]
    while batch := queue.receive(max_messages=10):
        seen.extend(m.id for m in batch)
    assert sorted(seen) == sorted(sent)
    assert queue.approximate_count() == 15  # leased messages still count


def test_long_poll_returns_as_soon_as_a_message_arrives(harness: Any) -> None:
    queue = harness.make()
    sender = threading.Timer(0.3, queue.send, args=("arrived",))
    started = time.monotonic()
    sender.start()
    try:
        messages = queue.receive(wait_s=10)
    finally:
        sender.join()
    elapsed = time.monotonic() - started
    assert [m.body for m in messages] == ["arrived"]
    assert elapsed < 5, f"long poll took {elapsed:.2f} s for a message sent after 0.3 s"


def test_long_poll_returns_empty_after_wait(harness: Any) -> None:
    queue = harness.make()
    started = time.monotonic()
    assert queue.receive(wait_s=1) == []
    elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 4


def test_approximate_count_tracks_sends_and_deletes(harness: Any) -> None:
    queue = harness.make()
    for i in range(3):
        queue.send(f"m{i}")
    assert queue.approximate_count() == 3
    [message] = queue.receive(max_messages=1)
    assert queue.approximate_count() == 3
    queue.delete(message.receipt)
    assert queue.approximate_count() == 2


BAD_CALLS = [
    ("send", ("",), {}),
    ("send", ("nul \x00",), {}),
    ("send", ("surrogate \ud800",), {}),
    ("send", ("x" * 262_145,), {}),
    ("send", ("x",), {"delay_s": 901}),
    ("send", ("x",), {"delay_s": -1}),
    ("send", ("x",), {"delay_s": 1.5}),
    ("receive", (), {"max_messages": 0}),
    ("receive", (), {"max_messages": 11}),
    ("receive", (), {"wait_s": -1}),
    ("receive", (), {"wait_s": float("nan")}),
    ("receive", (), {"visibility_timeout_s": 43_201}),
    ("receive", (), {"visibility_timeout_s": True}),
    ("change_visibility", ("receipt", -1), {}),
]


@pytest.mark.parametrize(("method", "args", "kwargs"), BAD_CALLS)
def test_bad_arguments_raise_before_any_io(
    harness: Any, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    queue = harness.make()
    with pytest.raises(InvalidQueueArgument) as caught:
        getattr(queue, method)(*args, **kwargs)
    assert isinstance(caught.value, ValueError)
    assert queue.approximate_count() == 0


@pytest.mark.parametrize("reason", ["", "nul \x00", "x" * 4097])
def test_bad_dead_letter_reasons_are_rejected_and_nothing_moves(harness: Any, reason: str) -> None:
    queue = harness.make()
    queue.send("work")
    [message] = queue.receive()
    with pytest.raises(InvalidQueueArgument):
        queue.send_to_dead_letter(message, reason)
    queue.delete(message.receipt)  # still ours: nothing moved
    assert queue.dead_letter_queue().approximate_count() == 0
