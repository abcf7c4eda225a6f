"""The resident query compiler: the coordinator's public SQL in, scoped ClickHouse SQL out.

This is the tenant-isolation boundary of ``POST /resident-queries`` (docs/control-plane.md,
"Resident queries"). :func:`compile_resident` takes PostgreSQL-flavoured SQL (DataFusion's
unparser output, or hand-written) and:

1. refuses text over ``max_sql_bytes`` and anything that is not exactly one parseable query
   (``SELECT``, ``WITH … SELECT``, ``UNION``/``INTERSECT``/``EXCEPT``);
2. walks every node against the allowlists of :mod:`.resident_rules` (:mod:`.resident_check`):
   no DDL/DML, ``INTO``, ``FOR UPDATE``, table functions, ``LATERAL``, ``VALUES``; only public
   relations (canonical names or catalog aliases) and CTEs visible at that point; only
   allowlisted functions;
3. names unnamed outputs, binds ``$n``/``?`` parameters as typed literals
   (:mod:`.resident_params`) and qualifies every column against the public columns
   (:mod:`.resident_columns`);
4. rewrites functions to their ClickHouse forms, replaces **every** relation reference (main
   query, CTE bodies, subqueries at any depth, both sides of joins and set operations) with
   ``(<relation_sql(name)>) AS <alias>`` and renames CTEs (:mod:`.resident_clickhouse`);
5. generates ClickHouse SQL without comments.

Each refusal is a :class:`~baml_studio.control.resident_errors.ResidentQueryError` (HTTP 400)
with a stable code. :func:`budget_settings` turns a request budget into ClickHouse settings.

Output columns keep the caller's names: a column its name, an aliased expression its alias, an
unnamed expression its own text (``count(*)``); a repeated name for a different expression
gets ``_2``, ``_3``… (:mod:`.resident_columns`). Run the SQL with
:attr:`CompiledQuery.settings` (PostgreSQL NULL semantics) and then the budget settings.

Known differences from PostgreSQL that remain: predicates answer ``UInt8`` 0/1 rather than
booleans; ``array_agg`` skips NULL elements; ``EXTRACT(SECOND|EPOCH …)`` are whole seconds;
``concat`` renders timestamps the ClickHouse way; ``approx_percentile_cont`` is ClickHouse's
t-digest; type errors (``'a' < 1``) are found by ClickHouse at execution, not here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.tokenizer_core import Token, TokenType

from baml_studio.control.resident_check import DIALECT, check_qualified, check_query, check_tables
from baml_studio.control.resident_clickhouse import (
    ResidentCompilerError,
    generate,
    inject_scope,
    rewrite_functions,
)
from baml_studio.control.resident_columns import (
    annotate,
    dedupe_outputs,
    name_outputs,
    new_schema,
    qualify_columns,
)
from baml_studio.control.resident_errors import (
    ResidentQueryError,
    SqlParseError,
    SqlTooLong,
    StatementNotAllowed,
)
from baml_studio.control.resident_params import (
    QueryParameter,
    bind_parameters,
    number_question_marks,
)
from baml_studio.control.resident_rules import STATEMENT_STARTS, STATEMENT_VERBS

MAX_SQL_BYTES = 64 * 1024
CLICKHOUSE_MAX_QUERY_SIZE = 262_144
"""ClickHouse's default ``max_query_size``; :attr:`CompiledQuery.settings` raises it if needed."""

__all__ = [
    "MAX_SQL_BYTES",
    "CompiledQuery",
    "QueryParameter",
    "ResidentBudget",
    "ResidentCompilerError",
    "ResidentQueryError",
    "budget_settings",
    "compile_resident",
]


@dataclass(frozen=True, slots=True)
class CompiledQuery:
    """A resident query ready for ClickHouse."""

    sql: str
    """ClickHouse SQL; every relation is a derived table restricted to scope and generation."""

    relations: frozenset[str]
    """Canonical names of the relations the query reads."""

    parameters_bound: int
    """How many parameters were bound into :attr:`sql`."""

    settings: dict[str, int | str] = field(default_factory=dict)
    """Settings the query needs for PostgreSQL semantics (apply before the budget settings):
    ``join_use_nulls=1`` (outer joins give NULL, not default values),
    ``aggregate_functions_null_for_empty=1`` (``sum``/``min``/… of no rows is NULL),
    ``max_query_size`` when the scoped SQL is longer than ClickHouse's default."""


def compile_resident(
    sql: str,
    parameters: Sequence[QueryParameter],
    *,
    relation_sql: Callable[[str], str],
    max_sql_bytes: int = MAX_SQL_BYTES,
) -> CompiledQuery:
    """Check ``sql`` and compile it to scoped ClickHouse SQL.

    ``relation_sql(canonical_name)`` returns ClickHouse SQL of one ``SELECT`` over the
    relation's public columns restricted to the authenticated scope and generation. Raises a
    :class:`ResidentQueryError` (400) for anything the rules refuse.
    """
    size = len(sql.encode("utf-8"))
    if size > max_sql_bytes:
        raise SqlTooLong(
            f"the SQL is {size} bytes; the limit is {max_sql_bytes}: send a smaller query",
            details={"bytes": size, "limit": max_sql_bytes},
        )
    with _sqlglot_errors():
        tree = _parse(sql)
        check_query(tree)
        references = check_tables(tree)
        name_outputs(tree)
        schema = new_schema()
        tree = qualify_columns(tree, schema)
        check_qualified(tree)
        dedupe_outputs(tree)
        bound = bind_parameters(tree, parameters)
        tree = annotate(tree, schema)
        tree = rewrite_functions(tree)
    scoped = inject_scope(tree, relation_sql)
    if scoped.references != references:
        raise ResidentCompilerError(
            f"{references} relation references were checked but {scoped.references} scoped"
        )
    with _sqlglot_errors():
        text = generate(scoped.tree)
    settings: dict[str, int | str] = {"join_use_nulls": 1, "aggregate_functions_null_for_empty": 1}
    if len(text.encode("utf-8")) >= CLICKHOUSE_MAX_QUERY_SIZE:
        settings["max_query_size"] = len(text.encode("utf-8")) + 1
    return CompiledQuery(text, scoped.relations, bound, settings)


def _parse(sql: str) -> exp.Expr:
    dialect = sqlglot.Dialect.get_or_raise(DIALECT)
    tokens = dialect.tokenize(sql)
    _check_statements(tokens)
    sql = number_question_marks(sql, tokens)
    with _quiet_sqlglot():
        statements = [s for s in dialect.parse(sql) if s is not None]
    if len(statements) != 1:
        raise StatementNotAllowed(
            f"expected exactly one SQL statement, got {len(statements)}: send one SELECT",
            details={"statements": len(statements)},
        )
    (tree,) = statements
    while isinstance(tree, exp.Subquery) and not any(
        v for k, v in tree.args.items() if k != "this"
    ):
        tree = tree.this
    if not isinstance(tree, exp.Select | exp.SetOperation):
        raise _not_a_query(tree.key.upper())
    tree.parent = None
    return normalize_identifiers(tree, dialect=DIALECT)


def _check_statements(tokens: Sequence[Token]) -> None:
    """One statement that starts like a query, judged on tokens so that comments, strings and
    ClickHouse-only statements (``SYSTEM``, ``KILL``, ``ATTACH``…) cannot confuse it."""
    statements: list[list[Token]] = [[]]
    for token in tokens:
        if token.token_type is TokenType.SEMICOLON:
            statements.append([])
        else:
            statements[-1].append(token)
    statements = [s for s in statements if s]
    if not statements:
        raise SqlParseError("the SQL is empty: send one SELECT", details={"reason": "empty"})
    if len(statements) > 1:
        raise StatementNotAllowed(
            f"expected exactly one SQL statement, got {len(statements)}: send one SELECT "
            "(remove the extra ';'-separated statements)",
            details={"statements": len(statements)},
        )
    first = statements[0][0]
    verb = first.text.upper()
    if verb in STATEMENT_STARTS:
        return
    if first.token_type in (TokenType.VAR, TokenType.IDENTIFIER) and verb not in STATEMENT_VERBS:
        raise SqlParseError(
            f"the SQL must start with SELECT or WITH, not {first.text!r}",
            details={"reason": f"starts with {first.text!r}"},
        )
    raise _not_a_query(verb)


def _not_a_query(verb: str) -> StatementNotAllowed:
    return StatementNotAllowed(
        f"{verb} statements are not allowed: a resident query is one read-only SELECT "
        "(WITH, joins, subqueries and UNION/INTERSECT/EXCEPT allowed)",
        details={"statement": verb},
    )


@contextmanager
def _sqlglot_errors() -> Iterator[None]:
    """sqlglot's own failures on odd input become ``sql_parse_error``, never a 500."""
    try:
        yield
    except ResidentQueryError:
        raise
    except RecursionError:
        raise SqlParseError(
            "the SQL is nested too deeply to read: flatten nested expressions or subqueries",
            details={"reason": "nesting"},
        ) from None
    except SqlglotError as exc:
        description = _describe(exc)
        raise SqlParseError(
            f"the SQL does not parse as PostgreSQL: {description}",
            details={"reason": description},
        ) from exc


def _describe(exc: SqlglotError) -> str:
    errors = getattr(exc, "errors", None)
    if errors:
        first = errors[0]
        where = (
            f" (line {first.get('line')}, column {first.get('col')})" if first.get("line") else ""
        )
        return f"{first.get('description')}{where}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


@contextmanager
def _quiet_sqlglot() -> Iterator[None]:
    """sqlglot logs warnings for things we refuse anyway (FOR UPDATE, unsupported syntax)."""
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@dataclass(frozen=True, slots=True)
class ResidentBudget:
    """Limits of one resident query (``ResidentQueryBudget`` in openapi.yaml)."""

    max_wall_ms: int
    max_rows_read: int
    max_bytes_read: int
    max_result_rows: int
    max_result_bytes: int


def budget_settings(budget: ResidentBudget, caps: ResidentBudget) -> dict[str, int | float | str]:
    """ClickHouse settings for ``budget``, each limit clamped to the server's ``caps``.

    Every overflow mode is ``throw`` (a partial answer is never returned as complete), and
    ``readonly=1`` comes last: the fact store applies the settings in order and ``readonly``
    forbids changing settings after it.
    """

    def clamp(asked: int, cap: int) -> int:
        return max(1, min(asked, cap))

    return {
        "max_execution_time": clamp(budget.max_wall_ms, caps.max_wall_ms) / 1000.0,
        "max_rows_to_read": clamp(budget.max_rows_read, caps.max_rows_read),
        "max_bytes_to_read": clamp(budget.max_bytes_read, caps.max_bytes_read),
        "max_result_rows": clamp(budget.max_result_rows, caps.max_result_rows),
        "max_result_bytes": clamp(budget.max_result_bytes, caps.max_result_bytes),
        "result_overflow_mode": "throw",
        "read_overflow_mode": "throw",
        "timeout_overflow_mode": "throw",
        "readonly": 1,
    }
