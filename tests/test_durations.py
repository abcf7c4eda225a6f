"""The one duration grammar (``baml_studio.durations``) every option and setting uses."""

from __future__ import annotations

import math

import click
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from baml_studio.cli_gateway import parse_ttl
from baml_studio.cli_query import parse_duration as cli_duration
from baml_studio.durations import UNIT_SECONDS, parse_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("90s", 90.0),
        ("1500ms", 1.5),
        ("30m", 1800.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("2d", 172_800.0),
        ("2w", 1_209_600.0),
        (" 7D ", 604_800.0),
        ("1m500ms", 60.5),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_seconds(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "h", "1x", "0s", "0", "-1h", "1 h", "d7", "7 days", "1..5s", "1e3", "ms"]
)
def test_bad_durations_name_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_seconds(text)


def test_an_endless_duration_is_refused() -> None:
    with pytest.raises(ValueError, match="too long"):
        parse_seconds("9" * 400)


PARTS = st.tuples(st.integers(min_value=0, max_value=10**6), st.sampled_from(sorted(UNIT_SECONDS)))


@given(st.lists(PARTS, min_size=1, max_size=5))
def test_parts_add_up(parts: list[tuple[int, str]]) -> None:
    text = "".join(f"{n}{unit}" for n, unit in parts)
    # two adjacent bare numbers read as one: only the last part may lack its unit
    if any(unit == "" for _, unit in parts[:-1]):
        return
    expected = math.fsum(n * UNIT_SECONDS[unit] for n, unit in parts)
    if expected <= 0:
        with pytest.raises(ValueError, match="positive"):
            parse_seconds(text)
    else:
        assert parse_seconds(text) == pytest.approx(expected)


@given(st.text(max_size=40))
def test_any_text_is_a_positive_duration_or_a_value_error(text: str) -> None:
    try:
        seconds = parse_seconds(text)
    except ValueError:
        return
    assert seconds > 0 and math.isfinite(seconds)


def test_the_command_line_words_it_as_a_bad_parameter() -> None:
    assert cli_duration("250ms") == 0.25
    assert cli_duration("0") == 0.0 and parse_seconds("0s", zero=True) == 0.0
    with pytest.raises(click.BadParameter, match="not a duration"):
        cli_duration("soon")
    assert parse_ttl("15m") == 900
    with pytest.raises(click.BadParameter, match="between 1s"):
        parse_ttl("400ms")  # rounds to 0 s


def test_sweep_takes_the_same_grammar() -> None:
    from baml_studio.cli_sweep import sweep_command

    result = CliRunner().invoke(sweep_command, ["--data", "/nonexistent", "--silence", "1 h"])
    assert result.exit_code == 2 and "not a duration" in result.output
