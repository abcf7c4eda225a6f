"""``jsontext.parse_json``: the document, or the caller's error, whatever comes in."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.jsontext import parse_json
from json_strategies import EXAMPLES, HOSTILE_BYTES, HOSTILE_TEXT, JSON_VALUES, UNPARSEABLE


class Refused(Exception):
    """A caller's typed error."""


@pytest.mark.parametrize("raw", [*UNPARSEABLE, *(body.decode() for body in UNPARSEABLE)])
def test_the_reported_inputs_raise_the_callers_error_from_the_parsers(raw: str | bytes) -> None:
    with pytest.raises(Refused) as caught:
        parse_json(raw, Refused)
    reason = str(caught.value)
    if raw.startswith(b"1" if isinstance(raw, bytes) else "1"):
        assert "4300" in reason and isinstance(caught.value.__cause__, ValueError)
    else:
        assert "nest too deeply" in reason
        assert isinstance(caught.value.__cause__, RecursionError)


@pytest.mark.parametrize("text", EXAMPLES)
def test_each_example_parses_as_json_loads_does_or_is_refused(text: str) -> None:
    try:
        expected = json.loads(text)
    except (ValueError, RecursionError):
        with pytest.raises(Refused):
            parse_json(text, Refused)
        return
    assert json.dumps(parse_json(text, Refused)) == json.dumps(expected)


@settings(max_examples=200, deadline=None)
@given(st.one_of(HOSTILE_TEXT, HOSTILE_BYTES))
def test_fuzz_only_the_callers_error(raw: str | bytes) -> None:
    try:
        parse_json(raw, Refused)
    except Refused as exc:
        assert str(exc)


@settings(max_examples=100, deadline=None)
@given(JSON_VALUES)
def test_what_json_dumps_writes_round_trips(value: object) -> None:
    text = json.dumps(value)
    assert json.dumps(parse_json(text, Refused)) == text
    assert json.dumps(parse_json(text.encode(), Refused)) == text
