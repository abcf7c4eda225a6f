"""Every outcome the engine produces has the QueryOutcome shape of openapi.yaml."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from query_fakes import E1, SNAPSHOT, FakeSource, standard
from query_openapi import load_schemas, validate

from baml_studio.format.errors import BamlStudioError
from baml_studio.query import QueryBudgets, QueryEngine

OUTCOME_KEYS = {
    "queryCompleted",
    "resultState",
    "snapshot",
    "rowsStreamed",
    "valueEvaluations",
    "privateState",
}


def outcome_of(sql: str, source: FakeSource | None = None, **budgets: Any) -> dict[str, Any]:
    engine = QueryEngine(source or standard(), QueryBudgets(**budgets))
    result = engine.execute(sql)
    list(result)
    return result.outcome()


def cancelled_outcome() -> dict[str, Any]:
    result = QueryEngine(standard()).execute("SELECT call_id FROM calls")
    next(iter(result))
    result.cancel()
    return result.outcome()


def stopped_early_outcome() -> dict[str, Any]:
    result = QueryEngine(standard()).execute("SELECT call_id FROM calls")
    list(itertools.islice(iter(result), 2))
    return result.outcome()


def unavailable_source_outcome() -> dict[str, Any]:
    source = standard()
    source.fail_snapshot = BamlStudioError("no store at /nowhere")
    return outcome_of("SELECT 1", source)


CASES = {
    "complete": lambda: outcome_of("SELECT call_id FROM calls WHERE output['score'] > 0"),
    "incomplete": lambda: outcome_of("SELECT call_id FROM calls WHERE args['x'] = 1"),
    "invalid_sql": lambda: outcome_of("DROP TABLE calls"),
    "budget": lambda: outcome_of("SELECT * FROM calls", max_result_rows=1),
    "cancelled": cancelled_outcome,
    "stopped_early": stopped_early_outcome,
    "dependency": unavailable_source_outcome,
}
EXPECTED_STATE = {
    "complete": ("complete", None),
    "incomplete": ("incomplete", None),
    "invalid_sql": ("failed", "invalid_sql"),
    "budget": ("budget_exhausted", "E_QUERY_BUDGET_EXCEEDED"),
    "cancelled": ("cancelled", "cancelled"),
    "stopped_early": ("cancelled", "cancelled"),
    "dependency": ("failed", "dependency_unavailable"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_outcome_states_and_key_sets(case: str) -> None:
    outcome = CASES[case]()
    state, code = EXPECTED_STATE[case]
    assert outcome["resultState"] == state
    assert outcome["queryCompleted"] is (state in ("complete", "incomplete"))
    assert set(outcome) == OUTCOME_KEYS | ({"error"} if code else set())
    assert set(outcome["snapshot"]) == {"catalogVersion", "generation", "lanceVersion"}
    assert set(outcome["valueEvaluations"]) == {"attempted", "available", "unavailable", "byReason"}
    assert set(outcome["privateState"]) == {"indexed", "pending"}
    evaluations = outcome["valueEvaluations"]
    assert evaluations["attempted"] == evaluations["available"] + evaluations["unavailable"]
    assert evaluations["unavailable"] == sum(evaluations["byReason"].values())
    if code:
        assert outcome["error"]["code"] == code
        assert {"code", "message", "retryable"} <= set(outcome["error"])
        assert outcome["error"]["retryable"] is (code == "dependency_unavailable")


@pytest.mark.parametrize("case", sorted(CASES))
def test_outcome_validates_against_openapi(case: str) -> None:
    schemas = load_schemas()
    outcome = CASES[case]()
    validate(outcome, schemas["QueryOutcome"], schemas)
    validate({"queryOutcome": outcome}, schemas["QueryOutcomeEnvelope"], schemas)


def test_validator_rejects_wrong_shapes() -> None:
    schemas = load_schemas()
    good = outcome_of("SELECT 1")
    for broken in (
        {**good, "extra": 1},
        {k: v for k, v in good.items() if k != "privateState"},
        {**good, "resultState": "done"},
        {**good, "rowsStreamed": -1},
        {**good, "snapshot": {**good["snapshot"], "projectedThrough": 1}},
    ):
        with pytest.raises(AssertionError):
            validate(broken, schemas["QueryOutcome"], schemas)


def test_snapshot_and_private_state_values() -> None:
    outcome = outcome_of(f"SELECT call_id FROM calls WHERE execution_id = '{E1}'")
    assert outcome["snapshot"] == {
        "catalogVersion": SNAPSHOT.catalog_version,
        "generation": SNAPSHOT.generation,
        "lanceVersion": SNAPSHOT.projected_through,
    }
    assert outcome["rowsStreamed"] == 4
    assert outcome["privateState"] == {"indexed": 4, "pending": 0}


def test_result_is_iterable_once() -> None:
    result = QueryEngine(standard()).execute("SELECT 1 AS one")
    assert list(result) == [{"one": 1}]
    with pytest.raises(RuntimeError):
        iter(result)
    assert result.query_outcome().result_state == "complete"


def test_source_bug_is_an_internal_outcome_not_an_exception() -> None:
    class Broken(FakeSource):
        def tables(self, relations, execution_ids):  # type: ignore[no-untyped-def]
            raise KeyError("bug")

    result = QueryEngine(Broken()).execute("SELECT * FROM calls")
    assert list(result) == []
    outcome = result.outcome()
    assert outcome["resultState"] == "failed"
    assert outcome["error"]["code"] == "internal"


def test_source_error_is_dependency_unavailable() -> None:
    class Failing(FakeSource):
        def tables(self, relations, execution_ids):  # type: ignore[no-untyped-def]
            raise OSError("disk gone")

    outcome = outcome_of("SELECT * FROM calls", Failing())
    assert outcome["error"]["code"] == "dependency_unavailable"
    assert outcome["error"]["retryable"] is True


def test_execution_error_is_invalid_sql() -> None:
    outcome = outcome_of("SELECT CAST(call_id AS INT) AS n FROM calls")
    assert outcome["resultState"] == "failed"
    assert outcome["error"]["code"] == "invalid_sql"
    assert "Cast" in outcome["error"]["message"] or "cast" in outcome["error"]["message"]
