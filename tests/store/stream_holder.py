"""Subprocess for cross-process tests: open a stream, publish N meta segments, print one status
line (``ready`` or ``in-use``), then hold the stream until a line arrives on stdin."""

from __future__ import annotations

import sys
from pathlib import Path

from baml_studio.format.meta import encode_meta_segment
from baml_studio.format.records import EngineStarted, MetaSegment
from baml_studio.store import Committed, StreamInUse, StreamStore


def main() -> int:
    root, euid_hex, count = Path(sys.argv[1]), bytes.fromhex(sys.argv[2]), int(sys.argv[3])
    try:
        store = StreamStore.open(root, euid_hex)
    except StreamInUse:
        print("in-use", flush=True)
        return 3
    with store:
        for _ in range(count):
            result = store.publish_meta(
                lambda seq: encode_meta_segment(
                    MetaSegment(seq, euid_hex, 0, (EngineStarted(seq, b"\x33" * 16),))
                )
            )
            if not isinstance(result, Committed):
                print(f"failed {result}", flush=True)
                return 4
        print("ready", flush=True)
        sys.stdin.readline()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
