"""The ErasureRequest parser: exactly one selector, canonical forms, typed 400s."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.apierrors import BadRequest
from baml_studio.erasure.selector import parse_selector, selector_from_json
from json_fuzz import JSON_VALUES, mutations

EUID_A, EUID_B = "a" * 32, "b" * 32


def parse(body: object) -> object:
    return parse_selector(json.dumps(body).encode(), max_items=3)


def test_lists_are_sorted_and_times_normalised_to_utc() -> None:
    one = parse({"process_euids": [EUID_B, EUID_A]})
    two = parse({"process_euids": [EUID_A, EUID_B]})
    assert one == two and one.canonical() == two.canonical()  # type: ignore[attr-defined]
    assert one.to_json() == {"process_euids": [EUID_A, EUID_B]}  # type: ignore[attr-defined]
    local = parse(
        {"time_range": {"start": "2026-09-09T12:00:00+02:00", "end": "2026-09-10T00:00:00Z"}}
    )
    assert local.to_json() == {  # type: ignore[attr-defined]
        "time_range": {"start": "2026-09-09T10:00:00.000000Z", "end": "2026-09-10T00:00:00.000000Z"}
    }
    assert selector_from_json(local.to_json()) == local  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "invalid_selector"),
        ({"process_euids": None, "execution_ids": None}, "invalid_selector"),
        ({"process_euids": [EUID_A], "time_range": None, "execution_ids": ["x"]},
         "invalid_selector"),
        ({"process_euids": ["A" * 32]}, "invalid_selector"),
        ({"process_euids": [EUID_A * 2]}, "invalid_selector"),
        ({"execution_ids": ["x" * 257]}, "invalid_selector"),
        ({"execution_ids": "x"}, "invalid_selector"),
        ({"process_euids": [EUID_A, EUID_A]}, "duplicate_selector_item"),
        ({"execution_ids": ["1", "2", "3", "4"]}, "too_many_selector_items"),
        ({"time_range": {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}},
         "invalid_time_range"),
        ({"time_range": {"start": "yesterday", "end": "2026-01-01T00:00:00Z"}}, "invalid_selector"),
        ({"time_range": {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z", "x": 1}},
         "invalid_selector"),
        ([EUID_A], "invalid_selector"),
    ],
)  # fmt: skip
def test_malformed_selectors_are_400_with_a_code(body: object, code: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse(body)
    assert caught.value.code == code and caught.value.status == 400
    assert caught.value.message


def test_a_body_that_is_not_json_is_invalid() -> None:
    with pytest.raises(BadRequest) as caught:
        parse_selector(b"\xff{", max_items=3)
    assert caught.value.code == "invalid_selector"


SELECTORS = [
    {"process_euids": [EUID_A, EUID_B]},
    {"execution_ids": ["root_1", "root_2"]},
    {"time_range": {"start": "2026-01-01T00:00:00+02:00", "end": "2026-01-02T00:00:00Z"}},
]
TIMES = st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=-5))])).map(
    datetime.isoformat
) | st.text(max_size=30)
NEAR_VALID = st.one_of(
    st.lists(st.sampled_from([EUID_A, EUID_B, "c" * 32, "d" * 32, "A" * 32]), max_size=5).map(
        lambda items: {"process_euids": items}
    ),
    st.lists(st.sampled_from(["r1", "r2", "r3", "r4", "", "x" * 300]), max_size=5).map(
        lambda items: {"execution_ids": items}
    ),
    st.builds(lambda start, end: {"time_range": {"start": start, "end": end}}, TIMES, TIMES),
)
BODIES = (
    NEAR_VALID.map(lambda value: json.dumps(value).encode())
    | st.binary(max_size=200)
    | JSON_VALUES.map(lambda value: json.dumps(value).encode())
    | st.one_of(*(mutations(s) for s in SELECTORS)).map(lambda value: json.dumps(value).encode())
    | st.builds(
        lambda kinds, values: json.dumps(dict(zip(kinds, values, strict=False))).encode(),
        st.lists(st.sampled_from(["process_euids", "execution_ids", "time_range"]), max_size=3),
        st.lists(JSON_VALUES, min_size=3, max_size=3),
    )
)


@settings(max_examples=400, deadline=None)
@given(BODIES)
def test_fuzz_bodies_parse_or_answer_400(body: bytes) -> None:
    try:
        selector = parse_selector(body, max_items=3)
    except BadRequest as exc:
        assert exc.status == 400 and exc.message and exc.code in CODES
        json.dumps(exc.details)  # the ErrorResponse details serialise
        return
    assert selector_from_json(selector.to_json()) == selector
    assert parse_selector(selector.canonical().encode(), max_items=3) == selector
    assert len(selector.items) <= 3


CODES = {
    "invalid_selector",
    "duplicate_selector_item",
    "too_many_selector_items",
    "invalid_time_range",
}


def test_deeply_nested_bodies_are_invalid_selectors() -> None:
    for body in (b"[" * 100_000, b'{"execution_ids":' + b"[" * 5000):
        with pytest.raises(BadRequest) as caught:
            parse_selector(body, max_items=3)
        assert caught.value.code == "invalid_selector"
