"""``handle_from_public`` inverts what the fold writes into the public ``<role>_state`` and
``<role>_cid`` columns: for every value state and applicability it gives the fold's own handle
(the coordinator computes handles this way instead of reading them back from Lance)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from baml_studio.catalog.fold_calls import value_columns
from baml_studio.catalog.handles import handle_from_public
from baml_studio.format.records import ValueAvailable, ValueLossReason, ValueLost, ValueState

STATES: list[ValueState | None] = [
    None,
    ValueAvailable(bytes(range(32)), 1, 17),
    *(ValueLost(reason) for reason in ValueLossReason),
]


@pytest.mark.parametrize("applicable", [True, False])
@pytest.mark.parametrize("state", STATES, ids=repr)
def test_the_public_columns_give_the_folds_handle(
    state: ValueState | None, applicable: bool
) -> None:
    row = value_columns("args", state, applicable)
    assert handle_from_public(row["args_state"], row["args_cid"]) == row["args"]


@given(st.binary(min_size=32, max_size=32))
def test_any_available_cid(cid: bytes) -> None:
    row = value_columns("output", ValueAvailable(cid, 1, 3), True)
    assert handle_from_public(row["output_state"], row["output_cid"]) == row["output"]


@pytest.mark.parametrize(
    ("state", "cid"),
    [
        ("available", None),
        ("available", "bamlv_1_00"),
        ("available", "bamlv_2_" + "00" * 32),
        ("available", "bamlv_1_" + "zz" * 32),
        ("lost:value_too_large", "bamlv_1_" + "00" * 32),
        ("lost:nothing_like_this", None),
        ("", None),
    ],
)
def test_pairs_the_fold_never_writes_are_refused(state: str, cid: str | None) -> None:
    with pytest.raises(ValueError):
        handle_from_public(state, cid)


@given(st.text(max_size=40), st.one_of(st.none(), st.text(max_size=80)))
def test_never_raises_anything_but_value_error(state: str, cid: str | None) -> None:
    with contextlib.suppress(ValueError):
        handle_from_public(state, cid)
