"""Every example query of reference facts §5.9, verbatim, against a demo store, with the
answers checked against what the workload generated."""

from __future__ import annotations

from collections import Counter

from e2e_demo import Demo

THROWER = {
    "baml_studio.workload.program.ExtractionError": "ExtractInvoice",
    "baml_studio.workload.program.LineItemValidationError": "validate_line_item",
    "baml_studio.workload.program.ProviderUnavailableError": "DraftReply",
    "baml_studio.workload.program.UnsupportedLanguageError": "ClassifyTicket",
}


def test_1_latest_root_threads(demo: Demo) -> None:
    rows = demo.rows(
        "SELECT thread_id, status, total_errors, started_at FROM threads "
        "WHERE parent_thread_id IS NULL ORDER BY started_at DESC LIMIT 20"
    )
    assert len(rows) == 20
    starts = [row["started_at"] for row in rows]
    assert starts == sorted(starts, reverse=True)
    every = demo.rows("SELECT status FROM threads WHERE parent_thread_id IS NULL")
    assert Counter(r["status"] for r in every) == Counter(demo.report.executions_by_status)
    assert {r["status"] for r in rows} <= set(demo.report.executions_by_status)


def test_2_call_path_stats_of_one_execution(demo: Demo) -> None:
    record = next(e for e in demo.report.executions if e.root_function == "ProcessInvoice")
    execution = demo.execution_of(record.request_id)
    rows = demo.rows(
        "SELECT fqn, sum(calls_started) calls, sum(self_ns) self_ns FROM call_path_stats "
        f"WHERE execution_id = '{execution}' GROUP BY fqn ORDER BY self_ns DESC LIMIT 10"
    )
    assert {r["fqn"]: r["calls"] for r in rows} == dict(record.calls)
    assert [r["self_ns"] for r in rows] == sorted((r["self_ns"] for r in rows), reverse=True)


def test_3_errored_calls_with_their_stacks(demo: Demo) -> None:
    rows = demo.rows(
        "SELECT c.call_id, c.duration_ns, e.stack FROM calls c JOIN errors e "
        "ON e.execution_id = c.execution_id AND e.error_id = c.error_id WHERE c.status = 'errored'"
    )
    assert rows and all(r["duration_ns"] is not None and r["stack"] for r in rows)
    failed = [e for e in demo.report.executions if e.status == "failed"]
    roots = demo.rows(
        "SELECT c.execution_id, c.fqn, e.stack, e.error_id FROM calls c JOIN errors e "
        "ON e.execution_id = c.execution_id AND e.error_id = c.error_id "
        "WHERE c.status = 'errored' AND c.edge_kind = 'root'"
    )
    by_execution = {r["execution_id"]: r for r in roots}
    assert len(by_execution) == len(failed)
    for record in failed:
        row = by_execution[demo.execution_of(record.request_id)]
        assert row["stack"][0] == record.root_function == row["fqn"]
        assert record.error_type is not None
        assert row["stack"][-1] == THROWER[record.error_type]
        (error,) = demo.rows(
            f"SELECT value FROM errors WHERE error_id = '{row['error_id']}' "
            f"AND execution_id = '{row['execution_id']}'"
        )
        assert error["value"]["type"] == record.error_type
        assert error["value"]["message"] == record.error_message


def test_4_threads_of_one_execution(demo: Demo) -> None:
    record = next(e for e in demo.report.executions if e.root_function == "DailyDigest")
    execution = demo.execution_of(record.request_id)
    rows = demo.rows(
        "SELECT thread_id, name, spawn_fqn, started_ns, end_status FROM threads "
        f"WHERE execution_id = '{execution}' ORDER BY started_ns"
    )
    assert rows[0]["thread_id"] == execution and rows[0]["spawn_fqn"] is None
    spawned = rows[1:]
    assert len(spawned) >= record.calls["Summarize"]  # each summary runs in its own task
    assert {r["spawn_fqn"] for r in spawned} == {"DailyDigest"}
    assert [r["started_ns"] for r in rows] == sorted(r["started_ns"] for r in rows)
    assert all(r["end_status"] in {"completed", "cancelled", "errored"} for r in rows)


def _expected_ages(demo: Demo, function: str | None) -> Counter[int]:
    ages: Counter[int] = Counter()
    for record in demo.report.executions:
        age = record.arguments.get("customer_age")
        if not isinstance(age, int) or age < 30:
            continue
        if function is None:
            ages[age] += record.calls.get("ScoreCustomer", 0) + record.calls.get("DraftReply", 0)
        else:
            ages[age] += record.calls.get(function, 0)
    return ages


def test_5_value_predicate_with_projection(demo: Demo) -> None:
    rows, outcome = demo.query(
        "SELECT call_id, args['customer']['age'] AS age, output FROM calls "
        "WHERE args['customer']['age'] >= 30 LIMIT 50"
    )
    assert outcome["resultState"] == "complete", outcome
    assert 0 < len(rows) <= 50 and all(r["age"] >= 30 for r in rows)
    assert outcome["valueEvaluations"]["available"] >= len(rows)
    everything = demo.rows(
        "SELECT fqn, args['customer']['age'] AS age FROM calls WHERE args['customer']['age'] >= 30"
    )
    scored = Counter(r["age"] for r in everything if r["fqn"] == "ScoreCustomer")
    assert scored == _expected_ages(demo, "ScoreCustomer")


def test_6_self_time_by_function(demo: Demo) -> None:
    rows = demo.rows(
        "SELECT fqn, sum(self_ns) AS self_ns FROM call_path_stats GROUP BY fqn "
        "ORDER BY self_ns DESC LIMIT 10"
    )
    assert len(rows) == 10
    assert {r["fqn"] for r in rows} <= set(demo.report.calls_by_function)
    calls = demo.rows("SELECT fqn, sum(calls_started) AS n FROM call_path_stats GROUP BY fqn")
    assert {r["fqn"]: r["n"] for r in calls} == demo.report.calls_by_function


def test_7_value_predicate_on_one_function(demo: Demo) -> None:
    rows, outcome = demo.query(
        "SELECT call_id, args['customer']['age'] AS age FROM calls "
        "WHERE fqn = 'ScoreCustomer' AND args['customer']['age'] >= 30"
    )
    assert outcome["resultState"] == "complete", outcome
    assert Counter(r["age"] for r in rows) == _expected_ages(demo, "ScoreCustomer")
    assert len({r["call_id"] for r in rows}) == len(rows)


def test_semantic_equality_and_identity(demo: Demo) -> None:
    record = next(e for e in demo.report.executions if e.root_function == "ProcessInvoice")
    execution = demo.execution_of(record.request_id)
    (row,) = demo.rows(
        "SELECT args_cid, args['request_id'] AS rid FROM calls "
        f"WHERE execution_id = '{execution}' AND edge_kind = 'root'"
    )
    assert row["rid"] == record.request_id
    same = demo.rows(
        f"SELECT call_id FROM calls WHERE args_cid = baml_value_cid('{row['args_cid']}')"
    )
    assert len(same) >= 1
    matches = demo.rows(
        "SELECT call_id FROM calls WHERE args['request_id'] = "
        f"baml_value_json('\"{record.request_id}\"') AND edge_kind = 'root'"
    )
    assert len(matches) == 1


def test_hot_call_paths_keeps_its_order(demo: Demo) -> None:
    rows = demo.rows("SELECT fqn, self_ns FROM hot_call_paths LIMIT 15")
    assert len(rows) == 15
    assert [r["self_ns"] for r in rows] == sorted((r["self_ns"] for r in rows), reverse=True)
    hottest = demo.rows(
        "SELECT max(self_ns) AS m FROM call_path_stats "
        "WHERE overflow_reason IS NULL AND timing_complete"
    )
    assert rows[0]["self_ns"] == hottest[0]["m"]
    mine = demo.rows("SELECT fqn, self_ns FROM hot_call_paths ORDER BY self_ns ASC LIMIT 3")
    assert [r["self_ns"] for r in mine] == sorted(r["self_ns"] for r in mine)
