"""Reader-side CCT merging (saturating counters, OR-ed health, key collisions) and self time."""

from __future__ import annotations

import pytest
from format_fixtures import KEY, TUPLE
from format_strategies import cct_sections
from hypothesis import given
from hypothesis import strategies as st

from baml_studio.format.cct import U64_MAX, U128_MAX, merge_cct, self_ns
from baml_studio.format.errors import CctIssue, InvalidCct
from baml_studio.format.records import (
    CCT_AWAIT_COUNTER_SATURATED,
    CCT_COUNTER_SATURATED,
    CCT_SELF_TIME_UNDERFLOW,
    CctContext,
    CctCounters,
    CctOverflow,
    CctSection,
    EdgeKind,
    OverflowReason,
)

ONE = CctCounters(1, 1, 1, 0, 0, 0, 100, 20, 2, 1)


def test_deltas_for_one_key_add_up_and_a_tuple_fills_in() -> None:
    first = CctSection(0, (CctContext(KEY, None, ONE),))
    second = CctSection(CCT_SELF_TIME_UNDERFLOW, (CctContext(KEY, TUPLE, ONE),))
    merged = merge_cct([first, second])
    assert merged.health == CCT_SELF_TIME_UNDERFLOW
    assert merged.contexts == (
        CctContext(KEY, TUPLE, CctCounters(2, 2, 2, 0, 0, 0, 200, 40, 4, 2)),
    )


def test_counters_saturate_and_set_the_matching_health_bit() -> None:
    full = CctCounters(invocations_started=U64_MAX, inclusive_ns=U128_MAX)
    merged = merge_cct([CctSection(0, (CctContext(KEY, None, full),))] * 2)
    assert merged.contexts[0].counters == full
    assert merged.health == CCT_COUNTER_SATURATED

    awaits = CctCounters(await_ns=U128_MAX, await_count=U64_MAX)
    merged = merge_cct([CctSection(0, (CctContext(KEY, None, awaits),))] * 2)
    assert merged.contexts[0].counters == awaits
    assert merged.health == CCT_AWAIT_COUNTER_SATURATED


def test_same_key_with_two_tuples_is_a_collision() -> None:
    other = type(TUPLE)(TUPLE.program_id, None, 8, None, EdgeKind.CALL)
    with pytest.raises(InvalidCct) as err:
        merge_cct(
            [
                CctSection(0, (CctContext(KEY, TUPLE, ONE),)),
                CctSection(0, (CctContext(KEY, other, ONE),)),
            ]
        )
    assert err.value.detail is CctIssue.CONTEXT_KEY_COLLISION


def test_overflow_rows_merge_by_reason_and_edge() -> None:
    drain = OverflowReason.CONTEXT_MEMORY_UNAVAILABLE_AFTER_DRAIN
    rows = (
        CctOverflow(OverflowReason.INVALID_PARENT_CONTEXT, EdgeKind.CALL, ONE),
        CctOverflow(drain, EdgeKind.SPAWN, ONE),
        CctOverflow(drain, EdgeKind.SPAWN, ONE),
    )
    merged = merge_cct([CctSection(0, (), rows)])
    assert [(o.reason, o.edge_kind, o.counters.invocations_started) for o in merged.overflows] == [
        (drain, EdgeKind.SPAWN, 2),
        (OverflowReason.INVALID_PARENT_CONTEXT, EdgeKind.CALL, 1),
    ]


@given(st.lists(cct_sections, max_size=4), st.randoms())
def test_merge_is_order_independent(sections: list[CctSection], rnd: object) -> None:
    shuffled = list(sections)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    merged = merge_cct(sections)
    assert merge_cct(shuffled) == merged
    assert [c.key for c in merged.contexts] == sorted({c.key for s in sections for c in s.contexts})


def test_self_ns_clamps_at_zero() -> None:
    assert self_ns(ONE) == (78, False)
    assert self_ns(CctCounters(inclusive_ns=10, direct_call_child_inclusive_ns=8, await_ns=2)) == (
        0,
        False,
    )
    assert self_ns(CctCounters(inclusive_ns=10, direct_call_child_inclusive_ns=11)) == (0, True)
