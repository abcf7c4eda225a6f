"""How a Python object maps onto a value: :func:`describe`, shared by both capture walkers.

Conversion rules, checked in this order:

==============================================  ==============================================
``None``, ``bool``, ``float``, ``str``          ``Null``, ``Bool``, ``Float``, ``String``
``enum.Enum`` member (also IntEnum/StrEnum)     ``Enum(type.__name__, member.name)``
``int``                                         ``Int`` inside i64, else ``BigInt``
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
objects with ``__index__`` (numpy integers)     ``Int``/``BigInt`` (if ``index`` refuses: next row)
other objects with a ``__dict__``               ``Class(type.__qualname__, attributes not
                                                starting with ``_``, in ``__dict__`` order)``
anything else                                   ``String(repr(obj))``
==============================================  ==============================================

Structured rows (``Class``, ``Map``, ``List``) come back as children still to convert; the depth
cap, cycle check and error handling live in :mod:`baml_studio.format.values.python`.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import operator
import pathlib
import types
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from baml_studio.format.values.model import (
    I64_MAX,
    I64_MIN,
    NULL,
    BigInt,
    Bool,
    Bytes,
    Enum,
    Float,
    Int,
    String,
    Value,
)

Record: TypeAlias = tuple[str | None, list[tuple[str, Any]]]
"""A structured object: ``(class name or None for a map, [(key, child)])``."""
Shape: TypeAlias = Value | list[Any] | Record
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
_ISO = (datetime.date, datetime.time)
_STR = (uuid.UUID, decimal.Decimal, pathlib.PurePath)
_RULES: dict[type, Callable[[Any], Shape]] = {}
"""The rule chosen for each type seen so far (cleared when full)."""
_RULE_CACHE_SIZE = 1024


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


def describe(obj: object) -> Shape:
    """One step of the conversion: a leaf :data:`Value`, a list of children or a :data:`Record`.

    May raise whatever user code raises; the walkers turn that into ``Omitted``.
    """
    if type(obj) is dict:
        return None, [(key_str(k), v) for k, v in obj.items()]
    if type(obj) is list or type(obj) is tuple:
        return list(obj)
    if obj is None:
        return NULL
    cls = type(obj)
    return (_RULES.get(cls) or _remember_rule(cls))(obj)


def _remember_rule(cls: type) -> Callable[[Any], Shape]:
    if len(_RULES) >= _RULE_CACHE_SIZE:
        _RULES.clear()
    rule = _RULES[cls] = _rule(cls)
    return rule


def _rule(cls: type) -> Callable[[Any], Shape]:
    """The table row for ``cls`` (the checks are by class, in table order)."""
    if issubclass(cls, enum.Enum):
        return _enum
    if issubclass(cls, bool | float | str | bytes | bytearray | memoryview):
        return _leaf
    if issubclass(cls, int):
        return lambda obj: _int(int(obj))
    if issubclass(cls, _ISO):
        return lambda obj: String(obj.isoformat())
    if issubclass(cls, _STR):
        return lambda obj: String(str(obj))
    if issubclass(cls, _OPAQUE):
        return lambda obj: String(repr(obj))
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return lambda obj: (cls.__qualname__, list(zip(cls._fields, obj, strict=True)))
    if dataclasses.is_dataclass(cls):
        names = tuple(f.name for f in dataclasses.fields(cls))
        return lambda obj: (cls.__qualname__, [(n, getattr(obj, n)) for n in names])
    if isinstance(getattr(cls, "model_fields", None), dict) and hasattr(
        cls, "__pydantic_fields_set__"
    ):
        return _pydantic
    if issubclass(cls, Mapping):
        return lambda obj: (None, [(key_str(k), v) for k, v in obj.items()])
    if issubclass(cls, list | tuple | collections.deque):
        return list
    if issubclass(cls, set | frozenset):
        return lambda obj: sorted(obj, key=repr)
    return _object


def _enum(obj: enum.Enum) -> Value:
    return Enum(type(obj).__name__, obj.name if obj.name is not None else str(obj))


def _pydantic(obj: Any) -> Record:
    cls = type(obj)
    pairs = [(n, getattr(obj, n)) for n in cls.model_fields]
    extra = getattr(obj, "__pydantic_extra__", None)
    if isinstance(extra, dict):
        pairs += [(key_str(k), v) for k, v in extra.items()]
    return cls.__qualname__, pairs


def _object(obj: object) -> Shape:
    """The last rows, which depend on the instance: ``__index__``, ``__dict__``, ``repr``."""
    cls = type(obj)
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
