"""The DDL and scoped reads derived from the split table, as text and as run by chDB."""

from __future__ import annotations

from collections.abc import Iterator

import clickhouse_connect
import pyarrow as pa
import pytest
import sqlglot
from facts_testkit import RELATIONS, SCOPE_A, SCOPE_B, key, open_store, sample_rows
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from baml_studio.catalog.schema import RELATIONS as ALL_RELATIONS
from baml_studio.catalog.split import private_schema, public_schema
from baml_studio.control.facts import FactStore, ddl, relation_select_sql, schema_sql
from baml_studio.control.facts.config import FactStoreConfig
from baml_studio.control.facts.ddl import (
    INTERNAL_COLUMNS,
    LOW_CARDINALITY,
    clickhouse_type,
    create_ledger_sql,
    create_table_sql,
    nullable_key,
    sort_key,
    table_columns,
)

EXPECTED_TYPES = {
    pa.string(): "String",
    pa.uint32(): "UInt32",
    pa.uint64(): "UInt64",
    pa.bool_(): "Bool",
    pa.binary(): "String",
    pa.timestamp("ns", tz="UTC"): "DateTime64(9, 'UTC')",
}
INTERNAL_NAMES = {name for name, _ in INTERNAL_COLUMNS}


def expected_type(field: pa.Field) -> str:
    if pa.types.is_list(field.type):
        return "Array(String)"
    base = EXPECTED_TYPES[field.type]
    typed = f"Nullable({base})" if field.nullable else base
    return f"LowCardinality({typed})" if field.name in LOW_CARDINALITY else typed


@pytest.fixture
def store(chdb_dsn: str, fact_database: str) -> Iterator[FactStore]:
    with open_store(chdb_dsn, fact_database) as opened:
        yield opened


def test_public_relations_are_the_six() -> None:
    assert sorted(RELATIONS) == [
        "call_path_stats_v1",
        "calls_v1",
        "errors_v1",
        "function_definitions_v1",
        "health_v1",
        "threads_v1",
    ]
    assert {r.name for r in ALL_RELATIONS if not r.internal} == set(RELATIONS)


@pytest.mark.parametrize("relation", sorted(RELATIONS))
def test_ddl_text_has_every_public_column_and_no_private_one(relation: str) -> None:
    rel = RELATIONS[relation]
    columns = dict(table_columns(rel))
    for field in public_schema(rel):
        assert columns[field.name] == expected_type(field)
    private = {f.name for f in private_schema(rel)} - {f.name for f in public_schema(rel)}
    assert private == {c.name for c in rel.private_columns()}
    sql = create_table_sql(rel, "db")
    for name in private:
        assert name not in columns
        assert f'"{name}"' not in sql
    assert set(columns) == set(public_schema(rel).names) | INTERNAL_NAMES
    assert sort_key(rel)[:4] == ['"tenant_id"', '"project_id"', '"environment_id"', '"generation"']


def test_ddl_sort_keys() -> None:
    calls = sort_key(RELATIONS["calls_v1"])[4:]
    assert calls == ["ifNull(\"fqn\", '')", '"started_at"', '"execution_id"', '"call_id"']
    assert sort_key(RELATIONS["threads_v1"])[4:] == [
        '"started_at"',
        '"execution_id"',
        '"thread_id"',
    ]
    definitions = sort_key(RELATIONS["function_definitions_v1"])[4:]
    assert definitions == ['"program_id"', '"function_id"']
    assert sorted(name for name, rel in RELATIONS.items() if nullable_key(rel)) == sorted(
        ["calls_v1", "threads_v1"]
    )


def test_unknown_arrow_type_raises() -> None:
    with pytest.raises(ValueError, match="int8"):
        clickhouse_type(pa.field("x", pa.int8()))
    with pytest.raises(ValueError):
        clickhouse_type(pa.field("x", pa.list_(pa.uint32())))


def test_executed_ddl_matches_the_split(store: FactStore, fact_database: str) -> None:
    described = store.query_arrow(
        "SELECT table, name, type FROM system.columns "
        f"WHERE database = '{fact_database}' ORDER BY table, position",
        {},
    ).to_pylist()
    by_table: dict[str, dict[str, str]] = {}
    for row in described:
        by_table.setdefault(row["table"], {})[row["name"]] = row["type"]
    assert set(by_table) == set(RELATIONS) | {"projection_batches"}
    for name, rel in RELATIONS.items():
        expected = {f.name: expected_type(f) for f in public_schema(rel)}
        expected |= dict(INTERNAL_COLUMNS)
        assert by_table[name] == expected
        assert list(by_table[name])[: len(rel.public_columns())] == public_schema(rel).names
    indexes = store.query_arrow(
        "SELECT table, name, type FROM system.data_skipping_indices "
        f"WHERE database = '{fact_database}'",
        {},
    ).to_pylist()
    found = {(i["table"], i["name"], i["type"]) for i in indexes}
    for name, rel in RELATIONS.items():
        assert (name, "idx_root_id", "bloom_filter") in found
        has_execution = "execution_id" in public_schema(rel).names
        assert ((name, "idx_execution_id", "bloom_filter") in found) == has_execution
        has_started = "started_ns" in public_schema(rel).names
        assert ((name, "idx_started_ns", "minmax") in found) == has_started
    engines = store.query_arrow(
        f"SELECT name, engine, sorting_key FROM system.tables WHERE database = '{fact_database}'",
        {},
    ).to_pylist()
    engine = {t["name"]: (t["engine"], t["sorting_key"]) for t in engines}
    assert engine["projection_batches"][0] == "ReplacingMergeTree"
    assert engine["calls_v1"] == (
        "MergeTree",
        "tenant_id, project_id, environment_id, generation, ifNull(fqn, ''), started_at, "
        "execution_id, call_id",
    )


def test_a_time_window_prunes_by_the_sort_key(store: FactStore) -> None:
    """``started_at >= x`` reads only the granules of the window: the key holds the
    wall-clock start (a plan check, not a timing)."""
    n = 40_000
    rows = sample_rows("calls_v1", n)
    start = 1_790_000_000 * 10**9
    times = pa.array([start + i * 10**9 for i in range(n)], pa.timestamp("ns", tz="UTC"))
    rows = rows.set_column(
        rows.schema.get_field_index("started_at"), rows.field("started_at"), times
    )
    rows = rows.set_column(
        rows.schema.get_field_index("fqn"), rows.field("fqn"), pa.array(["f"] * n, pa.string())
    )
    store.put_batch(key("calls_v1", "r1"), rows, "sha256:t")
    window = f"toDateTime64({1_790_000_000 + n - 5_000}, 9, 'UTC')"
    sql = f"SELECT count() FROM {store.config.database}.calls_v1 WHERE started_at >= {window}"
    assert store.query_arrow(sql, {}).column(0).to_pylist() == [5_000]
    plan = "\n".join(store.query_arrow(f"EXPLAIN indexes = 1 {sql}", {}).column(0).to_pylist())
    read, total = (int(x) for x in plan.split("Granules: ")[-1].split()[0].split("/"))
    assert total >= 4 and read <= 2, plan


def test_ensure_schema_is_idempotent(store: FactStore) -> None:
    store.put_batch(key("health_v1", "r1"), sample_rows("health_v1"), "sha256:1")
    store.ensure_schema()
    assert store.count("health_v1", SCOPE_A, "gen_1") == 3
    assert len(schema_sql("db")) == 9


def test_a_ledger_from_before_intents_gains_the_visible_column(
    chdb_dsn: str, fact_database: str
) -> None:
    """A ledger created without ``visible``: ``ensure_schema`` adds it, and the rows already
    there read as visible batches."""
    old_ledger = "\n".join(
        line for line in create_ledger_sql(fact_database).splitlines() if "visible" not in line
    )
    assert "visible" not in old_ledger
    client = clickhouse_connect.get_client(dsn=chdb_dsn)
    try:
        client.command(f"CREATE DATABASE IF NOT EXISTS {fact_database}")
        client.command(old_ledger)
        client.command(
            f"INSERT INTO {fact_database}.projection_batches (tenant_id, project_id, "
            "environment_id, generation, batch_id, root_id, relation, partition, row_count, "
            f"content_digest, written_at) VALUES ('{SCOPE_A.tenant}', '{SCOPE_A.project}', "
            f"'{SCOPE_A.environment}', 'gen_1', 'old.health_v1.0', 'old', 'health_v1', 0, 3, "
            "'sha256:old', now64(3))"
        )
    finally:
        client.close()
    with open_store(chdb_dsn, fact_database) as store:
        assert store.batch_state(SCOPE_A, "gen_1", "old.health_v1.0") == ("sha256:old", 3)
        assert store.put_batch(key("health_v1", "r1"), sample_rows("health_v1"), "d").state == (
            "created"
        )


@pytest.mark.parametrize("relation", sorted(RELATIONS))
def test_relation_select_sql_selects_public_columns_in_order(relation: str) -> None:
    sql = relation_select_sql(relation, "db", SCOPE_A, "gen_1")
    assert sql.startswith("(") and sql.endswith(")")
    tree = sqlglot.parse_one(sql, read="clickhouse")
    select = tree.find(exp.Select)
    assert select is not None
    names = [e.name for e in select.expressions]
    assert names == public_schema(RELATIONS[relation]).names
    assert not set(names) & INTERNAL_NAMES
    conditions = {(c.left.name, c.right.name) for c in select.args["where"].find_all(exp.EQ)}
    assert conditions == {
        ("tenant_id", "tenant_a"),
        ("project_id", "proj"),
        ("environment_id", "prod"),
        ("generation", "gen_1"),
    }
    has_limit_by = "LIMIT 1 BY" in sql
    assert has_limit_by == (relation == "function_definitions_v1")


def test_relation_select_sql_reads_one_scope_and_generation(store: FactStore) -> None:
    hostile = "gen_1' OR 1 = 1 OR '\\"
    store.put_batch(key("calls_v1", "r1"), sample_rows("calls_v1", 4, seed="a"), "sha256:a")
    store.put_batch(key("calls_v1", "r1", scope=SCOPE_B), sample_rows("calls_v1", 2), "sha256:b")
    store.put_batch(key("calls_v1", "r1", generation="gen_2"), sample_rows("calls_v1", 5), "d")
    store.put_batch(key("calls_v1", "r9", generation=hostile), sample_rows("calls_v1", 1), "d")
    db = store.config.database

    def read(scope: object, generation: str) -> pa.Table:
        derived = relation_select_sql("calls_v1", db, scope, generation)  # type: ignore[arg-type]
        return store.query_arrow(f"SELECT * FROM {derived} AS c ORDER BY call_id", {})

    a = read(SCOPE_A, "gen_1")
    assert a.num_rows == 4
    assert a.cast(public_schema(RELATIONS["calls_v1"])).equals(sample_rows("calls_v1", 4, seed="a"))
    assert a.column_names == public_schema(RELATIONS["calls_v1"]).names
    assert read(SCOPE_B, "gen_1").num_rows == 2
    assert read(SCOPE_A, "gen_2").num_rows == 5
    assert read(SCOPE_B, "gen_2").num_rows == 0
    assert read(SCOPE_A, hostile).num_rows == 1


def test_function_definitions_read_as_a_set(store: FactStore) -> None:
    rows = sample_rows("function_definitions_v1", 3)
    for root in ("r1", "r2", "r3"):
        store.put_batch(key("function_definitions_v1", root), rows, "sha256:fd")
    assert store.count("function_definitions_v1", SCOPE_A, "gen_1") == 9
    derived = relation_select_sql(
        "function_definitions_v1", store.config.database, SCOPE_A, "gen_1"
    )
    got = store.query_arrow(f"SELECT * FROM {derived} AS f ORDER BY function_id DESC", {})
    assert got.cast(rows.schema).equals(rows)


def test_every_low_cardinality_name_is_a_public_string_column() -> None:
    strings = {
        f.name for rel in RELATIONS.values() for f in public_schema(rel) if f.type == pa.string()
    }
    assert LOW_CARDINALITY.issubset(strings)
    assert "execution_id" not in LOW_CARDINALITY and "call_id" not in LOW_CARDINALITY
    assert clickhouse_type(pa.field("fqn", pa.string())) == "LowCardinality(Nullable(String))"
    field = pa.field("status", pa.string(), nullable=False)
    assert clickhouse_type(field) == "LowCardinality(String)"


def test_low_cardinality_columns_read_back_as_plain_strings(store: FactStore) -> None:
    rows = sample_rows("calls_v1", 10)
    store.put_batch(key("calls_v1", "r1"), rows, "d")
    derived = relation_select_sql("calls_v1", store.config.database, SCOPE_A, "gen_1")
    got = store.query_arrow(f"SELECT fqn, status, args_state FROM {derived} AS c", {})
    assert [f.type for f in got.schema] == [pa.string()] * 3
    assert sorted(got.column("fqn").to_pylist(), key=str) == sorted(
        rows.column("fqn").to_pylist(), key=str
    )


# --- literals written without sqlglot expressions, byte-identical to sqlglot's ---------------

_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40
) | st.sampled_from(["", "'", "\\", "\\'", "a'b\\c", "\x00\x1f\x7f\n\r\t", "é漢\U0001f600"])


def _sqlglot_literal(value: str) -> str:
    return exp.Literal.string(value).sql(dialect="clickhouse")


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_string_sql_writes_what_sqlglot_writes(value: str) -> None:
    assert ddl.string_sql(value) == _sqlglot_literal(value)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(["tenant_id", "batch_id", "a b", 'q"uote', "x`y"]), min_size=1,
             max_size=5, unique=True),
    st.data(),
)  # fmt: skip
def test_in_lists_write_what_sqlglot_writes(columns: list[str], data: st.DataObject) -> None:
    rows = data.draw(st.lists(st.lists(_TEXT, min_size=len(columns), max_size=len(columns))))
    target = exp.Tuple(expressions=[exp.column(c, quoted=True) for c in columns])
    values = [exp.Tuple(expressions=[exp.Literal.string(v) for v in row]) for row in rows]
    assert ddl.tuple_in_sql(columns, rows) == target.isin(*values).sql(dialect="clickhouse")
    flat = [v for row in rows for v in row]
    column = exp.column(columns[0], quoted=True)
    assert ddl.in_list_sql(columns[0], flat) == column.isin(
        *(exp.Literal.string(v) for v in flat)
    ).sql(dialect="clickhouse")
    if flat:
        assert ddl.eq_sql(columns[0], flat[0]) == column.eq(exp.Literal.string(flat[0])).sql(
            dialect="clickhouse"
        )


def merge_bases(dsn: str, database: str) -> dict[str, str | None]:
    """``merge_selector_base`` of each table of ``database`` as its DDL says (None: unset)."""
    client = clickhouse_connect.get_client(dsn=dsn)
    try:
        rows = client.query(
            f"SELECT name, create_table_query FROM system.tables WHERE database = '{database}'"
        ).result_rows
    finally:
        client.close()
    found = {}
    for name, ddl_text in rows:
        setting = [p for p in ddl_text.split(", ") if "merge_selector_base" in p]
        found[name] = setting[0].split("= ")[-1].split()[0] if setting else None
    return found


def test_relation_tables_merge_with_the_configured_selector_base(
    chdb_dsn: str, fact_database: str
) -> None:
    """Every relation table gets ``merge_selector_base`` (20 by default), one created before
    the setting too; the ledger keeps the server's; ``None`` sets nothing."""
    client = clickhouse_connect.get_client(dsn=chdb_dsn)
    try:  # a table from before the setting
        client.command(f"CREATE DATABASE IF NOT EXISTS {fact_database}")
        client.command(create_table_sql(RELATIONS["calls_v1"], fact_database))
    finally:
        client.close()
    assert merge_bases(chdb_dsn, fact_database) == {"calls_v1": None}
    with open_store(chdb_dsn, fact_database) as store:
        bases = merge_bases(chdb_dsn, fact_database)
        assert {name: bases[name] for name in RELATIONS} == dict.fromkeys(RELATIONS, "20")
        assert bases["projection_batches"] is None
        assert store.put_batch(key("calls_v1", "r1"), sample_rows("calls_v1"), "d").state == (
            "created"
        )
    with open_store(chdb_dsn, fact_database, merge_selector_base=None):
        assert set(merge_bases(chdb_dsn, fact_database).values()) == {None}
    assert "merge_selector_base = 7.5" in create_table_sql(
        RELATIONS["health_v1"], "db", merge_selector_base=7.5
    )
    with pytest.raises(ValueError, match="merge_selector_base"):
        FactStoreConfig(dsn=chdb_dsn, merge_selector_base=1)


def test_a_server_without_the_merge_setting_keeps_its_own(
    chdb_dsn: str, fact_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older server that does not list ``merge_selector_base`` would refuse a table that
    names it: the store creates its tables without it."""
    monkeypatch.setattr(
        "baml_studio.control.facts.store.MERGE_SETTING_PROBE",
        "SELECT count() FROM system.merge_tree_settings WHERE name = 'no_such_setting'",
    )
    with open_store(chdb_dsn, fact_database):
        assert set(merge_bases(chdb_dsn, fact_database).values()) == {None}
