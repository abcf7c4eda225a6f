"""Value snapshots taken on the hot path, encoded to codec-1 bodies on the consumer thread.

A captured argument or output is frozen at the moment of capture so later mutation cannot change
what was recorded. Values made only of builtins are frozen with :mod:`marshal` (C speed, about a
microsecond for a typical argument dict); anything else (dataclasses, pydantic models, enums,
subclasses of builtins) is encoded to its codec-1 body right away.
"""

from __future__ import annotations

import marshal
from typing import Any

from baml_studio.format.values.python import encode_python

MARSHALLED = 0
ENCODED = 1

Snapshot = tuple[int, bytes]


def take(obj: Any) -> Snapshot:
    """Freeze ``obj``. Raises only if the value cannot be encoded at all (an ``encode_failed``)."""
    try:
        return MARSHALLED, marshal.dumps(obj)
    except ValueError:
        return ENCODED, encode_python(obj)


def encode(snap: Snapshot) -> bytes:
    """The codec-1 body of a snapshot."""
    kind, payload = snap
    if kind == ENCODED:
        return payload
    return encode_python(marshal.loads(payload))


def exception_value(exc: BaseException) -> dict[str, Any]:
    """The value recorded for a raised exception: its type, message and public attributes."""
    value: dict[str, Any] = {
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": str(exc),
    }
    attrs = getattr(exc, "__dict__", None)
    if attrs:
        for name, item in attrs.items():
            if not name.startswith("_"):
                value[name] = item
    return value
