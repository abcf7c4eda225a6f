"""Numbers read from what a peer sent (``baml_studio.wirenumbers``): ASCII digits only, and finite
floats only, with None (never an exception) for anything else."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from baml_studio.wirenumbers import ascii_whole_number, finite_float

OTHER_DIGITS = ["²", "¹⁰", "٣", "１２", "𝟗", "໕"]


@pytest.mark.parametrize("text", [*OTHER_DIGITS, "", " 1", "+1", "-1", "1.0", "1_000", "0x1"])
def test_only_ascii_digits_are_a_whole_number(text: str) -> None:
    assert ascii_whole_number(text, max_digits=9) is None


def test_ascii_digits_up_to_the_limit_are_read() -> None:
    assert ascii_whole_number("007", max_digits=3) == 7
    assert ascii_whole_number("1234", max_digits=3) is None


@given(text=st.text(max_size=12) | st.sampled_from(OTHER_DIGITS), max_digits=st.integers(0, 12))
def test_any_text_is_its_ascii_number_or_none(text: str, max_digits: int) -> None:
    number = ascii_whole_number(text, max_digits=max_digits)
    if text and len(text) <= max_digits and all("0" <= c <= "9" for c in text):
        assert number == int(text)
    else:
        assert number is None


@given(
    value=st.integers(-(10**400), 10**400)
    | st.floats()
    | st.sampled_from([10**400, 2**1024, -(2**1024), 2**1023])
)
def test_any_number_is_its_finite_float_or_none(value: int | float) -> None:
    number = finite_float(value)
    if isinstance(value, float) and math.isfinite(value):
        assert number == value
    elif isinstance(value, int) and abs(value) < 2**1024 - 2**970:  # rounds below the max
        assert number == float(value)
    else:
        assert number is None
