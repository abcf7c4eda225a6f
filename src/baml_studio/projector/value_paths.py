"""Leaf paths of codec-1 values: the typed private index ``value_paths_v1`` (DESIGN.md §5).

:func:`leaf_rows` decodes one codec-1 body and returns one row per *leaf* (a node without
children: a scalar, an empty list or an empty map/class) in document order (pre-order, entries
and items in their order). It is pure; :class:`~.lance_store.PrivateStore` writes the rows.

Path grammar (JSONPath-like, injective: two leaves of one value never share a path)::

    path   := "$" step*
    step   := "." name              a map key / class field matching [A-Za-z_][A-Za-z0-9_]*
            | "[" quoted "]"        any other key, as a JSON string literal ("a.b", "", "$x",
                                    "it's", "say \\"hi\\""), non-ASCII kept
            | "[" index "]"         a list position: 0 or [1-9][0-9]*

Keys are the value's own keys (not the ``$$`` escaping of canonical JSON). A map with a
repeated key keeps its last value at its first position, as :func:`~..format.values.to_json`
does. A scalar root is the path ``$``.

=====================  ============  ==================================  ========================
Node                   ``kind``      ``str_value``                       ``num_value``
=====================  ============  ==================================  ========================
Null                   ``null``      NULL                                NULL
Bool                   ``bool``      ``true`` / ``false``                NULL
Int, BigInt            ``int``       NULL; the decimal text when         ``float(n)``: exact for
                                     ``|n| > 2**53``                     ``|n| <= 2**53``, else
                                                                         nearest (NULL past the
                                                                         float range)
Float                  ``float``     NULL                                the value (NaN, ±inf)
String                 ``string``    the text                            NULL
Enum                   ``enum``      the variant (its canonical JSON)    NULL
Bytes                  ``bytes``     lower-case hex                      NULL
Media                  ``media``     the url or file path; NULL for      NULL
                                     base64 or no content
Omitted                ``omitted``   the reason                          NULL
empty List             ``list``      ``[]``                              NULL
empty Map / Class      ``map``       ``{}``                              NULL
=====================  ============  ==================================  ========================

Caps (the whole value always stays in ``values_v1``; these bound only the index):

* text longer than ``max_text_bytes`` (4 KiB) UTF-8 bytes keeps its longest prefix that fits
  on a character boundary, and the kind gets the suffix ``_prefix`` (``string_prefix``): an
  equality on ``kind = 'string'`` never matches a prefix, and a substring search that misses a
  ``*_prefix`` row must re-check the body;
* a value with more than ``max_leaves`` (10,000) leaves keeps its first ``max_leaves`` leaves
  and gets one more row: path ``$``, kind ``truncated``, ``num_value`` = the total number of
  leaves (``$`` is free: only a scalar root uses it, and that value has one leaf).

Bodies of other codecs give no rows; :class:`~.lance_store.PrivateStore` writes one row of kind
``corrupt`` at ``$`` (:func:`corrupt_row`) for a codec-1 body that does not decode, which raises
:class:`~..format.errors.ValueCorrupt` (its subclass ``ValueTooDeep`` when nested too deeply).
"""

from __future__ import annotations

import json
import re
from typing import TypedDict

import pyarrow as pa

from baml_studio.format.cas import CODEC_VALUE
from baml_studio.format.values import (
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
    Null,
    Omitted,
    String,
    Value,
    decode_value,
)

MAX_LEAVES = 10_000
MAX_TEXT_BYTES = 4096
PREFIX_SUFFIX = "_prefix"
TRUNCATED_KIND = "truncated"
EXACT_FLOAT_INT = 1 << 53
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

VALUE_PATHS_SCHEMA = pa.schema(
    [
        pa.field("cid", pa.string(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("str_value", pa.large_string()),
        pa.field("num_value", pa.float64()),
    ]
)
"""The schema of ``value_paths_v1``: one row per leaf path of a codec-1 value."""


class LeafRow(TypedDict):
    cid: str
    path: str
    kind: str
    str_value: str | None
    num_value: float | None


def leaf_rows(
    cid: str,
    codec: int,
    body: bytes,
    *,
    max_leaves: int = MAX_LEAVES,
    max_text_bytes: int = MAX_TEXT_BYTES,
) -> list[LeafRow]:
    """One row per leaf path of the codec-1 ``body`` (module docstring); ``[]`` for other codecs.

    Raises :class:`ValueCorrupt` if a codec-1 body does not decode.
    """
    if max_leaves < 1 or max_text_bytes < 1:
        raise ValueError(
            f"max_leaves and max_text_bytes must be >= 1, got {max_leaves}, {max_text_bytes}"
        )
    if codec != CODEC_VALUE:
        return []
    rows: list[LeafRow] = []
    total = 0
    for path, leaf in _leaves(decode_value(body)):
        total += 1
        if total <= max_leaves:
            kind, text, number = _describe(leaf)
            if text is not None:
                kept = _prefix(text, max_text_bytes)
                if kept is not None:
                    text, kind = kept, kind + PREFIX_SUFFIX
            rows.append(LeafRow(cid=cid, path=path, kind=kind, str_value=text, num_value=number))
    if total > max_leaves:
        rows.append(
            LeafRow(cid=cid, path="$", kind=TRUNCATED_KIND, str_value=None, num_value=float(total))
        )
    return rows


def corrupt_row(cid: str) -> LeafRow:
    """The one row of a codec-1 body that does not decode: path ``$``, kind ``corrupt`` (an
    index lookup cannot decide it; the query engine reports it ``corrupt``)."""
    return {"cid": cid, "path": "$", "kind": "corrupt", "str_value": None, "num_value": None}


def paths_table(rows: list[LeafRow]) -> pa.Table:
    """``rows`` as a table with :data:`VALUE_PATHS_SCHEMA`."""
    return pa.Table.from_pylist(list(rows), schema=VALUE_PATHS_SCHEMA)


def key_step(key: str) -> str:
    """The path step of a map key or class field (``.name`` or ``["…"]``)."""
    if _NAME.fullmatch(key):
        return "." + key
    return "[" + json.dumps(key, ensure_ascii=False) + "]"


def _leaves(root: Value) -> list[tuple[str, Value]]:
    """``(path, leaf)`` in document order, without recursion (depth is bounded by the decoder,
    but a deep value should not cost Python stack)."""
    out: list[tuple[str, Value]] = []
    stack: list[tuple[str, Value]] = [("$", root)]
    while stack:
        path, node = stack.pop()
        children: list[tuple[str, Value]]
        if isinstance(node, List):
            children = [(f"{path}[{i}]", item) for i, item in enumerate(node.items)]
        elif isinstance(node, Map | Class):
            entries = node.entries if isinstance(node, Map) else node.fields
            children = [(path + key_step(k), v) for k, v in dict(entries).items()]
        else:
            out.append((path, node))
            continue
        if not children:
            out.append((path, node))
        stack.extend(reversed(children))
    return out


def _describe(leaf: Value) -> tuple[str, str | None, float | None]:
    """``(kind, str_value, num_value)`` of a leaf (table in the module docstring)."""
    if isinstance(leaf, String):
        return "string", leaf.value, None
    if isinstance(leaf, Int | BigInt):
        n = leaf.value if isinstance(leaf, Int) else int(leaf.value)
        return "int", (None if abs(n) <= EXACT_FLOAT_INT else str(n)), _to_float(n)
    if isinstance(leaf, Float):
        return "float", None, leaf.value
    if isinstance(leaf, Bool):
        return "bool", "true" if leaf.value else "false", None
    if isinstance(leaf, Null):
        return "null", None, None
    if isinstance(leaf, Enum):
        return "enum", leaf.variant, None
    if isinstance(leaf, Bytes):
        return "bytes", leaf.value.hex(), None
    if isinstance(leaf, Media):
        return "media", leaf.content if leaf.source in ("url", "file") else None, None
    if isinstance(leaf, Omitted):
        return "omitted", leaf.reason, None
    if isinstance(leaf, List):
        return "list", "[]", None
    return "map", "{}", None


def _to_float(n: int) -> float | None:
    try:
        return float(n)
    except OverflowError:
        return None


def _prefix(text: str, max_bytes: int) -> str | None:
    """The longest prefix of ``text`` within ``max_bytes`` UTF-8 bytes, or ``None`` if all fits."""
    if len(text) * 4 <= max_bytes:
        return None
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= max_bytes:
        return None
    return raw[:max_bytes].decode("utf-8", "ignore")
