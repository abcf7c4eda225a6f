"""Child process for the SQLite queue tests.

``durability DB N``: send N messages, receive them all and delete every other one, print
``ready``, then send forever. Every line is printed only after the call it reports returned.

``consume DB [LIMIT]``: receive and delete until the queue stays empty for 0.5 s (or LIMIT
messages were taken); print each id.

``send DB BODY``: send one message and print its id.
"""

from __future__ import annotations

import sys
from pathlib import Path

from baml_studio.queue.sqlite import SqliteQueue


def durability(queue: SqliteQueue, count: int) -> None:
    for i in range(count):
        print("sent", queue.send(f"m{i}"), flush=True)
    while messages := queue.receive(max_messages=10):
        for message in messages[::2]:
            queue.delete(message.receipt)
            print("deleted", message.id, flush=True)
    print("ready", flush=True)
    i = 0
    while True:
        print("sent", queue.send(f"extra{i}"), flush=True)
        i += 1


def consume(queue: SqliteQueue, limit: int | None) -> None:
    taken = 0
    while (limit is None or taken < limit) and (
        messages := queue.receive(
            max_messages=min(3, limit - taken) if limit else 3, wait_s=0.5, visibility_timeout_s=600
        )
    ):
        for message in messages:
            queue.delete(message.receipt)
            print(message.id, flush=True)
            taken += 1


def main() -> None:
    command, path = sys.argv[1], Path(sys.argv[2])
    with SqliteQueue(path) as queue:
        if command == "durability":
            durability(queue, int(sys.argv[3]))
        elif command == "consume":
            consume(queue, int(sys.argv[3]) if len(sys.argv) > 3 else None)
        elif command == "send":
            print(queue.send(sys.argv[3]), flush=True)
        else:
            raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
