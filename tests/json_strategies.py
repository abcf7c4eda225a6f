"""Hypothesis strategies for hostile JSON, shared by the fuzz tests of every JSON decoder.

``HOSTILE_TEXT`` mixes what an attacker sends: nesting far past the decoder's recursion
(``"[" * 100000``), nesting just under it (parses, then recursion bites whoever walks it),
integers over Python's 4300-digit conversion limit, Unicode digits (``²``, ``٣``), the non-JSON
constants ``NaN``/``Infinity``, random text and arbitrary JSON documents.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["²", "٣", "1²", "١٢"]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
"""Arbitrary JSON-able values (floats include NaN and infinities, as ``json.dumps`` writes)."""

EXAMPLES = (
    "[" * 100_000,
    '{"a":' * 3000 + "1" + "}" * 3000,
    "[" * 990 + "]" * 990,
    "1" * 5000,
    "-" + "9" * 4301,
    "²",
    "٣",
    "[²]",
    "NaN",
    "-Infinity",
    "1e400",
    "",
    "\ufeff{}",
    "\ud800",
)
"""One of each kind the fuzz strategies draw from, for explicit example tests."""

UNPARSEABLE = (b"[" * 100_000, b'{"a":' * 3000 + b"1" + b"}" * 3000, b"1" * 5000)
"""The audit's bodies ``json.loads`` cannot read: arrays and objects nested past the recursion
limit (``RecursionError``), and an integer over Python's 4300 digits (``ValueError``)."""


def _nested(depth: int, closed: bool, opener: str) -> str:
    closer = {"[": "]", '{"a":': "}"}[opener]
    inner = "1" if opener != "[" else ""
    return opener * depth + (inner + closer * depth if closed else "")


HOSTILE_TEXT: st.SearchStrategy[str] = st.one_of(
    st.sampled_from(EXAMPLES),
    st.builds(
        _nested,
        st.integers(1, 120_000),
        st.booleans(),
        st.sampled_from(["[", '{"a":']),
    ),
    st.integers(4000, 6000).map(lambda n: "1" * n),
    st.text(max_size=50),
    JSON_VALUES.map(json.dumps),
)
"""Text for a JSON decoder; most of it is not valid JSON, some of it is too big to handle."""

HOSTILE_BYTES: st.SearchStrategy[bytes] = st.one_of(
    HOSTILE_TEXT.map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.binary(max_size=200),
)
"""Bytes for a JSON decoder: the hostile texts as UTF-8 (lone surrogates kept), and random bytes."""


def shaped(
    fields: dict[str, st.SearchStrategy[Any]], *, extra: bool = True
) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with some of ``fields`` (each drawn from its strategy or any JSON value), and
    maybe other keys: close enough to a valid document to reach the decoder's later checks."""
    values = {name: strategy | JSON_VALUES for name, strategy in fields.items()}
    base = st.fixed_dictionaries({}, optional=values)
    if not extra:
        return base
    return st.builds(
        lambda known, more: {**more, **known},
        base,
        st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=2),
    )
