"""``baml-studio query``: SQL over a local profiles-v1 store (reference facts §5.8).

Exit codes of this command:
    0  complete
    1  incomplete (some values were unavailable; see the outcome)
    2  invalid SQL, unknown table or column
    3  a budget ran out (--max-rows, --max-wall, …)
    4  cancelled
    5  internal error or a dependency is missing (for example, no store)
  130  interrupted (Ctrl-C)
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import click

OUTCOME_EXIT = {
    "complete": 0,
    "incomplete": 1,
    "budget_exhausted": 3,
    "cancelled": 4,
}
CELL_WIDTH = 60


def parse_duration(text: str) -> float:
    """``30s``, ``1500ms``, ``2m`` or a bare number of seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*", text)
    if match is None:
        raise click.BadParameter(f"expected a duration like 30s or 1500ms, got {text!r}")
    value = float(match.group(1))
    unit = match.group(2) or "s"
    return value / 1000 if unit == "ms" else value * 60 if unit == "m" else value


def _cell(value: Any) -> str:
    if value is None:
        text = "NULL"
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= CELL_WIDTH else text[: CELL_WIDTH - 1] + "…"


def failure_exit(outcome: dict[str, Any]) -> int:
    error = outcome.get("error") or {}
    code = error.get("code")
    if code == "invalid_sql":
        return 2
    if code == "E_QUERY_BUDGET_EXCEEDED":
        return 3
    if code == "cancelled":
        return 4
    return 5


def exit_code(outcome: dict[str, Any]) -> int:
    state = outcome.get("resultState")
    if state == "failed":
        return failure_exit(outcome)
    return OUTCOME_EXIT.get(str(state), 5)


@click.command("query")
@click.argument("sql", required=False)
@click.option(
    "--store",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The profiles-v1 store (default: $BAML_PROFILE_DIR or ./.baml/profiles-v1).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "jsonl"]),
    default="table",
    show_default=True,
    help="Output shape.",
)
@click.option("--schema", "show_schema", is_flag=True, help="Print the catalog schema as JSON.")
@click.option("--table", "table_name", default=None, help="With --schema: only this relation.")
@click.option("--explain", is_flag=True, help="Print the query plan instead of running it.")
@click.option(
    "--max-rows",
    type=click.IntRange(min=0),
    default=None,
    help="Stop after this many result rows (budget_exhausted).",
)
@click.option("--max-wall", default=None, help="Wall-time budget, e.g. 30s or 1500ms.")
@click.option(
    "--internal",
    is_flag=True,
    envvar="BAML_INTERNAL",
    help="Also expose processes, store_files and value_index.",
)
def query(
    sql: str | None,
    store: Path | None,
    fmt: str,
    show_schema: bool,
    table_name: str | None,
    explain: bool,
    max_rows: int | None,
    max_wall: str | None,
    internal: bool,
) -> None:
    """Run one SQL statement over a local store; rows stream, then one outcome.

    SQL is an argument, or `-` to read it from standard input.

    \b
    Example:
      baml-studio query --store demo-store \\
        "SELECT thread_id, status, total_errors FROM threads WHERE parent_thread_id IS NULL LIMIT 5"
      baml-studio query --store demo-store --format jsonl \\
        "SELECT call_id, output FROM calls WHERE args['customer']['age'] >= 30"
    """
    from baml_studio.catalog.local import LocalStoreSource
    from baml_studio.query import QueryBudgets, QueryEngine, QueryError
    from baml_studio.store.config import resolve_store_root

    root = store if store is not None else resolve_store_root(Path.cwd(), os.environ)
    if not root.is_dir():
        click.echo(f"error: no store at {root} (run `baml-studio demo --store {root}`)", err=True)
        sys.exit(5)
    budgets = QueryBudgets()
    if max_rows is not None:
        budgets = dataclasses.replace(budgets, max_result_rows=max_rows)
    if max_wall is not None:
        budgets = dataclasses.replace(budgets, max_wall_s=parse_duration(max_wall))
    engine = QueryEngine(LocalStoreSource(root), budgets)
    try:
        _dispatch(engine, sql, fmt, internal, show_schema, table_name, explain)
    except QueryError as exc:
        outcome = {"resultState": "failed", "error": {"code": exc.code, "message": str(exc)}}
        click.echo(f"error: {exc}", err=True)
        sys.exit(failure_exit(outcome))
    except KeyboardInterrupt:
        sys.exit(130)


def _dispatch(
    engine: Any,
    sql: str | None,
    fmt: str,
    internal: bool,
    show_schema: bool,
    table_name: str | None,
    explain: bool,
) -> None:
    if show_schema:
        document = engine.schema_document(internal=internal)
        if table_name is not None:
            document["relations"] = [
                r for r in document["relations"] if table_name in (r["name"], r["alias"])
            ]
        click.echo(json.dumps(document, indent=2))
        return
    if sql is None:
        raise click.UsageError("give a SQL statement, or - to read it from standard input")
    if sql == "-":
        sql = sys.stdin.read()
    if explain:
        click.echo(engine.explain(sql, internal=internal))
        return
    _run(engine, sql, fmt, internal)


def _run(engine: Any, sql: str, fmt: str, internal: bool) -> None:
    result = engine.execute(sql, internal=internal)
    out = sys.stdout
    if fmt == "jsonl":
        for row in result:
            out.write(json.dumps(row, separators=(",", ":"), ensure_ascii=False) + "\n")
        outcome = result.outcome()
        out.write(json.dumps({"queryOutcome": outcome}, separators=(",", ":")) + "\n")
    elif fmt == "json":
        rows = list(result)
        outcome = result.outcome()
        document = {"version": 1, "rows": rows, "queryOutcome": outcome}
        out.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    else:
        columns = list(result.columns)
        if columns:
            out.write(" | ".join(columns) + "\n")
        for row in result:
            out.write(" | ".join(_cell(row.get(name)) for name in columns) + "\n")
        outcome = result.outcome()
        click.echo(json.dumps({"queryOutcome": outcome}), err=True)
    sys.exit(exit_code(outcome))
