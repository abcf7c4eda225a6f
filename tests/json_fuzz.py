"""Hypothesis strategies for fuzzing JSON decoders (this module holds no tests): arbitrary JSON
values, and valid documents with one part replaced, removed or joined by an unknown key."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=20)
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
"""Any JSON value (``json.dumps`` writes NaN and infinities as the non-standard literals Python
reads back)."""

DELETE = object()
"""A replacement that removes the part."""


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a part of ``value`` (object keys and list indexes), the root excluded."""
    if isinstance(value, dict):
        children: list[tuple[Any, Any]] = list(value.items())
    elif isinstance(value, list):
        children = list(enumerate(value))
    else:
        return []
    found: list[tuple[Any, ...]] = []
    for step, child in children:
        found.append((*prefix, step))
        found += paths(child, (*prefix, step))
    return found


def mutate(document: Any, path: tuple[Any, ...], replacement: Any) -> Any:
    """A copy of ``document`` with the part at ``path`` set to ``replacement`` (or removed, for
    :data:`DELETE`)."""
    mutated = copy.deepcopy(document)
    parent = mutated
    for step in path[:-1]:
        parent = parent[step]
    if replacement is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    return mutated


def mutations(document: Any) -> st.SearchStrategy[Any]:
    """``document`` with one part replaced by any JSON value, removed, or (in an object) joined
    by an unknown key."""
    spots = paths(document)
    objects = [()] + [p for p in spots if isinstance(_at(document, p), dict)]
    replaced = st.builds(
        lambda path, value: mutate(document, path, value),
        st.sampled_from(spots),
        JSON_VALUES | st.just(DELETE),
    )
    extended = st.builds(
        lambda path, key, value: _with_key(document, path, key, value),
        st.sampled_from(objects),
        st.text(min_size=1, max_size=12),
        JSON_VALUES,
    )
    return replaced | extended


def _at(document: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        document = document[step]
    return document


def _with_key(document: Any, path: tuple[Any, ...], key: str, value: Any) -> Any:
    mutated = copy.deepcopy(document)
    _at(mutated, path).setdefault(key, value)
    return mutated
