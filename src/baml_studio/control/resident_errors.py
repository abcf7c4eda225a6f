"""Why the resident query compiler refused a query: one 400 type per rule, each with a stable code.

Exception tree::

    BadRequest (baml_studio.apierrors, 400)
    └── ResidentQueryError
        ├── SqlTooLong               sql_too_long: the text is over the byte limit
        ├── SqlParseError            sql_parse_error: not PostgreSQL-flavoured SQL we can read
        ├── StatementNotAllowed      statement_not_allowed: not exactly one query (DDL, DML,
        │                            SET, INTO, FOR UPDATE, two statements…)
        ├── ConstructNotAllowed      construct_not_allowed: a query feature outside the
        │                            allowlist (WITH RECURSIVE, TABLESAMPLE, FILTER, …)
        ├── RelationNotAllowed       relation_not_allowed: a table that is not a public
        │                            relation or a CTE visible there
        ├── TableFunctionNotAllowed  table_function_not_allowed: a function, LATERAL or
        │                            VALUES in FROM/JOIN
        ├── ColumnNotAllowed         column_not_allowed: a column that is not public or not
        │                            in scope
        ├── FunctionNotAllowed       function_not_allowed: a function outside the allowlist
        └── InvalidParameter         invalid_parameter: a placeholder or parameter that
                                     does not bind

Every message names the offending thing and what is allowed instead; ``details`` carries the
same facts as JSON (``{"function": "sleep"}``, ``{"column": "args", "relation": "calls_v1"}``…).
"""

from __future__ import annotations

from baml_studio.apierrors import BadRequest


class ResidentQueryError(BadRequest):
    """A resident query the compiler refuses; nothing was sent to ClickHouse."""

    code = "resident_query_invalid"


class SqlTooLong(ResidentQueryError):
    code = "sql_too_long"


class SqlParseError(ResidentQueryError):
    code = "sql_parse_error"


class StatementNotAllowed(ResidentQueryError):
    code = "statement_not_allowed"


class ConstructNotAllowed(ResidentQueryError):
    code = "construct_not_allowed"


class RelationNotAllowed(ResidentQueryError):
    code = "relation_not_allowed"


class TableFunctionNotAllowed(ResidentQueryError):
    code = "table_function_not_allowed"


class ColumnNotAllowed(ResidentQueryError):
    code = "column_not_allowed"


class FunctionNotAllowed(ResidentQueryError):
    code = "function_not_allowed"


class InvalidParameter(ResidentQueryError):
    code = "invalid_parameter"


ERROR_CODES: tuple[str, ...] = tuple(
    cls.code
    for cls in (
        SqlTooLong,
        SqlParseError,
        StatementNotAllowed,
        ConstructNotAllowed,
        RelationNotAllowed,
        TableFunctionNotAllowed,
        ColumnNotAllowed,
        FunctionNotAllowed,
        InvalidParameter,
    )
)
"""Every code the compiler can answer with."""
