"""Damaged Arrow IPC streams for fuzzing their decoders: bytes flipped, cut, extended or spliced
(1 to 3 times, from ``start`` on)."""

from __future__ import annotations

from hypothesis import strategies as st


def damage(data: st.DataObject, stream: bytes, start: int = 0) -> bytes:
    raw = bytearray(stream)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(start, max(start, len(raw) - 1)))
        kind = data.draw(st.sampled_from(["flip", "cut", "append", "splice"]))
        if kind == "flip" and at < len(raw):
            raw[at] ^= data.draw(st.integers(1, 255))
        elif kind == "cut":
            del raw[at:]
        elif kind == "append":
            raw += data.draw(st.binary(max_size=24))
        else:
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=16))
    return bytes(raw)
