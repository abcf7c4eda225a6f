"""The same store answers byte-identically; 1 and 4 writing processes give the same rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from baml_studio.catalog.local import LocalStoreSource
from baml_studio.cli import main
from baml_studio.query import QueryEngine
from baml_studio.workload import run_workload

QUERIES = (
    "SELECT fqn, sum(calls_started) n, sum(completed_error) e, sum(completed_cancelled) c "
    "FROM call_path_stats GROUP BY fqn ORDER BY fqn",
    "SELECT status, count(*) n FROM threads WHERE parent_thread_id IS NULL "
    "GROUP BY status ORDER BY status",
    "SELECT fqn, status, args, output FROM calls ORDER BY fqn, args_cid, output_cid",
    "SELECT stack, kind, value FROM errors ORDER BY value_cid, stack",
    "SELECT fqn, args['customer']['age'] AS age FROM calls "
    "WHERE args['customer']['age'] >= 30 ORDER BY fqn, age, args_cid",
)


def test_jsonl_output_is_byte_identical_across_runs(tmp_path: Path) -> None:
    store = tmp_path / "store"
    runner = CliRunner()
    assert runner.invoke(main, ["demo", "--store", str(store), "--executions", "40"]).exit_code == 0
    sql = (
        "SELECT execution_id, call_id, fqn, started_ns, args, output, error FROM calls "
        "ORDER BY execution_id, call_id"
    )
    first = runner.invoke(main, ["query", "--store", str(store), "--format", "jsonl", sql])
    second = runner.invoke(main, ["query", "--store", str(store), "--format", "jsonl", sql])
    assert first.exit_code == 0, first.output
    assert first.output == second.output
    assert first.output.count("\n") > 40


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("determinism")
    one, four = base / "one" / "profiles-v1", base / "four" / "profiles-v1"
    run_workload(one, executions=40, processes=1, seed=5)
    run_workload(four, executions=40, processes=4, seed=5)
    return one, four


@pytest.mark.parametrize("sql", QUERIES)
def test_one_or_four_writing_processes_give_the_same_rows(
    stores: tuple[Path, Path], sql: str
) -> None:
    answers = []
    for root in stores:
        result = QueryEngine(LocalStoreSource(root)).execute(sql)
        rows = list(result)
        assert result.outcome()["resultState"] == "complete"
        answers.append(rows)
    assert answers[0] == answers[1]
    assert answers[0]
