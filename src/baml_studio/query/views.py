"""The catalog's views keep their documented order when queried directly.

``hot_call_paths`` is "call paths by self time, slowest first" (its SQL ends ``ORDER BY self_ns
DESC``), but an ORDER BY inside a view does not order the query that reads it (DataFusion drops
it, as SQL allows). A plain scan of the view — one table, no ORDER BY, no aggregate, GROUP BY or
DISTINCT — gets the view's order back, so ``SELECT fqn FROM hot_call_paths LIMIT 10`` is the ten
hottest paths.
"""

from __future__ import annotations

from sqlglot import exp

from baml_studio.catalog.schema import HOT_CALL_PATHS

_NAMES = frozenset({HOT_CALL_PATHS.name, HOT_CALL_PATHS.alias})


def with_view_order(query: exp.Query | None) -> exp.Query | None:
    """A copy of ``query`` ordered like the view it scans, or None when nothing changes."""
    if not isinstance(query, exp.Select) or query.args.get("order"):
        return None
    tables = list(query.find_all(exp.Table))
    if len(tables) != 1 or tables[0].name.lower() not in _NAMES or query.args.get("joins"):
        return None
    if query.args.get("group") or query.args.get("distinct") or any(query.find_all(exp.AggFunc)):
        return None
    if query.find(exp.Subquery) is not None:
        return None
    column = exp.column("self_ns", table=tables[0].alias_or_name)
    return query.order_by(exp.Ordered(this=column, desc=True), copy=True)
