"""The gatekeeper: which SQL text may reach the engine (reference facts §5.5).

Exactly one statement, and only: a query (``SELECT``, with ``WITH``/``UNION``/…), ``SHOW
TABLES``, ``SHOW COLUMNS FROM <table>``, ``DESCRIBE <table>`` or ``EXPLAIN [ANALYZE] [VERBOSE]
<query>``. Identifiers starting ``__baml_`` are reserved for the engine's own functions and are
rejected anywhere outside string literals. Every table a query names must be in the catalog (a
CTE name is fine); an unknown one gets a did-you-mean remedy. Everything else (``CREATE``,
``INSERT``, ``DROP``, ``COPY``, ``SET``, …) is ``invalid_sql``: the catalog is read-only.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokenizer_core import TokenType

from baml_studio.catalog.schema import resolve
from baml_studio.query.errors import InvalidSql
from baml_studio.query.names import INFORMATION_SCHEMA, lookup, suggest, table_names

DIALECT = "postgres"
RESERVED_PREFIX = "__baml_"
ALLOWED = (
    "a SELECT query (WITH and UNION allowed), SHOW TABLES, SHOW COLUMNS FROM <table>, "
    "DESCRIBE <table> or EXPLAIN <query>"
)
_STRINGS = frozenset(t for t in TokenType if "STRING" in t.name)
_SHOW_TABLES = re.compile(r"SHOW\s+TABLES", re.I)
_SHOW_COLUMNS = re.compile(r"SHOW\s+(?:FULL\s+)?COLUMNS\s+(?:FROM|IN)\s+(\"?)([\w.]+)\1", re.I)
_EXPLAIN = re.compile(r"EXPLAIN\s+((?:(?:ANALYZE|VERBOSE)\s+)*)", re.I)

Kind = Literal["query", "show_tables", "show_columns", "describe", "explain"]


@dataclass(frozen=True, slots=True)
class Statement:
    kind: Kind
    text: str
    """The statement as given, without surrounding whitespace and trailing semicolons."""
    query: exp.Query | None = None
    """The query (for ``explain``, the explained query)."""
    explain_options: str = ""
    """``ANALYZE``/``VERBOSE`` words of an EXPLAIN, upper-case, space-separated."""
    query_text: str = ""
    """The text of :attr:`query` as given."""

    @property
    def analyze(self) -> bool:
        return "ANALYZE" in self.explain_options


def admit(sql: str, *, internal: bool) -> Statement:
    """The one statement in ``sql``, checked; raises :class:`InvalidSql` otherwise, SQL nested
    too deeply to read included (sqlglot's parser recurses once per nested bracket)."""
    try:
        return _admit(sql, internal=internal, explain=True)
    except RecursionError:
        raise InvalidSql(
            "the SQL is nested too deeply to read",
            "flatten nested expressions or subqueries",
        ) from None


def _admit(sql: str, *, internal: bool, explain: bool) -> Statement:
    """:func:`admit`; an EXPLAIN only if ``explain`` (so ``EXPLAIN EXPLAIN …`` is refused at
    once, not read again once per word)."""
    _reject_reserved(sql)
    statements = _parse(sql)
    if not statements:
        raise InvalidSql("the SQL holds no statement", f"write {ALLOWED}")
    if len(statements) != 1:
        raise InvalidSql(
            f"expected exactly one SQL statement, got {len(statements)}",
            "send one statement per query (remove the extra ';'-separated statements)",
        )
    text = sql.strip().rstrip(";").strip()
    if _SHOW_TABLES.fullmatch(text):
        return Statement("show_tables", text)
    shown = _SHOW_COLUMNS.fullmatch(text)
    if shown:
        _check_table(shown.group(2), internal)
        return Statement("show_columns", text)
    explained = _EXPLAIN.match(text)
    if explained:
        if not explain:
            raise _explain_needs_a_query()
        inner = _admit(text[explained.end() :], internal=internal, explain=False)
        if inner.kind != "query":
            raise _explain_needs_a_query()
        options = " ".join(explained.group(1).upper().split())
        return Statement("explain", text, inner.query, options, inner.text)
    (node,) = statements
    if isinstance(node, exp.Describe) and isinstance(node.this, exp.Table):
        _check_table(node.this.name, internal)
        return Statement("describe", text)
    if isinstance(node, exp.Query) and node.find(exp.Into) is None:
        check_tables(node, internal)
        return Statement("query", text, node, query_text=text)
    verb = text.split(None, 1)[0].upper() if text else "empty"
    if verb in _WRITES or isinstance(node, exp.Query):  # a query with INTO writes too
        raise InvalidSql(
            f"{verb} statements are not allowed: the catalog is read-only",
            f"write {ALLOWED}",
        )
    raise InvalidSql(  # a typo (SELEC) is not a write refused
        f"{verb[:40]!r} does not begin a statement the catalog takes", f"write {ALLOWED}"
    )


_WRITES = frozenset({
    "INSERT", "UPDATE", "DELETE", "MERGE", "UPSERT", "REPLACE", "CREATE", "DROP", "ALTER",
    "TRUNCATE", "RENAME", "COPY", "GRANT", "REVOKE", "SET", "RESET", "VACUUM", "ANALYZE",
    "ATTACH", "DETACH", "LOAD", "INSTALL", "PRAGMA", "CALL", "EXEC", "EXECUTE", "BEGIN", "START",
    "COMMIT", "ROLLBACK", "USE", "CACHE", "UNCACHE", "COMMENT", "REFRESH", "OPTIMIZE", "EXPORT",
    "IMPORT", "PREPARE", "DEALLOCATE", "LOCK", "UNLOCK", "KILL",
})  # fmt: skip
"""First words of statements that write or change the session: refused as writes."""


def _explain_needs_a_query() -> InvalidSql:
    return InvalidSql("EXPLAIN needs a query", f"write EXPLAIN SELECT …; allowed: {ALLOWED}")


def _reject_reserved(sql: str) -> None:
    try:
        tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
    except TokenError as exc:
        raise InvalidSql(f"cannot read the SQL: {exc}", "check quotes and brackets") from exc
    for token in tokens:
        if token.token_type not in _STRINGS and token.text.lower().startswith(RESERVED_PREFIX):
            raise InvalidSql(
                f"identifier {token.text!r} is reserved: names starting {RESERVED_PREFIX!r} "
                "belong to the query engine",
                "rename it (quote-free names starting __baml_ cannot be used)",
            )


def _parse(sql: str) -> list[exp.Expr]:
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)  # SHOW/EXPLAIN fall back to Command with a warning
    try:
        parsed = sqlglot.parse(sql, dialect=DIALECT)
    except ParseError as exc:
        message = exc.errors[0]["description"] if exc.errors else str(exc)
        raise InvalidSql(f"syntax error: {message}", "check the SQL near that point") from exc
    except TokenError as exc:  # the tokenizer read it in _reject_reserved; kept for safety
        raise InvalidSql(f"cannot read the SQL: {exc}", "check quotes and brackets") from exc
    finally:
        logger.setLevel(level)
    return [p for p in parsed if p is not None]


def check_tables(query: exp.Expr, internal: bool) -> None:
    """Every table the query names is in the catalog (CTE names and table functions aside)."""
    ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    for table in query.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue  # a table function such as generate_series(…)
        db = table.db.lower()
        if db == INFORMATION_SCHEMA:
            continue
        if not db and table.name.lower() in ctes:
            continue
        if db not in ("", "public") or table.catalog.lower() not in ("", "baml"):
            raise InvalidSql(
                f"unknown schema {table.sql(dialect=DIALECT)!r}",
                "catalog tables live in baml.public; write the table name alone",
            )
        _check_table(table.name, internal)


def _check_table(name: str, internal: bool) -> None:
    if lookup(name, internal) is not None:
        return
    relation = resolve(name)
    if relation is not None and relation.internal:
        raise InvalidSql(
            f"{name!r} is an internal relation",
            "internal relations are for the local CLI: baml-studio query --store … --internal "
            "(or BAML_INTERNAL=1)",
        )
    guess = suggest(name, table_names(internal))
    hint = f"did you mean {guess!r}? " if guess else ""
    raise InvalidSql(f"unknown table {name!r}", f"{hint}run SHOW TABLES to list the catalog")
