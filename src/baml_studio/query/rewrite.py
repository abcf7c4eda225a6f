"""Rewrite value expressions into UDF calls before DataFusion plans the query (§5.4).

A *value expression* is a virtual column (see :mod:`.resolve`) with literal subscripts:
``args['customer']['age']``, ``output[0]``. By its context it becomes:

====================================================  =======================================
``VE <op> literal`` (``=, <>, !=, <, <=, >, >=``)       ``__baml_vcmp`` (either operand order)
``VE IN (literals)``, ``VE BETWEEN a AND b``             ``__baml_vcmp`` disjunction/conjunction
``VE = baml_value_json('…')`` (or ``<>``)               ``__baml_vcmp_json`` (semantic equality)
``VE = baml_value_cid('bamlv_1_…')`` (whole value)      ``__baml_vcmp_cid`` (identity, no read)
``VE <op> VE``                                          ``__baml_vcmp_value``
an item of the final SELECT list                        ``__baml_render_json`` (a value column)
a bare item of an inner SELECT list                     kept: the handle passes through
ORDER BY (not grouped), or ORDER BY its alias/position  ``__baml_sortkey``
GROUP BY / grouped ORDER BY matching a SELECT item      that item's form
anywhere else (functions, IS NULL, LIKE, HAVING, …)     ``__baml_render`` (Utf8)
====================================================  =======================================

Integer subscripts are 0-based, negative from the end (jsonb semantics); a numeric subscript on
``args`` is an error, because arguments are a map keyed by parameter name. Output names stay
stable: an alias is kept, a bare ``output`` stays ``output``, and an unaliased subscript is named
by its text (``args['customer']['age']``). Any other ``baml_value_json``/``baml_value_cid`` call
becomes its canonical string literal. Value predicates stay where the user wrote them (WHERE, ON),
so they are evaluated before the final ORDER BY and LIMIT, and never pushed into a scan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import Scope, traverse_scope, walk_in_scope

from baml_studio.query import udfs
from baml_studio.query.errors import InvalidSql
from baml_studio.query.resolve import column_role, ident
from baml_studio.query.rewrite_ops import (
    COMPARISONS,
    FLIP,
    cid_argument,
    is_call,
    json_argument,
    literal_json,
    output_selects,
    path_json,
    select_aliases,
    subscript,
    where_gates,
)
from baml_studio.query.semantics import Path

DIALECT = "postgres"
Form = Literal["json", "keep", "render", "sortkey"]


@dataclass(frozen=True, slots=True)
class Rewritten:
    sql: str | None
    """The rewritten SQL, or None when nothing needed rewriting (plan the original text)."""
    value_columns: frozenset[str]
    """Output columns holding canonical JSON renders of values (parse them back for JSON)."""


@dataclass(slots=True)
class _Use:
    top: exp.Expr
    root: exp.Column
    path: Path
    select: exp.Select | None
    gate: exp.Expr | None = None
    """The WHERE's value-free conjuncts when the use is in that WHERE (see :mod:`.udfs`)."""

    @property
    def key(self) -> tuple[str, Path]:
        """Matches the same value in a SELECT list and its GROUP BY / ORDER BY (a qualifier
        does not matter: both occurrences keep their own column reference)."""
        return ident(self.root.this), self.path

    def call(self, name: str, *extra: exp.Expr, path: bool = True) -> exp.Expr:
        args: list[exp.Expr] = [self.root.copy()]
        if path:
            args.append(exp.Literal.string(path_json(self.path)))
        gate = self.gate.copy() if self.gate is not None else exp.true()
        return exp.Anonymous(this=name, expressions=[*args, *extra, gate])


def rewrite(query: exp.Query, *, internal: bool) -> Rewritten:
    """What DataFusion should plan for ``query`` (which is not modified)."""
    tree = query.copy()
    try:
        scopes = traverse_scope(tree)
    except SqlglotError as exc:
        raise InvalidSql(f"cannot resolve the query's names: {exc}", "check the query") from exc
    return _Rewriter(tree, scopes, internal).run()


class _Rewriter:
    def __init__(self, tree: exp.Query, scopes: list[Scope], internal: bool) -> None:
        self.tree = tree
        self.scopes = scopes
        self.internal = internal
        self.outputs = {id(s) for s in output_selects(tree)}
        self.value_columns: set[str] = set()
        self.forms: dict[tuple[int, tuple[str, Path]], Form] = {}
        self.items: dict[tuple[int, str | int], _Use] = {}
        self.changed = False

    def run(self) -> Rewritten:
        uses = self._collect()
        by_top = {id(u.top): u for u in uses}
        done: set[int] = set()
        for use in uses:
            if id(use.top) not in done:
                done.add(id(use.top))
                self._rewrite(use, by_top, done)
        self._order_by_items()
        self._value_functions()
        sql = self.tree.sql(dialect=DIALECT) if self.changed else None
        return Rewritten(sql, frozenset(self.value_columns))

    # -- collection ---------------------------------------------------------------------------

    def _collect(self) -> list[_Use]:
        uses: list[_Use] = []
        for scope in self.scopes:
            select = scope.expression if isinstance(scope.expression, exp.Select) else None
            aliases = select_aliases(select) if select is not None else set()
            for node in list(walk_in_scope(scope.expression)):
                if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
                    continue
                if not node.table and ident(node.this) in aliases and _in_order(node):
                    continue  # ORDER BY <select alias>
                role = column_role(node, scope, self.internal)
                if role is not None:
                    uses.append(self._use(node, role, select))
        for use in uses:
            self._remember_item(use)
        gates = where_gates(uses)
        for use in uses:
            use.gate = gates.get(id(use))
        return uses

    def _use(self, column: exp.Column, role: str, select: exp.Select | None) -> _Use:
        top: exp.Expr = column
        keys: list[str | int] = []
        while isinstance(top.parent, exp.Bracket) and top.arg_key == "this":
            top = top.parent
            keys.append(subscript(top))
        if keys and role == "input" and isinstance(keys[0], int):
            raise InvalidSql(
                f"{column.sql(dialect=DIALECT)}[{keys[0]}]: args is a map of named arguments, "
                "so it takes no numeric subscript",
                "subscript it by parameter name, for example args['customer']",
            )
        return _Use(top, column, tuple(keys), select)

    def _remember_item(self, use: _Use) -> None:
        item = _select_item(use)
        if item is None or use.select is None:
            return
        select = use.select
        form: Form = "json" if id(select) in self.outputs else "keep" if not use.path else "render"
        self.forms[(id(select), use.key)] = form
        index = next(i for i, e in enumerate(select.expressions) if e is item)
        self.items[(id(select), index + 1)] = use
        if isinstance(item, exp.Alias):
            self.items[(id(select), ident(item.args["alias"]))] = use

    # -- rewriting ----------------------------------------------------------------------------

    def _rewrite(self, use: _Use, by_top: dict[int, _Use], done: set[int]) -> None:
        if self._predicate(use, by_top, done):
            return
        parent = use.top.parent
        select = use.select
        item = _select_item(use)
        if item is not None and select is not None:
            self._replace_item(use, item, select, self.forms[(id(select), use.key)])
            return
        form: Form = "render"
        if isinstance(parent, exp.Group) and select is not None:
            form = self.forms.get((id(select), use.key), "render")
        elif isinstance(parent, exp.Ordered) and select is not None:
            if _grouped(select):
                form = self.forms.get((id(select), use.key), "render")
            else:
                form = "sortkey"
        self._replace(use.top, _form_call(use, form))

    def _replace_item(self, use: _Use, item: exp.Expr, select: exp.Select, form: Form) -> None:
        if form == "keep":
            return
        call = _form_call(use, form)
        if isinstance(item, exp.Alias):
            name = ident(item.args["alias"])
            self._replace(use.top, call)
        else:
            name = _default_name(use, select)
            self._replace(use.top, exp.alias_(call, name, quoted=True))
        if form == "json":
            self.value_columns.add(name)

    def _predicate(self, use: _Use, by_top: dict[int, _Use], done: set[int]) -> bool:
        parent = use.top.parent
        if (
            isinstance(parent, exp.In)
            and use.top.arg_key == "this"
            and not parent.args.get("query")
        ):
            literals = [literal_json(e) for e in parent.expressions]
            if not literals or any(lit is None for lit in literals):
                return False
            ors = [_vcmp(use, "=", lit) for lit in literals if lit is not None]
            self._replace(parent, exp.paren(exp.or_(*ors)))
            return True
        if isinstance(parent, exp.Between) and use.top.arg_key == "this":
            low, high = literal_json(parent.args["low"]), literal_json(parent.args["high"])
            if low is None or high is None:
                return False
            both = exp.and_(_vcmp(use, ">=", low), _vcmp(use, "<=", high))
            self._replace(parent, exp.paren(both))
            return True
        op = COMPARISONS.get(type(parent)) if parent is not None else None
        if op is None or parent is None:
            return False
        left = use.top.arg_key == "this"
        other = parent.expression if left else parent.this
        op = op if left else FLIP[op]
        other_use = by_top.get(id(other))
        if other_use is not None:
            done.add(id(other))
            extra = [exp.Literal.string(op), other_use.root.copy()]
            path = exp.Literal.string(path_json(other_use.path))
            self._replace(parent, use.call(udfs.VCMP_VALUE, *extra, path))
        elif is_call(other, "baml_value_json"):
            value = json_argument(other, op)
            self._replace(parent, use.call(udfs.VCMP_JSON, exp.Literal.string(op), value))
        elif is_call(other, "baml_value_cid"):
            cid = cid_argument(other, op, has_path=bool(use.path))
            call = use.call(udfs.VCMP_CID, exp.Literal.string(op), cid, path=False)
            self._replace(parent, call)
        else:
            lit = literal_json(other)
            if lit is None:
                return False
            self._replace(parent, _vcmp(use, op, lit))
        return True

    def _order_by_items(self) -> None:
        """ORDER BY a select alias or position of a value item sorts by value, not text."""
        for select in self.tree.find_all(exp.Select):
            order = select.args.get("order")
            if order is None or _grouped(select):
                continue
            for ordered in order.expressions:
                target = ordered.this
                key: str | int | None = None
                if isinstance(target, exp.Column) and not target.table:
                    key = ident(target.this)
                elif isinstance(target, exp.Literal) and not target.is_string:
                    key = int(target.this)
                use = self.items.get((id(select), key)) if key is not None else None
                if use is not None:
                    self._replace(target, use.call(udfs.SORTKEY))

    def _value_functions(self) -> None:
        for node in list(self.tree.find_all(exp.Anonymous)):
            if is_call(node, "baml_value_json"):
                self._replace(node, json_argument(node, "="))
            elif is_call(node, "baml_value_cid"):
                self._replace(node, cid_argument(node, "="))

    def _replace(self, node: exp.Expr, new: exp.Expr) -> None:
        node.replace(new)
        self.changed = True


def _in_order(node: exp.Expr) -> bool:
    parent = node.parent
    return isinstance(parent, exp.Ordered) and isinstance(parent.parent, exp.Order)


def _select_item(use: _Use) -> exp.Expr | None:
    node, parent = use.top, use.top.parent
    if isinstance(parent, exp.Alias) and isinstance(parent.parent, exp.Select):
        return parent if parent.arg_key == "expressions" else None
    if isinstance(parent, exp.Select) and node.arg_key == "expressions":
        return node
    return None


def _grouped(select: exp.Select) -> bool:
    if select.args.get("group") or select.args.get("distinct"):
        return True
    return any(item.find(exp.AggFunc) is not None for item in select.expressions)


def _form_call(use: _Use, form: Form) -> exp.Expr:
    name = {"json": udfs.RENDER_JSON, "sortkey": udfs.SORTKEY}.get(form, udfs.RENDER)
    return use.call(name)


def _vcmp(use: _Use, op: str, literal: str) -> exp.Expr:
    return use.call(udfs.VCMP, exp.Literal.string(op), exp.Literal.string(literal))


def _default_name(use: _Use, select: exp.Select) -> str:
    """A bare column keeps its name; a subscript is named by its text; a clash (``c.output``
    next to ``d.output``) falls back to the qualified text."""
    name = ident(use.root.this) + "".join(
        f"[{key}]" if isinstance(key, int) else "['" + key.replace("'", "''") + "']"
        for key in use.path
    )
    others = {
        ident(e.args["alias"]) if isinstance(e, exp.Alias) else e.alias_or_name.lower()
        for e in select.expressions
        if e is not use.top
    }
    return use.top.sql(dialect=DIALECT) if name in others else name
