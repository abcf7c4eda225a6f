"""Shortcuts that answer from the meta plane alone, without folding data segments.

``SELECT count(*) FROM threads WHERE parent_thread_id IS NULL`` (and any query over root rows
that reads only index columns) needs no data file: every root row's index columns come from
the meta segments (:data:`baml_studio.catalog.fold_meta.META_ROOT_COLUMNS`). The shortcut
applies only to a single-table SELECT on ``threads`` whose WHERE has the top-level conjunct
``parent_thread_id IS NULL`` and whose every column is an index column; anything else folds.
"""

from __future__ import annotations

from sqlglot import exp

from baml_studio.catalog.fold_meta import META_ROOT_COLUMNS
from baml_studio.catalog.schema import THREADS


def root_thread_columns(query: exp.Expr | None) -> frozenset[str] | None:
    """The threads columns a roots-only query reads, or None when the shortcut does not apply."""
    if not isinstance(query, exp.Select) or query.args.get("joins") or query.args.get("with_"):
        return None
    if query.find(exp.Subquery) is not None or query.args.get("with") is not None:
        return None
    from_ = query.args.get("from_") or query.args.get("from")
    tables = list(query.find_all(exp.Table))
    if from_ is None or len(tables) != 1 or tables[0].name.lower() not in THREADS_NAMES:
        return None
    for star in query.find_all(exp.Star):
        if not isinstance(star.parent, exp.Count):
            return None
    columns = frozenset(column.name for column in query.find_all(exp.Column))
    if not columns <= META_ROOT_COLUMNS or not _filters_roots(query.args.get("where")):
        return None
    return columns


THREADS_NAMES = frozenset({THREADS.name, *THREADS.aliases})


def _filters_roots(where: exp.Expr | None) -> bool:
    if where is None:
        return False
    condition = where.this if isinstance(where, exp.Where) else where
    for conjunct in condition.flatten() if isinstance(condition, exp.And) else (condition,):
        if (
            isinstance(conjunct, exp.Is)
            and isinstance(conjunct.this, exp.Column)
            and conjunct.this.name == "parent_thread_id"
            and isinstance(conjunct.expression, exp.Null)
        ):
            return True
    return False
