"""Value snapshots taken on the hot path, encoded to codec-1 bodies on the consumer thread.

A captured argument or output must be recorded as it was at the moment of capture, so later
mutation cannot change it. Three ways, cheapest first:

* builtins only (dict, list, str, numbers, ...): frozen with :mod:`marshal` (C speed, about a
  microsecond for a typical argument dict);
* deeply immutable values (frozen dataclasses, frozen pydantic models, enums, tuples and
  frozensets of those, and scalars): held by reference — they cannot change, so the consumer
  encodes them later and the calling thread pays only for the immutability check;
* anything else (mutable dataclasses or models, custom objects): encoded to the codec-1 body
  right away, on the calling thread.
"""

from __future__ import annotations

import dataclasses
import enum
import marshal
from typing import Any

from baml_studio.format.values.python import encode_python

MARSHALLED = 0
ENCODED = 1
HELD = 2
HELD_SIZE_ESTIMATE = 512
"""Bytes charged against the pending-value budget for a held (not yet encoded) value."""
MAX_FROZEN_NODES = 4096

Snapshot = tuple[int, Any]
_SCALARS = frozenset({str, int, float, bool, type(None), bytes})
_MARSHAL_TOP = frozenset({dict, list, tuple, set, frozenset, str, int, float, bool, type(None),
                          bytes, complex})  # fmt: skip
"""Types :mod:`marshal` is tried on. It also takes any object with the buffer protocol (numpy
arrays and scalars, ``array.array``) and writes its raw memory as bytes, against the documented
rules (a numpy integer is an ``Int`` through ``__index__``): an argument, output or value of
another type goes to the encoder. One nested inside a builtin container is still frozen as its
bytes (``docs/formats.md``)."""
_FROZEN_FIELDS: dict[type, tuple[str, ...] | None] = {}


def _frozen_fields(cls: type) -> tuple[str, ...] | None:
    """Field names of a frozen dataclass or frozen pydantic model class, else None (cached)."""
    try:
        return _FROZEN_FIELDS[cls]
    except KeyError:
        pass
    names: tuple[str, ...] | None = None
    params = getattr(cls, "__dataclass_params__", None)
    if params is not None and getattr(params, "frozen", False):
        names = tuple(f.name for f in dataclasses.fields(cls))
    else:
        config = getattr(cls, "model_config", None)
        model_fields = getattr(cls, "model_fields", None)
        if (
            isinstance(config, dict)
            and config.get("frozen")
            and config.get("extra") != "allow"
            and isinstance(model_fields, dict)
        ):
            names = tuple(model_fields)
    _FROZEN_FIELDS[cls] = names
    return names


def is_deeply_immutable(obj: Any) -> bool:
    """True if nothing reachable from ``obj`` can change (bounded to MAX_FROZEN_NODES nodes);
    False when looking raises (an object whose ``__class__`` or fields raise: the encoder then
    records it as ``Omitted`` alone, and its siblings as they are)."""
    try:
        return _deeply_immutable(obj)
    except Exception:
        return False


def _deeply_immutable(obj: Any) -> bool:
    stack = [obj]
    budget = MAX_FROZEN_NODES
    while stack:
        budget -= 1
        if budget < 0:
            return False
        item = stack.pop()
        cls = type(item)
        if cls in _SCALARS or isinstance(item, enum.Enum):
            continue
        if cls is tuple or cls is frozenset:
            stack.extend(item)
            continue
        names = _frozen_fields(cls)
        if names is None:
            return False
        for name in names:
            stack.append(getattr(item, name))
    return True


def take(obj: Any) -> Snapshot:
    """Freeze ``obj``. Never raises: an uncapturable value encodes as ``Omitted``."""
    if type(obj) in _MARSHAL_TOP:
        try:
            return MARSHALLED, marshal.dumps(obj)
        except ValueError:
            pass
    if is_deeply_immutable(obj):
        return HELD, obj
    return ENCODED, encode_python(obj)


def take_args(args: dict[str, Any]) -> Snapshot:
    """Freeze a call's argument map. The dict is the profiler's own (built per call), so
    only its values need freezing."""
    if all(type(value) in _MARSHAL_TOP for value in args.values()):
        try:
            return MARSHALLED, marshal.dumps(args)
        except ValueError:
            pass
    if all(is_deeply_immutable(value) for value in args.values()):
        return HELD, args
    return ENCODED, encode_python(args)


def charge(snap: Snapshot) -> int:
    """Bytes a snapshot holds against the pending-value budget."""
    kind, payload = snap
    return HELD_SIZE_ESTIMATE if kind == HELD else len(payload)


def encode(snap: Snapshot) -> bytes:
    """The codec-1 body of a snapshot."""
    kind, payload = snap
    if kind == ENCODED:
        return bytes(payload)
    if kind == HELD:
        return encode_python(payload)
    return encode_python(marshal.loads(payload))


def exception_value(exc: BaseException) -> dict[str, Any]:
    """The value recorded for a raised exception: its type, message and public attributes. An
    attribute named ``type`` or ``message`` (``self.message = …``, a common pattern) is kept as
    ``type_attribute`` / ``message_attribute``: it used to replace the real type and message. A
    ``__str__`` that raises or returns something else gives a message that says so."""
    cls = type(exc)
    try:
        message = str(exc)
    except Exception as failure:  # str() of the application's exception: its own code
        message = f"<str() of {cls.__qualname__} raised {type(failure).__qualname__}>"
    value: dict[str, Any] = {"type": f"{cls.__module__}.{cls.__qualname__}", "message": message}
    attrs = getattr(exc, "__dict__", None)
    if attrs:
        for name, item in list(attrs.items()):
            if isinstance(name, str) and not name.startswith("_"):
                value[f"{name}_attribute" if name in ("type", "message") else name] = item
    return value
