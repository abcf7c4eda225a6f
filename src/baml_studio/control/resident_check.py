"""Allowlist checks over the parsed query: nodes, functions, tables and CTE visibility.

:func:`check_query` walks every node of the (identifier-normalized) PostgreSQL parse tree once
and refuses anything outside :mod:`.resident_rules`; :func:`check_tables` admits a table
reference only if it names a public relation or a CTE visible at that point. Visibility follows
PostgreSQL: a CTE body sees the CTEs before it in its ``WITH``, the query body sees all of them,
and an inner ``WITH`` adds to what its enclosing query sees.
"""

from __future__ import annotations

import re

from sqlglot import exp

from baml_studio.catalog.schema import PUBLIC_RELATIONS, RELATIONS, Relation
from baml_studio.control import resident_rules as rules
from baml_studio.control.resident_errors import (
    ConstructNotAllowed,
    FunctionNotAllowed,
    RelationNotAllowed,
    SqlParseError,
    StatementNotAllowed,
    TableFunctionNotAllowed,
)

DIALECT = "postgres"
RELATION_NAMES: dict[str, Relation] = {
    name: relation for relation in RELATIONS for name in (relation.name, *relation.aliases)
}
"""Every catalog name (canonical or alias, lower-case) → its relation, internal ones included."""
PUBLIC_NAMES = ", ".join(r.name for r in PUBLIC_RELATIONS)
RESERVED_PREFIX = "__resident_"
_BAD_IDENTIFIER = re.compile(r"[\x00-\x1f\x7f\\]")
_NUMBER = re.compile(r"-?\d{1,18}(\.\d{1,9})?")


def check_query(tree: exp.Expr) -> None:
    """Refuse any node, argument or function outside the allowlist (first offence wins).

    Runs on the parsed tree and again after qualification, which may introduce nodes of its
    own (a bare table name used as a value becomes a ``TableColumn``)."""
    for node in tree.walk():
        _check_node(node)


def check_qualified(tree: exp.Expr) -> None:
    """The checks that need qualified columns and expanded stars."""
    check_query(tree)
    for star in tree.find_all(exp.Star):
        if not isinstance(star.parent, exp.Count):
            shown = _snippet(star.parent or star)
            raise ConstructNotAllowed(
                f"{shown}: * could not be expanded to public columns here; name the columns",
                details={"construct": shown},
            )
    for aggregate in tree.find_all(exp.AggFunc):
        clause = aggregate.find_ancestor(exp.Where, exp.Join, exp.Group, exp.Query, exp.Subquery)
        if isinstance(clause, exp.Where | exp.Join | exp.Group):
            where = clause.key.upper()
            raise ConstructNotAllowed(
                f"aggregate {_snippet(aggregate)} is not allowed in {where}; filter groups "
                "with HAVING or aggregate in a subquery",
                details={"construct": f"aggregate in {where}"},
            )


def _check_node(node: exp.Expr) -> None:
    kind = type(node)
    if isinstance(node, exp.DML | exp.DDL | exp.Command | exp.Set | exp.Copy):
        raise StatementNotAllowed(
            f"{_snippet(node)} is not allowed: a resident query only reads",
            details={"statement": node.key.upper()},
        )
    if isinstance(node, exp.Query):
        _check_query_args(node)
    if kind in (exp.Lateral, exp.Unnest, exp.Values, exp.TableFromRows):
        raise TableFunctionNotAllowed(
            f"{_snippet(node)} is not allowed: FROM and JOIN take only catalog relations "
            f"({PUBLIC_NAMES}), CTE names and subqueries",
            details={"construct": kind.__name__.upper()},
        )
    if isinstance(node, exp.From | exp.Join):
        _check_source(node.this)
    if isinstance(node, exp.Dot):
        if node.find(exp.Func):
            raise _function_error(node.sql(DIALECT).split("(", 1)[0])
        raise ConstructNotAllowed(
            f"{_snippet(node)} is not allowed: refer to columns as column or alias.column",
            details={"construct": _snippet(node)},
        )
    allowed_args = rules.ARGS.get(kind)
    if allowed_args is not None:
        extra = sorted(
            k for k, v in node.args.items() if v not in (None, False, []) and k not in allowed_args
        )
        if extra:
            raise ConstructNotAllowed(
                f"{_describe_arg(kind, extra[0])} is not allowed in a resident query",
                details={"construct": _describe_arg(kind, extra[0])},
            )
    if kind in rules.NODES:
        _check_detail(node)
        return
    if isinstance(node, exp.Func):
        _check_function(node)
        return
    raise ConstructNotAllowed(
        f"{_snippet(node)} ({kind.__name__}) is not allowed in a resident query; allowed: "
        "SELECT with WITH, joins, subqueries, UNION/INTERSECT/EXCEPT, window functions, "
        "CASE, IN, BETWEEN, LIKE/ILIKE, IS [NOT] DISTINCT FROM, arithmetic and the "
        "allowlisted functions",
        details={"construct": kind.__name__},
    )


def _check_query_args(node: exp.Query) -> None:
    if node.args.get("into"):
        raise StatementNotAllowed(
            "SELECT … INTO is not allowed: a resident query only reads",
            details={"statement": "SELECT INTO"},
        )
    if node.args.get("locks"):
        raise StatementNotAllowed(
            "FOR UPDATE / FOR SHARE is not allowed: a resident query only reads",
            details={"statement": "SELECT FOR UPDATE"},
        )
    with_ = node.args.get("with_")
    if isinstance(with_, exp.With) and with_.args.get("recursive"):
        raise ConstructNotAllowed(
            "WITH RECURSIVE is not allowed; use plain WITH",
            details={"construct": "WITH RECURSIVE"},
        )


def _check_source(source: exp.Expr | None) -> None:
    """A FROM/JOIN source must be a plain table name or a parenthesized query."""
    if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
        if source.name.lower() not in rules.DENIED:
            return
    elif isinstance(source, exp.Subquery) and isinstance(source.this, exp.Query):
        return
    shown = _snippet(source) if source is not None else "an empty FROM"
    raise TableFunctionNotAllowed(
        f"{shown} is not allowed in FROM/JOIN: use a catalog relation ({PUBLIC_NAMES}), a CTE "
        "name or a subquery; table functions, LATERAL and VALUES are not allowed",
        details={"source": shown},
    )


def _check_detail(node: exp.Expr) -> None:
    if isinstance(node, exp.Select) and not node.expressions:
        raise SqlParseError("SELECT needs at least one output column", details={})
    if isinstance(node, exp.Group | exp.Order) and not node.expressions:
        raise SqlParseError(f"{node.key.upper()} BY needs at least one expression", details={})
    if isinstance(node, exp.In) and not node.expressions and not node.args.get("query"):
        raise SqlParseError("IN needs at least one value or a subquery", details={})
    if isinstance(node, exp.Alias) and isinstance(node.this, exp.Star):
        raise ConstructNotAllowed("* cannot be given an alias", details={"construct": "* AS"})
    if isinstance(node, exp.Order) and not isinstance(node.parent, rules.ORDER_PARENTS):
        raise ConstructNotAllowed(
            "ORDER BY inside a function's arguments is not allowed; order the query instead",
            details={"construct": "aggregate ORDER BY"},
        )
    if isinstance(node, exp.Array) and any(isinstance(e, exp.Query) for e in node.expressions):
        raise ConstructNotAllowed(
            "ARRAY(subquery) is not allowed; use IN (subquery)",
            details={"construct": "ARRAY(subquery)"},
        )
    if isinstance(node, exp.Any | exp.All):
        _check_quantified(node)
    alias = node.args.get("alias") if isinstance(node, exp.Table) else None
    if isinstance(alias, exp.TableAlias) and alias.columns:
        raise ConstructNotAllowed(
            f"{_snippet(node)}: column aliases on a table are not allowed; alias the "
            "columns in a subquery instead",
            details={"construct": "table column aliases"},
        )
    if isinstance(node, exp.Identifier) and _BAD_IDENTIFIER.search(node.name):
        raise ConstructNotAllowed(
            f"identifier {node.name!r} contains a control character or backslash",
            details={"identifier": node.name},
        )
    if isinstance(node, exp.Identifier) and node.name.lower().startswith(RESERVED_PREFIX):
        raise ConstructNotAllowed(
            f"identifier {node.name!r} is reserved: names starting {RESERVED_PREFIX!r} belong "
            "to the compiler",
            details={"identifier": node.name},
        )
    if isinstance(node, exp.Join):
        side, kind = node.side.upper(), node.kind.upper()
        if side not in rules.JOIN_SIDES or kind not in rules.JOIN_KINDS:
            raise ConstructNotAllowed(
                f"{' '.join(filter(None, (side, kind)))} JOIN is not allowed; use [INNER], "
                "LEFT, RIGHT, FULL [OUTER] or CROSS JOIN",
                details={"construct": f"{side} {kind} JOIN".strip()},
            )
    if isinstance(node, exp.Interval):
        unit = node.unit.name.upper() if node.unit is not None else ""
        amount = node.this.name if isinstance(node.this, exp.Literal) else ""
        if not _NUMBER.fullmatch(amount) or unit not in rules.INTERVAL_UNITS:
            raise ConstructNotAllowed(
                f"{_snippet(node)} is not allowed: write INTERVAL '<n>' <unit> with one of "
                f"{', '.join(sorted(rules.INTERVAL_UNITS))}",
                details={"construct": _snippet(node)},
            )
    if isinstance(node, exp.WithinGroup) and not _is_percentile(node.this):
        raise _function_error(_function_name(node.this) if node.this else "WITHIN GROUP")


def _check_quantified(node: exp.Any | exp.All) -> None:
    inner = node.this.this if isinstance(node.this, exp.Paren) else node.this
    if isinstance(inner, exp.Query | exp.Subquery):
        return
    if isinstance(node, exp.Any) and isinstance(node.parent, exp.EQ):
        return
    raise ConstructNotAllowed(
        f"{_snippet(node.parent or node)} is not allowed: over an array only x = ANY(array) "
        "works; ANY/ALL with other comparisons need a subquery",
        details={"construct": node.key.upper()},
    )


def _check_function(node: exp.Func) -> None:
    name = _function_name(node)
    if isinstance(node, exp.Anonymous):
        if name.lower() in rules.ANONYMOUS:
            return
        raise _function_error(name)
    if type(node) not in rules.FUNCTIONS:
        raise _function_error(name)
    if isinstance(node, exp.PercentileCont | exp.PercentileDisc) and not isinstance(
        node.parent, exp.WithinGroup
    ):
        raise FunctionNotAllowed(
            f"{name} needs WITHIN GROUP (ORDER BY <column>)",
            details={"function": name},
        )
    if type(node) in rules.WINDOW_FUNCTIONS and not isinstance(node.parent, exp.Window):
        raise FunctionNotAllowed(
            f"window function {name} needs an OVER (…) clause", details={"function": name}
        )
    if isinstance(node, exp.Extract):
        _check_unit(node.this, rules.EXTRACT_UNITS, "EXTRACT / date_part")
    if isinstance(node, exp.TimestampTrunc):
        _check_unit(node.args.get("unit"), rules.TRUNC_UNITS, "date_trunc")
    if isinstance(node, exp.Cast):  # TryCast too
        to = node.to
        if to.this not in rules.CAST_TYPES:
            raise ConstructNotAllowed(
                f"cast to {to.sql(DIALECT)} is not allowed; allowed types: {rules.CAST_TYPE_NAMES}",
                details={"type": to.sql(DIALECT), "allowed": rules.CAST_TYPE_NAMES},
            )


def _check_unit(unit: exp.Expr | None, allowed: frozenset[str], what: str) -> None:
    text = unit.name.upper() if isinstance(unit, exp.Var | exp.Literal) else ""
    if text.rstrip("S") in allowed or text in allowed:
        return
    shown = unit.sql(DIALECT) if unit is not None else "nothing"
    raise ConstructNotAllowed(
        f"{what} unit {shown} is not allowed: write a literal unit, one of "
        f"{', '.join(sorted(allowed))}",
        details={"unit": shown, "allowed": sorted(allowed)},
    )


def _is_percentile(node: exp.Expr | None) -> bool:
    if isinstance(node, exp.PercentileCont | exp.PercentileDisc):
        return True
    return isinstance(node, exp.Anonymous) and node.name.lower() == "approx_percentile_cont"


def _function_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name)
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return type(node).__name__


def _function_error(name: str) -> FunctionNotAllowed:
    lowered = name.lower()
    allowed = rules.allowed_functions()
    if lowered in rules.DENIED or lowered.startswith("system."):
        why = "it reaches outside the query's data or the server's safety limits"
    else:
        why = "it is not on the resident allowlist"
    return FunctionNotAllowed(
        f"function {name!r} is not allowed: {why}; allowed: {', '.join(allowed)}",
        details={"function": name, "allowed": allowed},
    )


def _describe_arg(kind: type[exp.Expr], arg: str) -> str:
    names = {
        "sample": "TABLESAMPLE",
        "grouping_sets": "GROUPING SETS",
        "rollup": "ROLLUP",
        "cube": "CUBE",
        "on": "DISTINCT ON",
        "method": "NATURAL JOIN",
        "settings": "SETTINGS",
        "format": "FORMAT",
        "only": "FROM ONLY",
        "recursive": "WITH RECURSIVE",
        "except_": "SELECT * EXCEPT",
        "replace": "SELECT * REPLACE",
    }
    return names.get(arg, f"{kind.__name__.upper()} {arg.strip('_').upper()}")


def _snippet(node: exp.Expr) -> str:
    text = node.sql(DIALECT)
    return text if len(text) <= 80 else text[:77] + "..."


def visible_ctes(table: exp.Table) -> set[str]:
    """Names of the CTEs ``table`` can see, by PostgreSQL's (non-recursive) rules."""
    names: set[str] = set()
    child: exp.Expr = table
    node = table.parent
    while node is not None:
        if isinstance(node, exp.With):
            for cte in node.expressions:
                if cte is child:
                    break
                names.add(cte.alias)
        else:
            with_ = node.args.get("with_")
            if isinstance(with_, exp.With) and with_ is not child:
                names.update(cte.alias for cte in with_.expressions)
        child, node = node, node.parent
    return names


def check_tables(tree: exp.Expr) -> int:
    """Refuse tables that are not public relations or visible CTEs; returns relation refs."""
    for cte in tree.find_all(exp.CTE):
        _check_cte_name(cte)
    references = 0
    for table in tree.find_all(exp.Table):
        _check_source(table)
        if table.args.get("db") or table.args.get("catalog"):
            shown = table.sql(DIALECT).split(" AS ", 1)[0]
            raise RelationNotAllowed(
                f"relation {shown!r} is not allowed: write a catalog relation without a "
                f"schema or database ({PUBLIC_NAMES}); system, information_schema and "
                "pg_catalog tables are never readable",
                details={"relation": shown, "allowed": [r.name for r in PUBLIC_RELATIONS]},
            )
        if table.name in visible_ctes(table):
            continue
        relation = RELATION_NAMES.get(table.name)
        if relation is None:
            raise RelationNotAllowed(
                f"relation {table.name!r} is not allowed: it is neither a catalog relation "
                f"({PUBLIC_NAMES}, or their aliases) nor a CTE visible here",
                details={"relation": table.name, "allowed": [r.name for r in PUBLIC_RELATIONS]},
            )
        if relation.internal:
            raise RelationNotAllowed(
                f"relation {table.name!r} is internal to the data plane and has no public "
                f"facts; allowed: {PUBLIC_NAMES}",
                details={"relation": relation.name, "allowed": [r.name for r in PUBLIC_RELATIONS]},
            )
        references += 1
    return references


def _check_cte_name(cte: exp.CTE) -> None:
    name = cte.alias
    if name.lower() in RELATION_NAMES:
        raise RelationNotAllowed(
            f"CTE name {name!r} is not allowed: it is the name of a catalog relation; "
            "rename the CTE",
            details={"cte": name},
        )
    if not name:
        raise ConstructNotAllowed("a CTE needs a name", details={"construct": "CTE"})
