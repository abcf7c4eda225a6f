"""``udfs.parse_path``: the rewriter's path literals round-trip; any other text is an
``InternalQueryError`` (a bug report), never a stray ``TypeError`` or ``RecursionError``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.query.errors import InternalQueryError
from baml_studio.query.rewrite_ops import path_json
from baml_studio.query.udfs import parse_path
from json_strategies import HOSTILE_TEXT

PATHS = st.lists(st.text(max_size=6) | st.integers(0, 2**40), max_size=5).map(tuple)


@settings(max_examples=100, deadline=None)
@given(PATHS)
def test_path_literals_round_trip(path: tuple[str | int, ...]) -> None:
    assert parse_path(path_json(path)) == path


@pytest.mark.parametrize(
    "text", ["[", "5", "null", '{"a": 1}', "[[[]]]", "[1.5]", "[true]", "[null]", "[" * 100_000]
)
def test_reported_texts_are_internal_errors(text: str) -> None:
    with pytest.raises(InternalQueryError, match="value path") as caught:
        parse_path(text)
    assert caught.value.remedy


@settings(max_examples=200, deadline=None)
@given(HOSTILE_TEXT)
def test_fuzz_only_internal_query_error(text: str) -> None:
    try:
        path = parse_path(text)
    except InternalQueryError:
        return
    assert all(type(key) in (str, int) for key in path)
