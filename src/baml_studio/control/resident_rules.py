"""What a resident query may contain: syntax nodes, functions, cast types and units.

Everything here is an allowlist over sqlglot's PostgreSQL parse tree. A node whose class is
not listed is refused, so a sqlglot upgrade that parses something new into a new class is
refused until someone adds it here and to the chDB execution test (``tests/control``), which
runs every allowed function on ClickHouse.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.expressions.datatypes import DType

AGGREGATES: dict[type[exp.Expr], str] = {
    exp.Count: "count (count(*), count(x), count(DISTINCT x))",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Min: "min",
    exp.Max: "max",
    exp.AnyValue: "any_value",
    exp.Stddev: "stddev",
    exp.StddevPop: "stddev_pop",
    exp.StddevSamp: "stddev_samp",
    exp.Variance: "variance / var_samp",
    exp.VariancePop: "var_pop",
    exp.LogicalAnd: "bool_and",
    exp.LogicalOr: "bool_or",
    exp.ArrayAgg: "array_agg",
    exp.GroupConcat: "string_agg",
    exp.PercentileCont: "percentile_cont(p) WITHIN GROUP (ORDER BY x)",
    exp.PercentileDisc: "percentile_disc(p) WITHIN GROUP (ORDER BY x)",
}

WINDOW_FUNCTIONS: dict[type[exp.Expr], str] = {
    exp.RowNumber: "row_number",
    exp.Rank: "rank",
    exp.DenseRank: "dense_rank",
    exp.Lag: "lag",
    exp.Lead: "lead",
    exp.FirstValue: "first_value",
    exp.LastValue: "last_value",
    exp.Ntile: "ntile",
}

SCALARS: dict[type[exp.Expr], str] = {
    exp.Coalesce: "coalesce",
    exp.Nullif: "nullif",
    exp.Greatest: "greatest",
    exp.Least: "least",
    exp.Abs: "abs",
    exp.Round: "round",
    exp.Floor: "floor",
    exp.Ceil: "ceil",
    exp.Lower: "lower",
    exp.Upper: "upper",
    exp.Length: "length / char_length",
    exp.Substring: "substring / substr",
    exp.Trim: "trim / ltrim / rtrim / btrim",
    exp.Concat: "concat",
    exp.StartsWith: "starts_with",
    exp.EndsWith: "ends_with",
    exp.TimestampTrunc: "date_trunc",
    exp.Extract: "extract / date_part",
    exp.UnixToTime: "to_timestamp(seconds)",
    exp.Cast: "cast / ::",
    exp.TryCast: "try_cast",
    exp.ArraySize: "array_length(a, 1)",
    exp.ArrayContains: "array_contains",
    exp.Case: "CASE",
    exp.If: "CASE WHEN",
    exp.Exists: "EXISTS",
}

ANONYMOUS: dict[str, str] = {
    "approx_percentile_cont": "approx_percentile_cont(x, p)",
    "cardinality": "cardinality",
}
"""Functions sqlglot has no class for, by lower-case name."""

FUNCTIONS: dict[type[exp.Expr], str] = {**AGGREGATES, **WINDOW_FUNCTIONS, **SCALARS}

DENIED: frozenset[str] = frozenset(
    {
        "file",
        "url",
        "s3",
        "s3cluster",
        "remote",
        "remotesecure",
        "cluster",
        "input",
        "dictget",
        "dictgetordefault",
        "dicthas",
        "sleep",
        "sleepeachrow",
        "throwif",
        "currentuser",
        "currentdatabase",
        "getsetting",
        "hostname",
        "executable",
        "mysql",
        "postgresql",
        "jdbc",
        "odbc",
        "hdfs",
        "azureblobstorage",
        "generaterandom",
        "numbers",
        "zeros",
        "merge",
        "view",
        "loop",
        "pg_read_file",
        "pg_sleep",
        "current_setting",
        "set_config",
    }
)
"""Names refused with a pointed message even though the allowlist refuses them anyway."""

NODES: frozenset[type[exp.Expr]] = frozenset(
    {
        exp.Select,
        exp.Union,
        exp.Intersect,
        exp.Except,
        exp.Subquery,
        exp.With,
        exp.CTE,
        exp.TableAlias,
        exp.From,
        exp.Join,
        exp.Where,
        exp.Group,
        exp.Having,
        exp.Order,
        exp.Ordered,
        exp.Limit,
        exp.Offset,
        exp.Fetch,
        exp.LimitOptions,
        exp.Distinct,
        exp.Window,
        exp.WindowSpec,
        exp.WithinGroup,
        exp.Table,
        exp.Column,
        exp.Identifier,
        exp.Star,
        exp.Alias,
        exp.Literal,
        exp.Null,
        exp.Boolean,
        exp.Paren,
        exp.Tuple,
        exp.Var,
        exp.Interval,
        exp.DataType,
        exp.DataTypeParam,
        exp.Parameter,
        exp.Placeholder,
        exp.Bracket,
        exp.Array,
        exp.Any,
        exp.All,
        exp.In,
        exp.Between,
        exp.Like,
        exp.ILike,
        exp.Escape,
        exp.Is,
        exp.Not,
        exp.Neg,
        exp.And,
        exp.Or,
        exp.EQ,
        exp.NEQ,
        exp.GT,
        exp.GTE,
        exp.LT,
        exp.LTE,
        exp.NullSafeEQ,
        exp.NullSafeNEQ,
        exp.Add,
        exp.Sub,
        exp.Mul,
        exp.Div,
        exp.Mod,
        exp.DPipe,
    }
)
"""Syntax nodes other than functions (functions are checked against :data:`FUNCTIONS`)."""

ARGS: dict[type[exp.Expr], frozenset[str]] = {
    exp.Select: frozenset(
        {
            "with_",
            "expressions",
            "distinct",
            "from_",
            "joins",
            "where",
            "group",
            "having",
            "windows",
            "order",
            "limit",
            "offset",
        }
    ),
    exp.Union: frozenset({"with_", "this", "expression", "distinct", "order", "limit", "offset"}),
    exp.Subquery: frozenset({"this", "alias", "order", "limit", "offset"}),
    exp.Table: frozenset({"this", "alias", "db", "catalog"}),
    exp.Join: frozenset({"this", "on", "side", "kind", "using"}),
    exp.With: frozenset({"expressions"}),
    exp.CTE: frozenset({"this", "alias"}),
    exp.Group: frozenset({"expressions"}),
    exp.Distinct: frozenset({"expressions"}),
    exp.Star: frozenset(),
    exp.Limit: frozenset({"this", "expression"}),
    exp.LimitOptions: frozenset({"rows"}),
    exp.Fetch: frozenset({"direction", "count", "limit_options"}),
    exp.Column: frozenset({"this", "table"}),
    exp.In: frozenset({"this", "expressions", "query"}),
    exp.Ordered: frozenset({"this", "desc", "nulls_first"}),
    exp.Cast: frozenset({"this", "to"}),
    exp.TryCast: frozenset({"this", "to", "safe"}),
}
"""For these nodes, the only arguments that may be set (``FOR UPDATE``, ``INTO``, ``TABLESAMPLE``,
``GROUPING SETS``, ``DISTINCT ON``, ``NATURAL`` joins, ``WITH RECURSIVE``… are left out)."""
ARGS[exp.Intersect] = ARGS[exp.Except] = ARGS[exp.Union]

ORDER_PARENTS: tuple[type[exp.Expr], ...] = (exp.Query, exp.Subquery, exp.Window, exp.WithinGroup)
"""Where ORDER BY may appear (not inside an aggregate's arguments)."""

STATEMENT_STARTS: frozenset[str] = frozenset({"SELECT", "WITH", "(", "TABLE"})
"""First token of an acceptable statement."""

STATEMENT_VERBS: frozenset[str] = frozenset(
    {
        *("ATTACH", "DETACH", "KILL", "SYSTEM", "OPTIMIZE", "RENAME", "EXCHANGE", "WATCH"),
        *("CHECK", "BACKUP", "RESTORE", "UNDROP", "MOVE", "UNDO", "LISTEN", "NOTIFY", "REINDEX"),
        *("CLUSTER", "DISCARD", "RESET", "LOAD", "IMPORT", "DECLARE", "CLOSE", "VACUUM", "DO"),
    }
)
"""Statement verbs the PostgreSQL tokenizer reads as plain words; refused as statements."""

JOIN_KINDS: frozenset[str] = frozenset({"", "INNER", "OUTER", "CROSS"})
JOIN_SIDES: frozenset[str] = frozenset({"", "LEFT", "RIGHT", "FULL"})

CAST_TYPES: frozenset[DType] = frozenset(
    DType[name]
    for name in (
        *("TEXT", "VARCHAR", "CHAR", "BIGINT", "INT", "SMALLINT", "DOUBLE", "FLOAT"),
        *("DECIMAL", "BOOLEAN", "TIMESTAMP", "TIMESTAMPTZ", "DATE"),
    )
)
CAST_TYPE_NAMES = (
    "text, varchar, char, bigint, integer, smallint, double precision, real, numeric, "
    "boolean, timestamp, timestamptz, date"
)

EXTRACT_UNITS: frozenset[str] = frozenset(
    {"YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "HOUR", "MINUTE", "SECOND", "EPOCH"}
)
TRUNC_UNITS: frozenset[str] = frozenset(
    {"MILLISECOND", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR"}
)
INTERVAL_UNITS: frozenset[str] = frozenset(
    {"MILLISECOND", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "YEAR"}
)


def allowed_functions() -> list[str]:
    """Every allowed function, as users write it, for error messages and docs."""
    return sorted({*FUNCTIONS.values(), *ANONYMOUS.values()})
