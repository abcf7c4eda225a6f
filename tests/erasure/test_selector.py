"""The ErasureRequest parser: exactly one selector, canonical forms, typed 400s."""

from __future__ import annotations

import json

import pytest

from baml_studio.apierrors import BadRequest
from baml_studio.erasure.selector import parse_selector, selector_from_json

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
