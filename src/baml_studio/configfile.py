"""JSON settings checked against a frozen dataclass's fields, refused with one typed error.

A loader reads its file with :func:`read_json_object` and turns each object in it into a
dataclass with :func:`build` (or :func:`settings_of`, when it merges the settings with others
first). Every value is checked against the field's annotation before the dataclass sees it, so
whatever the file holds (the wrong JSON type, ``null`` for a number, unknown or missing keys,
deep nesting, text that is not JSON) the only error is :class:`ConfigError`, and its message
names the file, the setting, the bad value and what to write instead::

    BamlStudioError
    └── ConfigError        also a ValueError: a configuration file or setting that cannot be used

Annotations understood: ``bool``, ``int`` (not a boolean), ``float`` (an int or a finite
float), ``str``, ``None``, unions of these, ``Literal[...]``, ``tuple[X, ...]`` (from a JSON
list) and nested dataclasses (from a JSON object). A field declared ``repr=False`` (a secret)
never has its value quoted in a message. A loader of stored state, not configuration, passes
its own error class as ``error``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import reprlib
import types
import typing
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

from baml_studio.format.errors import BamlStudioError
from baml_studio.jsontext import parse_json

T = TypeVar("T")
ErrorFactory = Callable[[str], Exception]


class ConfigError(BamlStudioError, ValueError):
    """A configuration file or setting that cannot be used; the message says where and why."""


_SHOW = reprlib.Repr()
_SHOW.maxlevel = 3
_SHOW.maxstring = 60
_SHOW.maxother = 60
_SHOW.maxlong = 40


def show(value: object) -> str:
    """A short ``repr`` of a decoded JSON value, safe however large or deep it is."""
    return _SHOW.repr(value)


def read_json_object(path: Path, *, error: ErrorFactory = ConfigError) -> dict[str, Any]:
    """The JSON object in ``path``. Text that is not UTF-8 JSON, or JSON that is not an object,
    raises ``error``; an unreadable file raises ``OSError`` (the file is unavailable, not wrong)."""
    raw = parse_json(
        path.read_bytes(),
        lambda reason: error(f"{path} is not valid JSON ({reason}); fix the file or remove it"),
    )
    if not isinstance(raw, dict):
        raise error(f"{path} must hold a JSON object {{...}}, not {show(raw)}")
    return raw


def build(
    cls: type[T],
    raw: object,
    source: str,
    *,
    at: str = "",
    exclude: Collection[str] = (),
    refusals: tuple[type[Exception], ...] = (),
    error: ErrorFactory = ConfigError,
) -> T:
    """``cls`` from the JSON object ``raw``, found at ``at`` (a dotted path, empty for the
    whole document) in ``source`` (the file, for messages). Fields in ``exclude`` may not be
    given; a field without a default must be. The dataclass's own checks (``ValueError``, or
    one of ``refusals``) are reported as ``error`` too."""
    settings = settings_of(cls, raw, source, at=at, exclude=exclude, error=error)
    missing = sorted(
        f.name
        for f in _init_fields(cls)
        if f.name not in settings
        and f.name not in exclude
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    )
    if missing:
        raise error(f"{_place(source, at)} lacks the settings {missing}; give each of them")
    return construct(cls, settings, _place(source, at), refusals=refusals, error=error)


def construct(
    cls: Callable[..., T],
    settings: Mapping[str, Any],
    where: str,
    *,
    refusals: tuple[type[Exception], ...] = (),
    error: ErrorFactory = ConfigError,
) -> T:
    """``cls(**settings)``, with its ``ValueError`` (or one of ``refusals``) raised as ``error``
    after ``where``."""
    refused: tuple[type[Exception], ...] = (ValueError, *refusals)
    try:
        return cls(**settings)
    except refused as exc:
        raise error(f"{where}: {exc}") from exc


def settings_of(
    cls: type[Any],
    raw: object,
    source: str,
    *,
    at: str = "",
    exclude: Collection[str] = (),
    error: ErrorFactory = ConfigError,
) -> dict[str, Any]:
    """The settings of the JSON object ``raw`` (at ``at`` in ``source``), each checked against
    its field of the dataclass ``cls`` (nested dataclasses built): keyword arguments for it."""
    place = _place(source, at)
    if not isinstance(raw, dict):
        raise error(f"{place} must be a JSON object {{...}}, not {show(raw)}")
    fields = {f.name: f for f in _init_fields(cls) if f.name not in exclude}
    unknown = sorted(set(raw) - set(fields), key=str)
    if unknown:
        raise error(f"{place} has unknown settings {unknown}; known: {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    return {
        name: _checked(hints[name], value, source, _child(at, name), fields[name].repr, error)
        for name, value in raw.items()
    }


def checked_value(
    hint: Any, value: object, source: str, at: str, *, error: ErrorFactory = ConfigError
) -> Any:
    """``value`` (at ``at`` in ``source``) checked against the annotation ``hint`` and
    converted (a list to a tuple, an object to a dataclass), or ``error`` naming it."""
    return _checked(hint, value, source, at, True, error)


def _place(source: str, at: str) -> str:
    return f"{source}: {at}" if at else source


def _child(at: str, name: str) -> str:
    return f"{at}.{name}" if at else name


def _checked(
    hint: Any, value: object, source: str, at: str, quote: bool, error: ErrorFactory
) -> Any:
    accepted, converted = _accept(hint, value, source, at, error)
    if not accepted:
        shown = show(value) if quote else "(hidden)"
        raise error(f"{_place(source, at)} is {shown}; it must be {_describe(hint)}")
    return converted


def _accept(
    hint: Any, value: object, source: str, at: str, error: ErrorFactory
) -> tuple[bool, Any]:
    """Whether ``value`` fits ``hint``, and its converted form."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True, value
    if hint is None or hint is type(None):
        return value is None, value
    if origin is Union or origin is types.UnionType:
        for arm in typing.get_args(hint):
            accepted, converted = _accept(arm, value, source, at, error)
            if accepted:
                return True, converted
        return False, None
    if origin is Literal:
        return any(type(value) is type(c) and value == c for c in typing.get_args(hint)), value
    if origin is tuple:
        return _accept_tuple(typing.get_args(hint), value, source, at, error)
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False, None
        return isinstance(value, int) or math.isfinite(value), value
    if hint is str:
        return isinstance(value, str), value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            return False, None
        return True, build(hint, value, source, at=at, error=error)
    raise TypeError(f"{_place(source, at)}: configfile cannot check the annotation {hint!r}")


def _accept_tuple(
    args: tuple[Any, ...], value: object, source: str, at: str, error: ErrorFactory
) -> tuple[bool, Any]:
    if len(args) != 2 or args[1] is not Ellipsis:
        raise TypeError(f"{_place(source, at)}: configfile checks tuple[X, ...], not {args}")
    if not isinstance(value, list | tuple):
        return False, None
    items = []
    for index, item in enumerate(value):
        accepted, converted = _accept(args[0], item, source, f"{at}[{index}]", error)
        if not accepted:
            return False, None
        items.append(converted)
    return True, tuple(items)


_NAMES = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}
_PLURALS = {bool: "booleans", int: "whole numbers", float: "numbers", str: "strings"}


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if hint is None or hint is type(None):
        return "null"
    if origin is Union or origin is types.UnionType:
        return " or ".join(_describe(arm) for arm in typing.get_args(hint))
    if origin is Literal:
        return "one of " + ", ".join(json.dumps(c) for c in typing.get_args(hint))
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return f"a list of {_PLURALS[item]}" if item in _PLURALS else "a list"
    if hint in _NAMES:
        return _NAMES[hint]
    return f"a JSON object of {getattr(hint, '__name__', hint)} settings"


def _init_fields(cls: type[Any]) -> tuple[dataclasses.Field[Any], ...]:
    return tuple(f for f in dataclasses.fields(cls) if f.init)
