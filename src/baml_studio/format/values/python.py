"""Capture of Python objects as codec-1 values: :func:`from_python` and :func:`encode_python`.

Neither function ever raises into the caller (the profiler calls them on every captured argument
and output). The type rules are in :mod:`baml_studio.format.values.describe`; on top of them:

A structured object (a row that ends in ``Class``, ``Map`` or ``List``) nested deeper than
``max_depth`` (the top object is depth 0) becomes ``Omitted("depth_limit: …")``; one that
contains itself becomes ``Omitted("cycle: …")`` at the repeated reference; an exception from
user code (a property, ``__repr__``, a mutating dict) makes that object
``Omitted("error: <ExcType> while capturing <type>")``. Generators and other iterators are never
consumed (they have no rule, so they render as ``repr``).

:func:`encode_python` writes the bytes directly, without building the model, and gives exactly
``encode_value(from_python(obj))``: both walk the objects through the same :func:`describe`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from baml_studio.format.values.codec import (
    ENTRY_OF_CLASS,
    ENTRY_OF_MAP,
    KEY_FIELDS,
    frame,
    key_field,
    write_float,
    write_int,
    write_omitted,
    write_str,
    write_value,
)
from baml_studio.format.values.describe import Record, describe, key_str
from baml_studio.format.values.model import (
    I64_MAX,
    I64_MIN,
    Bool,
    Class,
    Float,
    Int,
    List,
    Map,
    Omitted,
    String,
    Value,
)
from baml_studio.format.values.wire import (
    PB_FALSE,
    PB_NULL,
    PB_TRUE,
    TAG_CLASS,
    TAG_LIST,
    TAG_MAP,
    varint,
)

DEFAULT_CAPTURE_DEPTH = 64


def from_python(obj: object, *, max_depth: int = DEFAULT_CAPTURE_DEPTH) -> Value:
    """The neutral value of ``obj`` (rules in the module docstring). Never raises."""
    try:
        return _Converter(max_depth).convert(obj, 0)
    except Exception as exc:  # capture must not break the profiled program
        return Omitted(error_reason(exc, obj))


def encode_python(obj: object, *, max_depth: int = DEFAULT_CAPTURE_DEPTH) -> bytes:
    """``encode_value(from_python(obj))``, written directly. Never raises."""
    out = bytearray()
    try:
        _Encoder(max_depth).write(out, obj, 0)
    except Exception as exc:  # capture must not break the profiled program
        del out[:]
        write_omitted(out, error_reason(exc, obj))
    return bytes(out)


def error_reason(exc: BaseException, obj: object) -> str:
    return f"error: {type(exc).__name__} while capturing {type(obj).__qualname__}"


class _Walker:
    __slots__ = ("active", "max_depth")

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.active: set[int] = set()

    def enter(self, obj: object, depth: int) -> str | None:
        """Start visiting a structured object, or say why it must be omitted."""
        if depth > self.max_depth:
            return f"depth_limit: nested deeper than {self.max_depth}"
        if id(obj) in self.active:
            return f"cycle: a {type(obj).__qualname__} that contains itself"
        self.active.add(id(obj))
        return None


class _Converter(_Walker):
    __slots__ = ()

    def convert(self, obj: Any, depth: int) -> Value:
        cls = type(obj)
        if cls is str:
            return String(obj)
        if cls is int and I64_MIN <= obj <= I64_MAX:
            return Int(obj)
        if cls is float:
            return Float(obj)
        if cls is bool:
            return Bool(obj)
        try:
            shape = describe(obj)
            if not isinstance(shape, list | tuple):
                return shape
            refusal = self.enter(obj, depth)
            if refusal is not None:
                return Omitted(refusal)
            try:
                if isinstance(shape, list):
                    return List(tuple([self.convert(x, depth + 1) for x in shape]))
                name, pairs = shape
                entries = tuple([(k, self.convert(v, depth + 1)) for k, v in pairs])
                return Map(entries) if name is None else Class(name, entries)
            finally:
                self.active.discard(id(obj))
        except Exception as exc:  # user code may raise anything
            return Omitted(error_reason(exc, obj))


class _Encoder(_Walker):
    """Appends ``encode_value(from_python(obj))`` to a bytearray without building the model."""

    __slots__ = ()

    def write(self, out: bytearray, obj: Any, depth: int) -> None:
        cls = type(obj)
        if cls is str:
            write_str(out, obj)
        elif cls is int and I64_MIN <= obj <= I64_MAX:
            write_int(out, obj)
        elif cls is float:
            write_float(out, obj)
        elif cls is bool:
            out += PB_TRUE if obj else PB_FALSE
        elif obj is None:
            out += PB_NULL
        elif cls is dict or cls is list:
            self.structure(out, obj, obj, depth)
        else:
            mark = len(out)
            try:
                shape = describe(obj)
                if isinstance(shape, list | tuple):
                    self.structure(out, obj, shape, depth)
                else:
                    write_value(out, shape)
            except Exception as exc:  # user code may raise anything
                del out[mark:]
                write_omitted(out, error_reason(exc, obj))

    def structure(
        self, out: bytearray, obj: object, shape: dict[Any, Any] | list[Any] | Record, depth: int
    ) -> None:
        """Write a list, a map (``shape`` a ``dict``, keys not yet ``key_str``-ed) or a class."""
        refusal = self.enter(obj, depth)
        if refusal is not None:
            write_omitted(out, refusal)
            return
        mark, write, keys, depth = len(out), self.write, KEY_FIELDS, depth + 1
        try:
            if type(shape) is list:
                out += TAG_LIST
                start = len(out)
                for item in shape:
                    out.append(0x12)  # PbList.items = 2
                    s = len(out)
                    write(out, item, depth)
                    n = len(out) - s
                    if n < 128:
                        out.insert(s, n)
                    else:
                        out[s:s] = varint(n)
                frame(out, start)
                return
            name: str | None
            pairs: Iterable[tuple[Any, Any]]
            if type(shape) is dict:
                name, pairs = None, shape.items()
            else:
                name, pairs = shape  # a Record, by elimination
            if name is None:
                out += TAG_MAP
                start, etag = len(out), ENTRY_OF_MAP
            else:
                out += TAG_CLASS
                start, etag = len(out), ENTRY_OF_CLASS
                out += key_field(name)
            # The framing is inlined: this loop is the hottest code of the profiler.
            for key, value in pairs:
                kf = keys.get(key) if type(key) is str else None
                out.append(etag)
                es = len(out)
                out += kf or key_field(key_str(key))
                out.append(0x12)  # PbMapEntry.value = 2
                vs = len(out)
                write(out, value, depth)
                n = len(out) - vs
                if n < 128:
                    out.insert(vs, n)
                else:
                    out[vs:vs] = varint(n)
                n = len(out) - es
                if n < 128:
                    out.insert(es, n)
                else:
                    out[es:es] = varint(n)
            frame(out, start)
        except Exception as exc:  # e.g. a dict mutated by another thread while we iterate
            del out[mark:]
            write_omitted(out, error_reason(exc, obj))
        finally:
            self.active.discard(id(obj))
