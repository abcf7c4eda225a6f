"""Codec-1 value bodies (the protobuf ``BamlOutboundValue`` mirror) and the neutral value model.

* :mod:`.model`: the :data:`Value` dataclasses and :func:`values_equal`;
* :mod:`.codec`: :func:`encode_value` / :func:`decode_value` (codec 1 bodies, §4.3);
* :mod:`.python`: :func:`from_python` / :func:`encode_python` (profiler capture);
* :mod:`.json`: :func:`to_json`, :func:`to_json_text`, :func:`from_json` (canonical JSON).
"""

from __future__ import annotations

from baml_studio.format.values.codec import (
    DEFAULT_MAX_DEPTH,
    ValueTooDeep,
    decode_value,
    encode_value,
)
from baml_studio.format.values.json import (
    InvalidValueJson,
    from_json,
    from_json_text,
    to_json,
    to_json_text,
)
from baml_studio.format.values.model import (
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
    MediaSource,
    Null,
    Omitted,
    String,
    Value,
    values_equal,
)
from baml_studio.format.values.python import DEFAULT_CAPTURE_DEPTH, encode_python, from_python

__all__ = [
    "DEFAULT_CAPTURE_DEPTH",
    "DEFAULT_MAX_DEPTH",
    "NULL",
    "BigInt",
    "Bool",
    "Bytes",
    "Class",
    "Enum",
    "Float",
    "Int",
    "InvalidValueJson",
    "List",
    "Map",
    "Media",
    "MediaKind",
    "MediaSource",
    "Null",
    "Omitted",
    "String",
    "Value",
    "ValueTooDeep",
    "decode_value",
    "encode_python",
    "encode_value",
    "from_json",
    "from_json_text",
    "from_python",
    "to_json",
    "to_json_text",
    "values_equal",
]
