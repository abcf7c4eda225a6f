"""Canonical JSON of values (§4.3 ``to_json``) and its inverse, for ``baml_value_json('…')``.

Rendering (:func:`to_json`):

=====================  ========================================================================
``Null``/``Bool``      ``null``/``true``/``false``
``Int``, ``BigInt``    a JSON number with every digit (no rounding, no quoting; a consumer
                       without big-integer support must parse it as text)
``Float``              a JSON number (shortest round-trip form, ``-0.0`` kept); NaN and ±inf,
                       which JSON lacks, are ``{"$float": "NaN" | "Infinity" | "-Infinity"}``
``String``             a string
``Bytes``              ``{"$bytes": "<lower-case hex>"}``
``List``               an array
``Map``/``Class``      an object in entry order (a class's name is not rendered; a repeated key
                       keeps its last value); a key starting with ``$`` gets one more ``$``
``Enum``               its variant string
``Media``              ``{"$media": {"kind": "image", "mime"?: …, "url"|"base64"|"file"?: …}}``
``Omitted``            ``{"$omitted": "<reason>"}``
=====================  ========================================================================

:func:`to_json_text` is that, compact (``,`` and ``:`` separators), UTF-8 (not ASCII-escaped),
keys in entry order. :func:`from_json` reads it back: an object with exactly one reserved
``$``-key is the tagged form (a malformed one is an error), ``$$key`` loses one ``$``, integers
outside i64 become ``BigInt``, other objects become ``Map`` (never ``Class``; see
``values_equal`` for how a map literal matches a class).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import TypeAlias

from baml_studio.format.errors import EncodeError
from baml_studio.format.values.model import (
    I64_MAX,
    I64_MIN,
    MEDIA_SOURCES,
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
    Media,
    MediaKind,
    Omitted,
    String,
    Value,
)

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_HEX_PAIRS = re.compile(r"(?:[0-9a-fA-F]{2})*")
_KINDS = {k.name.lower(): k for k in MediaKind}


class InvalidValueJson(EncodeError):
    """JSON that does not describe a value (bad text, a malformed ``$``-tagged object, …)."""

    remedy = 'write plain JSON, or a tagged form such as {"$bytes": "00ff"}'


def to_json(v: Value) -> JsonValue:
    """The canonical JSON-able form of ``v`` (table in the module docstring)."""
    if isinstance(v, String | Bool):
        return v.value
    if isinstance(v, Int):
        return v.value
    if isinstance(v, Map | Class):
        entries = v.entries if isinstance(v, Map) else v.fields
        return {_escape(k): to_json(x) for k, x in entries}
    if isinstance(v, List):
        return [to_json(x) for x in v.items]
    if isinstance(v, Float):
        x = v.value
        if math.isfinite(x):
            return x
        return {"$float": "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")}
    if isinstance(v, Enum):
        return v.variant
    if isinstance(v, BigInt):
        return int(v.value)
    if isinstance(v, Bytes):
        return {"$bytes": v.value.hex()}
    if isinstance(v, Media):
        media: dict[str, JsonValue] = {"kind": v.kind.name.lower()}
        if v.mime is not None:
            media["mime"] = v.mime
        if v.source is not None:
            media[v.source] = v.content
        return {"$media": media}
    if isinstance(v, Omitted):
        return {"$omitted": v.reason}
    return None


def to_json_text(v: Value) -> str:
    """Compact, stable JSON text of ``v``."""
    return json.dumps(to_json(v), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def from_json_text(text: str) -> Value:
    """Parse JSON text and convert it with :func:`from_json`."""
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidValueJson(f"not valid JSON: {exc}") from exc
    return from_json(parsed)


def from_json(obj: object) -> Value:
    """The value a JSON-able Python object denotes (inverse of :func:`to_json`)."""
    try:
        return _from_json(obj)
    except RecursionError as exc:
        raise InvalidValueJson("JSON nests too deeply") from exc


def _escape(key: str) -> str:
    return "$" + key if key.startswith("$") else key


def _unescape(key: str) -> str:
    return key[1:] if key.startswith("$$") else key


def _from_json(obj: object) -> Value:
    if obj is None:
        return NULL
    if isinstance(obj, bool):
        return Bool(obj)
    if isinstance(obj, int):
        return Int(obj) if I64_MIN <= obj <= I64_MAX else BigInt(str(obj))
    if isinstance(obj, float):
        return Float(obj)
    if isinstance(obj, str):
        return String(obj)
    if isinstance(obj, list | tuple):
        return List(tuple(_from_json(x) for x in obj))
    if isinstance(obj, dict):
        if len(obj) == 1:
            ((key, inner),) = obj.items()
            if key in _TAGGED:
                return _TAGGED[key](inner)
        return Map(tuple((_unescape(_str_key(k)), _from_json(x)) for k, x in obj.items()))
    raise InvalidValueJson(f"{type(obj).__name__} is not a JSON type")


def _str_key(key: object) -> str:
    if not isinstance(key, str):
        raise InvalidValueJson(f"object key {key!r} is not a string")
    return key


def _text(tag: str, inner: object) -> str:
    if not isinstance(inner, str):
        raise InvalidValueJson(f"{tag} needs a string, got {inner!r}")
    return inner


def _bytes(inner: object) -> Value:
    text = _text("$bytes", inner)
    if not _HEX_PAIRS.fullmatch(text):
        raise InvalidValueJson(f"$bytes needs an even number of hex digits, got {text!r}")
    return Bytes(bytes.fromhex(text))


def _float(inner: object) -> Value:
    text = _text("$float", inner)
    if text not in _SPECIAL_FLOATS:
        raise InvalidValueJson(f"$float must be one of {sorted(_SPECIAL_FLOATS)}, got {text!r}")
    return Float(_SPECIAL_FLOATS[text])


def _media(inner: object) -> Value:
    if not isinstance(inner, dict):
        raise InvalidValueJson(f"$media needs an object, got {inner!r}")
    unknown = set(inner) - {"kind", "mime", *MEDIA_SOURCES}
    sources = [s for s in MEDIA_SOURCES if s in inner]
    kind = inner.get("kind")
    if unknown or len(sources) > 1 or kind not in _KINDS:
        raise InvalidValueJson(
            f"$media needs kind in {sorted(_KINDS)}, optional mime and at most one of "
            f"{list(MEDIA_SOURCES)}; got {inner!r}"
        )
    mime = _text("$media.mime", inner["mime"]) if "mime" in inner else None
    if not sources:
        return Media(_KINDS[kind], mime, None, "")
    return Media(_KINDS[kind], mime, sources[0], _text("$media content", inner[sources[0]]))


def _omitted(inner: object) -> Value:
    return Omitted(_text("$omitted", inner))


_TAGGED: dict[str, Callable[[object], Value]] = {
    "$bytes": _bytes,
    "$float": _float,
    "$media": _media,
    "$omitted": _omitted,
}
