"""Value predicates answered from the typed private index ``value_paths_v1`` (DESIGN.md §5).

:func:`value_predicates` finds, in a query, the top-level ``WHERE`` conjuncts that compare one
value path of one table's value column with a literal — ``args['ticket']['priority'] =
'high'``, ``args['customer']['age'] >= 30``, ``output['summary'] LIKE '%refund%'`` — under the
same conditions as public pruning (:mod:`.shape`: the table is the scope's only source or named
by its alias; no outer join). :func:`matching_cids` looks the predicate up in ``value_paths_v1``
(BTREE on ``path``, NGRAM on ``str_value``) and returns the CIDs whose value *may* satisfy it:

* rows at the path whose typed leaf satisfies it (text kinds for a string literal, number kinds
  for a number; ``contains`` for a ``LIKE '%word%'``);
* every CID the index cannot decide: a text leaf kept only as a prefix (``*_prefix``), a big
  integer (``int`` with its decimal text), a value over the leaf cap (``truncated``), an
  omission on the path (``omitted``: the engine counts it unavailable), an undecodable body
  (``corrupt``), and — for ``LIKE`` — a path that is not a leaf (its JSON rendering).

The coordinator then drops only candidate rows whose value is *available*, *indexed* and whose
CID is not in that set: they cannot match. Everything else still goes through the engine, which
evaluates the predicate exactly and counts every unavailable value as the local engine does;
the index only spares reading bodies that cannot match.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from baml_studio.projector.lance_store import sql_literal
from baml_studio.projector.value_paths import EXACT_FLOAT_INT, key_step
from baml_studio.query.rewrite_ops import COMPARISONS, FLIP

ROLES = {
    "calls_v1": {
        "args": ("args_cid", "args_state"),
        "output": ("output_cid", "output_state"),
        "error": ("error_cid", "error_state"),
    },
    "errors_v1": {"value": ("value_cid", "value_state")},
}
"""Value column -> (public CID column, public state column) per relation."""
UNDECIDED_KINDS = ("omitted", "truncated", "corrupt")
TEXT_KINDS = ("string", "enum")
PREFIX_KINDS = ("string_prefix", "enum_prefix")
_WORD = re.compile(r"%([^%_\\']{3,})%")
_NUMBERISH = re.compile(r"[0-9.eE+\-infaINFA]+")

Scan = Callable[[list[str], str], pa.Table]
"""Reads ``columns`` of ``value_paths_v1`` at the bound version with a filter."""


@dataclass(frozen=True, slots=True)
class ValuePredicate:
    relation: str
    column: str
    """The value column (``args``, ``output``, ``error``, ``value``)."""
    path: str
    """The ``value_paths_v1`` path (``$.ticket.priority``)."""
    op: str
    """``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=`` or ``like``."""
    literal: str | int | float

    @property
    def cid_column(self) -> str:
        return ROLES[self.relation][self.column][0]

    @property
    def state_column(self) -> str:
        return ROLES[self.relation][self.column][1]


def value_predicate(
    relation: str, node: exp.Expr, owns: Callable[[exp.Column], bool]
) -> ValuePredicate | None:
    """``node`` as a value predicate on ``relation`` (whose columns ``owns`` recognises)."""
    if isinstance(node, exp.Paren):
        return value_predicate(relation, node.this, owns)
    if isinstance(node, exp.Like) and isinstance(node.expression, exp.Literal):
        target = node.this.this if isinstance(node.this, exp.Cast) else node.this
        word = _WORD.fullmatch(str(node.expression.this)) if node.expression.is_string else None
        found = _path(relation, target, owns)
        if found is None or word is None or found[1] == "$":
            return None
        return ValuePredicate(relation, found[0], found[1], "like", word.group(1))
    op = COMPARISONS.get(type(node))
    if op is None:
        return None
    for target, other, flipped in ((node.this, node.expression, False),
                                   (node.expression, node.this, True)):  # fmt: skip
        found = _path(relation, target, owns)
        literal = _literal(other)
        if found is not None and literal is not None:
            return ValuePredicate(relation, found[0], found[1], FLIP[op] if flipped else op,
                                  literal)  # fmt: skip
    return None


def _path(
    relation: str, node: exp.Expr, owns: Callable[[exp.Column], bool]
) -> tuple[str, str] | None:
    keys: list[str] = []
    while isinstance(node, exp.Bracket):
        if len(node.expressions) != 1:
            return None
        key = node.expressions[0]
        if not (isinstance(key, exp.Literal) and key.is_string):
            return None  # list indexes (and anything else) are left to the engine
        keys.append(str(key.this))
        node = node.this
    if not keys or not isinstance(node, exp.Column) or not owns(node):
        return None
    column = node.name.lower()
    if column not in ROLES.get(relation, {}):
        return None
    return column, "$" + "".join(key_step(k) for k in reversed(keys))


def _literal(node: exp.Expr) -> str | int | float | None:
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        inner = _literal(node.this)
        return -inner if isinstance(inner, int | float) and not isinstance(inner, bool) else None
    if not isinstance(node, exp.Literal):
        return None
    if node.is_string:
        return str(node.this)
    text = str(node.this)
    try:
        number: int | float = int(text) if re.fullmatch(r"\d+", text) else float(text)
    except ValueError:
        return None
    if isinstance(number, int) and number > EXACT_FLOAT_INT:
        return None  # past exact float comparison in the index: left to the engine
    return number if not isinstance(number, float) or math.isfinite(number) else None


def matching_cids(predicate: ValuePredicate, scan: Scan) -> set[str]:
    """Wire CIDs whose value may satisfy ``predicate`` (see the module doc)."""
    path = sql_literal(predicate.path)
    found: set[str] = set()
    for where in (_typed(predicate, path), _undecided(predicate)):
        table = scan(["cid"], where)
        found.update(table["cid"].to_pylist())
    if predicate.op == "like":  # a non-leaf renders as JSON: the index cannot decide it
        for first, after in ((".", "/"), ("[", "\\")):  # every path below: P.… or P[…
            low, high = sql_literal(predicate.path + first), sql_literal(predicate.path + after)
            found.update(scan(["cid"], f"path >= {low} AND path < {high}")["cid"].to_pylist())
    return found


def _typed(p: ValuePredicate, path: str) -> str:
    prefix = f"kind IN ({', '.join(sql_literal(k) for k in PREFIX_KINDS)})"
    if p.op == "like":
        assert isinstance(p.literal, str)  # reason: value_predicate builds LIKE from text only
        word = sql_literal(p.literal)
        # any leaf whose rendering may hold the word: text, enum and bool leaves by their text
        # (NGRAM); bytes and media (rendered otherwise than indexed) and numbers (no text in
        # the index) whenever they could
        others = ["bytes", "media"]
        if _NUMBERISH.fullmatch(p.literal):
            others += ["int", "float"]
        kinds = ", ".join(sql_literal(k) for k in others)
        return f"path = {path} AND (contains(str_value, {word}) OR {prefix} OR kind IN ({kinds}))"
    if isinstance(p.literal, str):
        kinds = ", ".join(sql_literal(k) for k in TEXT_KINDS)
        cond = f"kind IN ({kinds}) AND str_value {p.op} {sql_literal(p.literal)}"
        return f"path = {path} AND (({cond}) OR {prefix})"
    number = repr(float(p.literal))
    cond = f"kind IN ('int', 'float') AND num_value {p.op} {number}"
    big = "(kind = 'int' AND str_value IS NOT NULL)"
    return f"path = {path} AND (({cond}) OR {big})"


def _undecided(p: ValuePredicate) -> str:
    """Markers on the path or above it (an omission there, a truncated or corrupt value)."""
    prefixes = ["$"]
    for step in re.findall(r"\.[A-Za-z_][A-Za-z0-9_]*|\[\"(?:[^\"\\]|\\.)*\"\]", p.path[1:]):
        prefixes.append(prefixes[-1] + step)
    kinds = ", ".join(sql_literal(k) for k in UNDECIDED_KINDS)
    paths = ", ".join(sql_literal(x) for x in prefixes)
    return f"path IN ({paths}) AND kind IN ({kinds})"
