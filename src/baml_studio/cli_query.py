"""``baml-studio query``: SQL over a local profiles-v1 store (reference facts §5.8), or over a
remote coordinator with ``--remote URL`` (``POST /v1/query``; openapi.yaml ``executeQuery``).

Exit codes of this command:
    0  complete
    1  incomplete (some values were unavailable; see the outcome). Remotely also a stream that
       broke before its outcome (error ``stream_incomplete``, see
       :mod:`baml_studio.coordinator.client`)
    2  invalid SQL, unknown table or column; a usage error; remotely any 400 answer
    3  a budget ran out (--max-rows, --max-wall, …)
    4  cancelled
    5  internal error or a dependency is missing (for example, no store); remotely 401, 403,
       503, any other HTTP error, or no answer
  130  interrupted (Ctrl-C)

Local and remote results are rendered by one function, :func:`render`, so the three formats have
one shape; one difference: a remote result announces its columns with its first row, so an empty
remote result in ``table`` format prints no header line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO, TypeVar

import click
from click.core import ParameterSource

from baml_studio.cli_tokens import header_text
from baml_studio.durations import parse_seconds
from baml_studio.tablecell import table_cell

if TYPE_CHECKING:
    from baml_studio.coordinator.client import CoordinatorClient, CoordinatorClientError
    from baml_studio.coordinator.run import RequestBudget

OUTCOME_EXIT = {
    "complete": 0,
    "incomplete": 1,
    "budget_exhausted": 3,
    "cancelled": 4,
}
CATALOG_VERSION = "v1"
MIB = 1 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class BudgetDefaults:
    """A remote request's budget where an option is not given."""

    rows: int
    wall: str
    """A duration as ``--max-wall`` takes it."""
    result_bytes: int
    private_bytes: int


REMOTE_DEFAULTS = BudgetDefaults(10_000, "30s", 64 * MIB, 256 * MIB)
"""``query --remote``: the local engine's row and wall defaults; results up to 64 MiB."""
F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound="CoordinatorClient")
FORMATS = ("table", "json", "jsonl")


class StreamedResult(Protocol):
    """What :func:`render` reads: a local ``QueryResult`` or a remote ``RemoteResult``."""

    @property
    def columns(self) -> Sequence[str]: ...

    def __iter__(self) -> Iterator[dict[str, Any]]: ...

    def outcome(self) -> dict[str, Any]: ...


def parse_duration(text: str) -> float:
    """Seconds: ``30s``, ``1500ms``, ``2m``, a bare number of seconds (:mod:`.durations`);
    zero is allowed (a poll interval of ``0`` polls without pausing)."""
    try:
        return parse_seconds(text, zero=True)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 10**3, "m": MIB, "mib": MIB}
_SIZE_UNITS |= {"mb": 10**6, "g": 1 << 30, "gib": 1 << 30, "gb": 10**9}


def parse_size(text: str) -> int:
    """``8MiB``, ``64M`` (binary), ``500MB`` (decimal), ``1GiB`` or a bare number of bytes:
    ASCII digits (``int`` alone would take other digits, and raise past 4,300 of them), at
    most :data:`MAX_SIZE` bytes."""
    match = re.fullmatch(r"\s*([0-9]{1,19})\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS:
        raise click.BadParameter(f"expected a size like 8MiB, 64M or 1048576, got {text!r:.80}")
    size = int(match.group(1)) * _SIZE_UNITS[unit]
    if size > MAX_SIZE:
        raise click.BadParameter(f"{text!r} is more than {MAX_SIZE} bytes (2^63 - 1)")
    return size


MAX_SIZE = (1 << 63) - 1
"""The largest size an option takes: a budget is a signed 64-bit count of bytes."""


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


def format_option(default: str, help: str) -> Callable[[F], F]:
    """``--format`` (``fmt``): one of :data:`FORMATS`, as :func:`render` writes them."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default=default,
        show_default=True,
        help=help,
    )


def remote_option(required: bool) -> Callable[[F], F]:
    return click.option(
        "--remote",
        metavar="URL",
        required=required,
        default=None,
        help="The coordinator's base URL, e.g. https://data-plane.example.com.",
    )


TOKEN_OPTION = click.option(
    "--token",
    envvar="BAML_USER_TOKEN",
    default=None,
    callback=header_text,
    help="The user token for --remote (default: $BAML_USER_TOKEN).",
)
ENVIRONMENT_OPTION = click.option(
    "--environment",
    metavar="ID",
    default=None,
    callback=header_text,
    help="With --remote: the environment to query (needed when the token allows several).",
)
MAX_BYTES_OPTION = click.option(
    "--max-bytes",
    default=None,
    help="With --remote: result-size budget, e.g. 64MiB (default: 64MiB for query, 1GiB for "
    "jobs start).",
)
MAX_PRIVATE_BYTES_OPTION = click.option(
    "--max-private-bytes",
    default=None,
    help="With --remote: private (Lance) bytes the query may read, e.g. 256MiB (default: 256MiB "
    "for query, 4GiB for jobs start).",
)


@click.command("query")
@click.argument("sql", required=False)
@click.option(
    "--store",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The profiles-v1 store (default: $BAML_PROFILE_DIR or ./.baml/profiles-v1).",
)
@format_option("table", "Output shape.")
@click.option("--schema", "show_schema", is_flag=True, help="Print the catalog schema as JSON.")
@click.option(
    "--table", "table_name", default=None, help="With --schema: only this relation or view."
)
@click.option("--explain", is_flag=True, help="Print the query plan instead of running it.")
@click.option(
    "--max-rows",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after this many result rows (budget_exhausted). Remote default: 10000.",
)
@click.option(
    "--max-wall", default=None, help="Wall-time budget, e.g. 30s or 1500ms. Remote default: 30s."
)
@MAX_BYTES_OPTION
@MAX_PRIVATE_BYTES_OPTION
@click.option(
    "--internal",
    is_flag=True,
    envvar="BAML_INTERNAL",
    help="Also expose processes, store_files and value_index.",
)
@remote_option(required=False)
@TOKEN_OPTION
@ENVIRONMENT_OPTION
@click.pass_context
def query(
    ctx: click.Context,
    sql: str | None,
    store: Path | None,
    fmt: str,
    show_schema: bool,
    table_name: str | None,
    explain: bool,
    max_rows: int | None,
    max_wall: str | None,
    max_bytes: str | None,
    max_private_bytes: str | None,
    internal: bool,
    remote: str | None,
    token: str | None,
    environment: str | None,
) -> None:
    """Run one SQL statement over a local store or a remote coordinator; rows stream, then
    one outcome.

    SQL is an argument, or `-` to read it from standard input. With --remote URL the query runs
    on the coordinator (POST /v1/query) with --token (or $BAML_USER_TOKEN); formats and exit
    codes are the same. A remote stream that ends without its outcome is incomplete (exit 1).

    \b
    Example:
      baml-studio query --store demo-store \\
        "SELECT thread_id, status, total_errors FROM threads WHERE parent_thread_id IS NULL LIMIT 5"
      baml-studio query --store demo-store --format jsonl \\
        "SELECT call_id, output FROM calls WHERE args['customer']['age'] >= 30"
      baml-studio query --remote https://data-plane.example.com --token "$TOKEN" \\
        --max-wall 10s --max-bytes 8MiB "SELECT call_id, fqn FROM calls_v1 LIMIT 10"
    """
    _check_options(ctx, remote)
    if remote is not None:
        from baml_studio.coordinator.client import CoordinatorClient

        if sql is None:
            raise click.UsageError("give a SQL statement, or - to read it from standard input")
        if sql == "-":
            sql = sys.stdin.read()
        budget = remote_budget(max_rows, max_wall, max_bytes, max_private_bytes, REMOTE_DEFAULTS)
        with session(remote, token, CoordinatorClient) as client:
            sys.exit(_run_remote(client, sql, fmt, budget, environment))
    from baml_studio.catalog.local import LocalStoreSource
    from baml_studio.cli_paths import require_store
    from baml_studio.format.errors import BamlStudioError
    from baml_studio.query import QueryBudgets, QueryEngine, QueryError
    from baml_studio.store.config import resolve_store_root

    root = store if store is not None else resolve_store_root(Path.cwd(), os.environ)
    require_store(root, 5)
    budgets = QueryBudgets()
    if max_rows is not None:
        budgets = dataclasses.replace(budgets, max_result_rows=max_rows)
    if max_wall is not None:
        wall = parse_duration(max_wall)
        if wall <= 0:
            raise click.BadParameter("must be more than 0s", param_hint="'--max-wall'")
        budgets = dataclasses.replace(budgets, max_wall_s=wall)
    try:
        engine = QueryEngine(LocalStoreSource(root), budgets)
        _dispatch(engine, sql, fmt, internal, show_schema, table_name, explain)
    except QueryError as exc:
        outcome = {"resultState": "failed", "error": {"code": exc.code, "message": str(exc)}}
        click.echo(f"error: {exc}", err=True)
        sys.exit(failure_exit(outcome))
    except BamlStudioError as exc:  # the store cannot be read (a file where a directory goes)
        click.echo(f"error: the store at {root} cannot be read: {exc}", err=True)
        sys.exit(5)
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
        if table_name is not None:  # a relation or a view, by name or alias
            known = [*document["relations"], *document["views"]]
            for part in ("relations", "views"):
                document[part] = [
                    r for r in document[part] if table_name in (r["name"], r["alias"])
                ]
            if not document["relations"] and not document["views"]:
                names = ", ".join(sorted(r["alias"] or r["name"] for r in known))
                raise click.BadParameter(
                    f"no relation or view {table_name!r}; they are: {names}",
                    param_hint="'--table'",
                )
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
    outcome = render(result, fmt)
    sys.exit(exit_code(outcome))


def render(result: StreamedResult, fmt: str, out: TextIO | None = None) -> dict[str, Any]:
    """Write ``result`` to ``out`` (default: standard output) in ``fmt`` (``table``, ``json``
    or ``jsonl``); return its outcome. ``table`` writes the outcome to standard error."""
    out = out if out is not None else sys.stdout
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
            out.write(" | ".join(table_cell(row.get(name)) for name in columns) + "\n")
        outcome = result.outcome()
        click.echo(json.dumps({"queryOutcome": outcome}), err=True)
    return outcome


_LOCAL_ONLY = ("store", "show_schema", "table_name", "explain", "internal")
_REMOTE_ONLY = ("environment", "max_bytes", "max_private_bytes")


def _check_options(ctx: click.Context, remote: str | None) -> None:
    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE

    if remote is not None and given("store"):
        raise click.UsageError("--store and --remote are mutually exclusive: choose one")
    if remote is not None and any(given(name) for name in _LOCAL_ONLY):
        raise click.UsageError(
            "--schema, --table, --explain and --internal work on a local store only; "
            "drop them or --remote (remotely, SELECT * FROM baml_columns lists the catalog)"
        )
    if remote is None and any(given(name) for name in _REMOTE_ONLY):
        raise click.UsageError(
            "--environment, --max-bytes and --max-private-bytes need --remote URL"
        )


def remote_budget(
    max_rows: int | None,
    max_wall: str | None,
    max_bytes: str | None,
    max_private_bytes: str | None,
    defaults: BudgetDefaults,
) -> RequestBudget:
    """The request's ``QueryBudget`` from the options, each absent one from ``defaults``."""
    from baml_studio.coordinator.run import RequestBudget

    rows = defaults.rows if max_rows is None else max_rows
    wall_ms = round(parse_duration(max_wall or defaults.wall) * 1000)
    size = defaults.result_bytes if max_bytes is None else parse_size(max_bytes)
    private = defaults.private_bytes if max_private_bytes is None else parse_size(max_private_bytes)
    if rows < 1 or wall_ms < 1 or size < 1:
        raise click.UsageError("--max-rows, --max-wall and --max-bytes must be at least 1")
    return RequestBudget(wall_ms, rows, size, private)


@contextlib.contextmanager
def session(remote: str, token: str | None, client_type: Callable[[str, str], C]) -> Iterator[C]:
    """A client (``client_type(remote, token)``: a :class:`CoordinatorClient`) of the data plane
    at ``remote`` for the block, or a usage error naming the fix. A coordinator error in the
    block becomes its message and exit code (:func:`remote_failure`); Ctrl-C exit 130."""
    from baml_studio.coordinator.client import CoordinatorClientError

    if not token:
        raise click.UsageError("--remote needs a user token: give --token or set BAML_USER_TOKEN")
    try:
        client = client_type(remote, token)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--remote") from exc
    try:
        yield client
    except CoordinatorClientError as exc:
        sys.exit(remote_failure(exc))
    except KeyboardInterrupt:
        sys.exit(130)
    finally:
        client.close()


def remote_failure(exc: CoordinatorClientError) -> int:
    """Print ``exc`` on standard error; its exit code: 2 for a 400 (or ``invalid_sql``)
    answer, else 5."""
    from baml_studio.coordinator.client import CoordinatorError, CoordinatorUnavailable

    if isinstance(exc, CoordinatorError):
        click.echo(f"error: {exc.message} ({exc.code})", err=True)
        return 2 if exc.code == "invalid_sql" or exc.status == 400 else 5
    if isinstance(exc, CoordinatorUnavailable):
        click.echo(f"error: the data plane did not answer: {exc}", err=True)
        return 5
    click.echo(f"error: {exc}", err=True)
    return 5


def _run_remote(
    client: CoordinatorClient,
    sql: str,
    fmt: str,
    budget: RequestBudget,
    environment: str | None,
) -> int:
    from baml_studio.coordinator.client import CoordinatorClientError
    from baml_studio.coordinator.run import QueryRequest

    request = QueryRequest(sql, (), CATALOG_VERSION, budget, "interactive", environment)
    try:
        result = client.query(request)
    except CoordinatorClientError as exc:
        return remote_failure(exc)
    with result:
        outcome = render(result, fmt)
    return exit_code(outcome)
