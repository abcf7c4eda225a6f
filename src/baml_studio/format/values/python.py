"""Capture of Python objects as codec-1 values: :func:`from_python` and :func:`encode_python`.

Neither function ever raises into the caller (the profiler calls them on every captured argument
and output). Conversion rules, checked in this order:

==============================================  ==============================================
``None``, ``bool``, ``float``, ``str``          ``Null``, ``Bool``, ``Float``, ``String``
``int`` (and ``__index__`` objects)             ``Int`` inside i64, else ``BigInt``
``enum.Enum`` member (also IntEnum/StrEnum)     ``Enum(type.__name__, member.name)``
``bytes``/``bytearray``/``memoryview``          ``Bytes``
``datetime.date``/``datetime``/``time``         ``String(isoformat())``
``uuid.UUID``, ``decimal.Decimal``, paths       ``String(str(obj))``
classes, modules, functions, methods            ``String(repr(obj))``
named tuple                                     ``Class(type.__qualname__, fields)``
dataclass instance                              ``Class(type.__qualname__, fields)``, fields in
                                                declaration order
pydantic v2 model (``model_fields`` on the      ``Class(type.__qualname__, declared fields, then
class + ``__pydantic_fields_set__``)            extras)``, without importing pydantic
``Mapping`` (``dict`` …)                         ``Map``; ``str`` keys as-is, others ``str(key)``
``list``, ``tuple``, ``collections.deque``      ``List``
``set``, ``frozenset``                           ``List`` sorted by ``repr`` (hash order varies)
other objects with a ``__dict__``               ``Class(type.__qualname__, attributes not
                                                starting with ``_``, in ``__dict__`` order)``
anything else                                   ``String(repr(obj))``
==============================================  ==============================================

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

import collections
import dataclasses
import datetime
import decimal
import enum
import functools
import operator
import pathlib
import types
import uuid
from collections.abc import Mapping
from typing import Any, TypeAlias

from baml_studio.format.values.codec import (
    ENTRY_OF_CLASS,
    ENTRY_OF_MAP,
    frame,
    key_field,
    write_float,
    write_int,
    write_omitted,
    write_str,
    write_value,
)
from baml_studio.format.values.model import (
    I64_MAX,
    I64_MIN,
    NULL,
    BigInt,
    Bool,
    Bytes,
    Class,
    Enum,
    Float,
    Int,
    List,
    Map,
    Omitted,
    String,
    Value,
)
from baml_studio.format.values.wire import PB_FALSE, PB_NULL, PB_TRUE, TAG_CLASS, TAG_LIST, TAG_MAP

DEFAULT_CAPTURE_DEPTH = 64
Record: TypeAlias = tuple[str | None, list[tuple[str, Any]]]
"""A structured object: ``(class name or None for a map, [(key, child)])``."""
Shape: TypeAlias = Value | list[Any] | Record
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
_ISO = (datetime.date, datetime.time)
_STR = (uuid.UUID, decimal.Decimal, pathlib.PurePath)


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


def key_str(key: object) -> str:
    """A map key: ``str`` as-is, anything else ``str(key)`` (``repr`` if that fails)."""
    if type(key) is str:
        return key
    for render in (str, repr):
        try:
            return render(key)
        except Exception:  # a key we cannot print still gets a name
            continue
    return f"<unprintable {type(key).__qualname__}>"


def _int(n: int) -> Value:
    return Int(n) if I64_MIN <= n <= I64_MAX else BigInt(str(n))


@functools.lru_cache(maxsize=1024)
def _dataclass_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def describe(obj: object) -> Shape:
    """One step of the conversion: a leaf :data:`Value`, a list of children or a :data:`Record`.

    May raise whatever user code raises; the walkers turn that into ``Omitted``.
    """
    cls = type(obj)
    if type(obj) is dict:
        return None, [(key_str(k), v) for k, v in obj.items()]
    if type(obj) is list or type(obj) is tuple:
        return list(obj)
    if obj is None:
        return NULL
    if isinstance(obj, enum.Enum):
        return Enum(cls.__name__, obj.name if obj.name is not None else str(obj))
    if isinstance(obj, bool | float | str | bytes | bytearray | memoryview):
        return _leaf(obj)
    if isinstance(obj, int):
        return _int(int(obj))
    if isinstance(obj, _ISO):
        return String(obj.isoformat())
    if isinstance(obj, _STR):
        return String(str(obj))
    if isinstance(obj, _OPAQUE):
        return String(repr(obj))
    if isinstance(obj, tuple) and hasattr(cls, "_fields"):
        return cls.__qualname__, list(zip(cls._fields, obj, strict=True))
    if dataclasses.is_dataclass(cls):
        return cls.__qualname__, [(n, getattr(obj, n)) for n in _dataclass_names(cls)]
    model_fields = getattr(cls, "model_fields", None)
    if isinstance(model_fields, dict) and hasattr(obj, "__pydantic_fields_set__"):
        pairs = [(n, getattr(obj, n)) for n in model_fields]
        extra = getattr(obj, "__pydantic_extra__", None)
        if isinstance(extra, dict):
            pairs += [(key_str(k), v) for k, v in extra.items()]
        return cls.__qualname__, pairs
    if isinstance(obj, Mapping):
        return None, [(key_str(k), v) for k, v in obj.items()]
    if isinstance(obj, list | tuple | collections.deque):
        return list(obj)
    if isinstance(obj, set | frozenset):
        return sorted(obj, key=repr)
    if hasattr(cls, "__index__"):  # numpy integers and the like; arrays refuse and fall through
        try:
            return _int(operator.index(obj))  # type: ignore[arg-type]  # hasattr proves it
        except TypeError:
            pass
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        return cls.__qualname__, [
            (key_str(k), v) for k, v in attrs.items() if not key_str(k).startswith("_")
        ]
    return String(repr(obj))


def _leaf(obj: bool | float | str | bytes | bytearray | memoryview) -> Value:
    if isinstance(obj, bool):
        return Bool(obj)
    if isinstance(obj, float):
        return Float(float(obj))
    if isinstance(obj, str):
        return String(str.__str__(obj))
    if isinstance(obj, memoryview):
        return Bytes(obj.tobytes())
    return Bytes(bytes(obj))


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
        mark, write, depth = len(out), self.write, depth + 1
        try:
            if type(shape) is list:
                out += TAG_LIST
                start = len(out)
                for item in shape:
                    out.append(0x12)  # PbList.items = 2
                    s = len(out)
                    write(out, item, depth)
                    frame(out, s)
                frame(out, start)
                return
            if type(shape) is dict:
                name, pairs = None, shape.items()
            else:
                name, pairs = shape  # type: ignore[misc]  # a Record, by elimination
            start = len(out) + 1
            if name is None:
                out += TAG_MAP
                etag = ENTRY_OF_MAP
            else:
                out += TAG_CLASS
                etag = ENTRY_OF_CLASS
                out += key_field(name)
            for key, value in pairs:
                out.append(etag)
                es = len(out)
                out += key_field(key if type(key) is str else key_str(key))
                out.append(0x12)  # PbMapEntry.value = 2
                vs = len(out)
                write(out, value, depth)
                frame(out, vs)
                frame(out, es)
            frame(out, start)
        except Exception as exc:  # e.g. a dict mutated by another thread while we iterate
            del out[mark:]
            write_omitted(out, error_reason(exc, obj))
        finally:
            self.active.discard(id(obj))
