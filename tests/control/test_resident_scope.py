"""Scope injection: every relation reference, wherever it sits, becomes its own scoped derived
table, CTEs are renamed, and budgets hold on chDB."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlglot
from resident_rig import SCOPE_MARK, Facts, assert_every_table_is_scoped, build_facts
from sqlglot import exp

from baml_studio.control.resident import (
    QueryParameter,
    ResidentBudget,
    budget_settings,
    compile_resident,
)


class Recorder:
    """A relation_sql that records what it was asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, name: str) -> str:
        self.asked.append(name)
        return Facts("chdb://unused", "db", "oracle").scoped_sql(name)


def test_relation_sql_is_asked_once_per_canonical_relation() -> None:
    recorder = Recorder()
    compiled = compile_resident(
        "SELECT 1 FROM calls a JOIN retained_calls b ON a.call_id = b.call_id "
        "JOIN calls_v1 c ON c.call_id = a.call_id JOIN threads t ON t.thread_id = a.thread_id",
        [],
        relation_sql=recorder,
    )
    assert sorted(recorder.asked) == ["calls_v1", "threads_v1"]
    assert compiled.relations == frozenset({"calls_v1", "threads_v1"})
    assert compiled.sql.count(SCOPE_MARK) == 4


def test_injected_tables_keep_the_written_alias_or_name() -> None:
    compiled = compile_resident(
        "SELECT calls.fqn, t.status, threads_v1.kind FROM calls "
        "JOIN threads t ON t.execution_id = calls.execution_id "
        "JOIN threads_v1 ON threads_v1.thread_id = t.thread_id",
        [],
        relation_sql=Recorder(),
    )
    tree = sqlglot.parse_one(compiled.sql, dialect="clickhouse")
    aliases = sorted(s.alias for s in tree.find_all(exp.Subquery))
    assert aliases == ["calls", "t", "threads_v1"]


@pytest.mark.parametrize(
    ("sql", "refs"),
    [
        (
            "SELECT a.x FROM (SELECT b.x FROM "
            "(SELECT c.fqn AS x FROM (SELECT fqn FROM calls) c) b) a",
            1,
        ),
        (
            "SELECT fqn FROM calls WHERE execution_id IN (SELECT execution_id FROM threads WHERE "
            "thread_id IN (SELECT throw_thread_id FROM errors WHERE execution_id IN "
            "(SELECT execution_id FROM health)))",
            4,
        ),
        (
            "WITH a AS (SELECT execution_id FROM calls), b AS (SELECT execution_id FROM a "
            "UNION ALL SELECT execution_id FROM threads), c AS (SELECT execution_id FROM b "
            "WHERE execution_id IN (SELECT execution_id FROM errors)) "
            "SELECT execution_id FROM c UNION SELECT execution_id FROM health",
            4,
        ),
        (
            "SELECT (SELECT count(*) FROM calls), (SELECT max(depth) FROM call_path_stats), "
            "EXISTS (SELECT 1 FROM function_definitions) FROM health",
            4,
        ),
        (
            "SELECT x.n FROM (WITH q AS (SELECT count(*) AS n FROM calls) SELECT n FROM q) x "
            "CROSS JOIN (WITH q AS (SELECT count(*) AS m FROM threads) SELECT m FROM q) y",
            2,
        ),
    ],
)
def test_every_reference_at_any_depth_is_scoped(sql: str, refs: int) -> None:
    compiled = compile_resident(sql, [], relation_sql=Recorder())
    assert assert_every_table_is_scoped(compiled.sql) == refs


def test_ctes_are_renamed_so_no_written_name_reaches_clickhouse() -> None:
    compiled = compile_resident(
        "WITH batches AS (SELECT execution_id FROM calls), "
        "projection_batches AS (SELECT execution_id FROM batches) "
        "SELECT p.execution_id FROM projection_batches p",
        [],
        relation_sql=Recorder(),
    )
    tree = sqlglot.parse_one(compiled.sql, dialect="clickhouse")
    names = {t.name for t in tree.find_all(exp.Table)}
    assert names == {"__resident_cte_1", "__resident_cte_2", "calls_v1"}
    assert {c.alias for c in tree.find_all(exp.CTE)} == {"__resident_cte_1", "__resident_cte_2"}


def test_inner_cte_shadows_outer_one_of_the_same_name() -> None:
    compiled = compile_resident(
        "WITH q AS (SELECT fqn FROM calls) "
        "SELECT z.kind FROM (WITH q AS (SELECT kind FROM threads) SELECT kind FROM q) z",
        [],
        relation_sql=Recorder(),
    )
    assert 'FROM "__resident_cte_2" AS "q"' in compiled.sql


def test_comments_never_reach_clickhouse() -> None:
    compiled = compile_resident(
        "SELECT fqn /* c1 */ FROM calls -- c2 */ SETTINGS readonly=0\nWHERE fqn = 'a'",
        [],
        relation_sql=Recorder(),
    )
    assert "/*" not in compiled.sql and "--" not in compiled.sql
    assert "SETTINGS" not in compiled.sql


@pytest.fixture(scope="module")
def facts(chdb_dsn: str) -> Iterator[Facts]:
    yield from build_facts(chdb_dsn)


CAPS = ResidentBudget(10_000, 10**9, 10**10, 100_000, 64 << 20)


def test_budget_result_rows_throws_on_chdb(facts: Facts) -> None:
    compiled = facts.compile("SELECT call_id FROM calls")
    budget = budget_settings(ResidentBudget(10_000, 10**6, 10**8, 5, 1 << 20), CAPS)
    settings = {**compiled.settings, **budget}
    assert list(settings)[-1] == "readonly"
    with pytest.raises(Exception, match=r"TOO_MANY_ROWS_OR_BYTES|Limit for result"):
        facts.client().query(compiled.sql, settings=settings)
    generous = {
        **compiled.settings,
        **budget_settings(ResidentBudget(10_000, 10**6, 10**8, 100, 1 << 20), CAPS),
    }
    assert len(facts.client().query(compiled.sql, settings=generous).result_rows) == 40


def test_budget_rows_read_throws_on_chdb(facts: Facts) -> None:
    compiled = facts.compile(
        "SELECT count(*) FROM calls WHERE execution_id = $1", [QueryParameter("string", "x")]
    )
    settings = {
        **compiled.settings,
        **budget_settings(ResidentBudget(10_000, 3, 10**8, 10, 1 << 20), CAPS),
    }
    with pytest.raises(Exception, match=r"max_rows_to_read|TOO_MANY_ROWS"):
        facts.client().query(compiled.sql, settings=settings)


def test_parenthesised_relation_sql_with_limit_by_is_accepted(facts: Facts) -> None:
    """The fact store hands out ``(SELECT … LIMIT 1 BY key)`` for set-like relations."""

    def relation_sql(name: str) -> str:
        inner = facts.scoped_sql(name)
        return f"({inner} ORDER BY execution_id LIMIT 1 BY execution_id)"

    compiled = compile_resident(
        "SELECT count(*) FROM calls c JOIN threads t ON t.execution_id = c.execution_id",
        [],
        relation_sql=relation_sql,
    )
    assert "((" not in compiled.sql
    assert "LIMIT 1 BY" in compiled.sql
    assert facts.run(compiled) == [(6,)]
