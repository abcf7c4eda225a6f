"""Names the catalog answers to, and did-you-mean suggestions (Jaro-Winkler).

A table name is a relation's versioned name or alias (``calls_v1``, ``calls``,
``retained_calls``), a view (``hot_call_paths_v1``, ``hot_call_paths``), or ``baml_columns``.
Internal relations are names only when the query runs with ``internal=True``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from baml_studio.catalog.schema import RELATIONS, VIEWS, Relation, View, resolve

BAML_COLUMNS = "baml_columns"
INFORMATION_SCHEMA = "information_schema"


@dataclass(frozen=True, slots=True)
class TableRef:
    """What a table name in a query refers to."""

    relation: Relation | None = None
    view: View | None = None
    baml_columns: bool = False


def relations(internal: bool) -> tuple[Relation, ...]:
    return tuple(r for r in RELATIONS if internal or not r.internal)


def lookup(name: str, internal: bool) -> TableRef | None:
    """The catalog object ``name`` refers to, or None."""
    lowered = name.lower()
    if lowered == BAML_COLUMNS:
        return TableRef(baml_columns=True)
    for view in VIEWS:
        if lowered in (view.name, view.alias):
            return TableRef(view=view)
    relation = resolve(lowered)
    if relation is None or (relation.internal and not internal):
        return None
    return TableRef(relation=relation)


def table_names(internal: bool) -> list[str]:
    names = [BAML_COLUMNS]
    for relation in relations(internal):
        names += [relation.name, *relation.aliases]
    for view in VIEWS:
        names += [view.name, view.alias]
    return names


def view_relation(view: View) -> Relation:
    """The relation a catalog view reads (each v1 view reads one relation)."""
    if view.name == "hot_call_paths_v1":
        return resolve("call_path_stats_v1")  # type: ignore[return-value]  # reason: exists
    raise KeyError(f"no relation known for view {view.name}")


def view_columns(view: View) -> tuple[str, ...]:
    select = view.sql.split(" FROM ", 1)[0].removeprefix("SELECT ")
    return tuple(part.strip() for part in select.split(","))


def jaro_winkler(a: str, b: str) -> float:
    """Jaro-Winkler similarity in [0, 1] (prefix scale 0.1, prefix up to 4)."""
    if a == b:
        return 1.0
    if not a or not b:
        return 0.0
    window = max(max(len(a), len(b)) // 2 - 1, 0)
    matched_b = [False] * len(b)
    matches_a: list[str] = []
    for i, ch in enumerate(a):
        for j in range(max(0, i - window), min(len(b), i + window + 1)):
            if not matched_b[j] and b[j] == ch:
                matched_b[j] = True
                matches_a.append(ch)
                break
    m = len(matches_a)
    if m == 0:
        return 0.0
    matches_b = [b[j] for j in range(len(b)) if matched_b[j]]
    transpositions = sum(x != y for x, y in zip(matches_a, matches_b, strict=True)) / 2
    jaro = (m / len(a) + m / len(b) + (m - transpositions) / m) / 3
    prefix = 0
    for x, y in zip(a[:4], b[:4], strict=False):
        if x != y:
            break
        prefix += 1
    return jaro + prefix * 0.1 * (1 - jaro)


def suggest(name: str, candidates: Iterable[str], threshold: float = 0.8) -> str | None:
    """The candidate most similar to ``name`` (case-insensitive), if similar enough."""
    best, score = None, threshold
    for candidate in sorted(set(candidates)):
        s = jaro_winkler(name.lower(), candidate.lower())
        if s > score:
            best, score = candidate, s
    return best
