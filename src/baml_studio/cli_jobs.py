"""``baml-studio jobs``: background query jobs on a remote coordinator (openapi.yaml
``createQueryJob``, ``getQueryJob``, ``cancelQueryJob``, ``getQueryJobResult``).

Every subcommand takes ``--remote URL`` and ``--token T`` (or ``$BAML_USER_TOKEN``). A job is
printed as its ``QueryJob`` JSON on standard output.

Exit codes:
    0  done (``watch``: the job succeeded; ``download``: a complete result)
    1  ``download``: the result is incomplete, or its stream broke before the outcome
    2  usage error; invalid SQL (a 400 answer to ``start``, or a job that failed on it)
    3  ``watch``: the job failed on a budget; ``download``: the result's budget ran out
    4  ``watch``: the job was cancelled
    5  the job failed otherwise; an HTTP error (401, 403, 404, 409 before success, 503, …);
       no answer from the coordinator
  130  interrupted (Ctrl-C; ``watch`` stops watching, the job keeps running)
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from baml_studio.cli_query import (
    CATALOG_VERSION,
    ENVIRONMENT_OPTION,
    MAX_BYTES_OPTION,
    MAX_PRIVATE_BYTES_OPTION,
    MIB,
    TOKEN_OPTION,
    BudgetDefaults,
    F,
    exit_code,
    failure_exit,
    format_option,
    parse_duration,
    remote_budget,
    remote_option,
    render,
    session,
)
from baml_studio.cli_tokens import header_text

if TYPE_CHECKING:
    from baml_studio.coordinator.client import CoordinatorClient

JOB_DEFAULTS = BudgetDefaults(1_000_000, "10m", 1024 * MIB, 4096 * MIB)
"""``jobs start``: a background job has no interactive limit, so larger defaults."""
PROGRESS_STEPS = 1000
MAX_POLL_FAILURES = 5
"""``watch`` tolerates this many consecutive retryable poll failures (429, 503, no answer)."""
RUNNING_STATES = frozenset({"queued", "running"})


@click.group("jobs")
def jobs() -> None:
    """Background query jobs on a remote coordinator: start, status, watch, cancel, download.

    Example: JOB=$(baml-studio jobs start --remote https://dp.example.com -q "SELECT …")
    """


def _client(remote: str, token: str | None) -> contextlib.AbstractContextManager[CoordinatorClient]:
    """The client for a block (:func:`~baml_studio.cli_query.session`)."""
    from baml_studio.coordinator.client import CoordinatorClient

    return session(remote, token, CoordinatorClient)


def _job_command(name: str) -> Callable[[F], click.Command]:
    """``jobs NAME JOB --remote URL [--token T]`` running the decorated function."""

    def decorate(function: F) -> click.Command:
        function = TOKEN_OPTION(function)
        function = remote_option(required=True)(function)
        function = click.argument("job_id", metavar="JOB", callback=_job_id)(function)
        return jobs.command(name)(function)

    return decorate


MAX_JOB_ID = 256


def _job_id(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A job id as ``jobs start`` printed it: 1-256 printable ASCII characters, no ``/``, so it
    is one URL path segment (an empty id was a ``ValueError`` traceback, a very long one an
    ``InvalidURL``)."""
    if not (0 < len(value) <= MAX_JOB_ID) or "/" in value:
        raise click.BadParameter(
            f"a job id is 1-{MAX_JOB_ID} characters without '/', e.g. job_01J…"
        )
    header_text(ctx, param, value)
    return value


def _print_job(job: dict[str, Any]) -> None:
    click.echo(json.dumps(job, indent=2, ensure_ascii=False))


@jobs.command("start")
@click.argument("sql")
@remote_option(required=True)
@TOKEN_OPTION
@ENVIRONMENT_OPTION
@click.option(
    "--max-rows",
    type=click.IntRange(min=1),
    default=None,
    help="Result-row budget (default 1000000).",
)
@click.option("--max-wall", default=None, help="Wall-time budget, e.g. 10m (default 10m).")
@MAX_BYTES_OPTION
@MAX_PRIVATE_BYTES_OPTION
@click.option(
    "--idempotency-key",
    default=None,
    callback=header_text,
    help="Resend with the same key to get the same job back (default: a fresh key).",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only the job id.")
def start(
    sql: str,
    remote: str,
    token: str | None,
    environment: str | None,
    max_rows: int | None,
    max_wall: str | None,
    max_bytes: str | None,
    max_private_bytes: str | None,
    idempotency_key: str | None,
    quiet: bool,
) -> None:
    """Start a background query job (POST /v1/query-jobs); print the job, or its id with -q.

    SQL is an argument, or `-` to read it from standard input. Budget defaults: 1000000 rows,
    10m, 1GiB of result, 4GiB of private reads.

    \b
    Example:
      baml-studio jobs start --remote https://data-plane.example.com --token "$TOKEN" -q \\
        "SELECT fqn, count(*) FROM calls_v1 GROUP BY fqn"
    """
    from baml_studio.coordinator.run import QueryRequest

    if sql == "-":
        sql = sys.stdin.read()
    budget = remote_budget(max_rows, max_wall, max_bytes, max_private_bytes, JOB_DEFAULTS)
    request = QueryRequest(sql, (), CATALOG_VERSION, budget, "background", environment)
    with _client(remote, token) as client:
        job = client.create_job(request, idempotency_key)
    if quiet:
        click.echo(job["job_id"])
    else:
        _print_job(job)


@_job_command("status")
def status(job_id: str, remote: str, token: str | None) -> None:
    """Print a job's state, progress, rows so far and snapshot (GET /v1/query-jobs/JOB).

    \b
    Example:
      baml-studio jobs status --remote https://data-plane.example.com --token "$TOKEN" "$JOB"
    """
    with _client(remote, token) as client:
        _print_job(client.get_job(job_id))


@_job_command("cancel")
def cancel(job_id: str, remote: str, token: str | None) -> None:
    """Cancel a queued or running job (DELETE /v1/query-jobs/JOB); print it afterwards.

    A job already in a final state comes back unchanged; cancelling twice is harmless.

    \b
    Example:
      baml-studio jobs cancel --remote https://data-plane.example.com --token "$TOKEN" "$JOB"
    """
    with _client(remote, token) as client:
        _print_job(client.cancel_job(job_id))


@_job_command("watch")
@click.option("--interval", default="1s", show_default=True, help="Time between polls, e.g. 500ms.")
def watch(job_id: str, remote: str, token: str | None, interval: str) -> None:
    """Poll a job with a progress bar on standard error until it ends; print the final job.

    Exit 0 succeeded, 3 failed on a budget, 4 cancelled, 5 failed otherwise. Ctrl-C stops
    watching; the job keeps running (see `jobs cancel`).

    \b
    Example:
      baml-studio jobs watch --remote https://data-plane.example.com --token "$TOKEN" "$JOB" \\
        && baml-studio jobs download --remote https://data-plane.example.com "$JOB"
    """
    interval_s = parse_duration(interval)
    with _client(remote, token) as client:
        job = poll(client, job_id, interval_s)
    _print_job(job)
    error = job.get("error")
    if isinstance(error, dict):
        click.echo(f"error: {error.get('message')} ({error.get('code')})", err=True)
    sys.exit(job_exit(job))


def job_exit(job: dict[str, Any]) -> int:
    """The exit code of a job in a final state."""
    state = job.get("state")
    if state == "succeeded":
        return 0
    if state == "cancelled":
        return 4
    return failure_exit({"error": job.get("error")})


def poll(
    client: CoordinatorClient,
    job_id: str,
    interval_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """The job once it leaves ``queued``/``running``, drawing its progress on standard error."""
    job = _poll_once(client, job_id, sleep, interval_s)
    with click.progressbar(
        length=PROGRESS_STEPS,
        label=f"job {job_id}",
        file=sys.stderr,
        item_show_func=lambda text: text,
    ) as bar:
        while True:
            _advance(bar, job)
            if job.get("state") not in RUNNING_STATES:
                return job
            sleep(interval_s)
            job = _poll_once(client, job_id, sleep, interval_s)


def _poll_once(
    client: CoordinatorClient,
    job_id: str,
    sleep: Callable[[float], None],
    interval_s: float,
) -> dict[str, Any]:
    from baml_studio.coordinator.client import CoordinatorError, CoordinatorUnavailable

    failures = 0
    while True:
        try:
            return client.get_job(job_id)
        except (CoordinatorError, CoordinatorUnavailable) as exc:
            failures += 1
            transient = isinstance(exc, CoordinatorUnavailable) or exc.retryable
            if not transient or failures >= MAX_POLL_FAILURES:
                raise
            sleep(interval_s)


def _advance(bar: Any, job: dict[str, Any]) -> None:
    progress = job.get("progress")
    fraction = progress.get("fraction") if isinstance(progress, dict) else None
    phase = progress.get("phase") if isinstance(progress, dict) else None
    if job.get("state") == "succeeded":
        fraction = 1.0
    if not isinstance(fraction, int | float):
        fraction = 0.0
    target = round(min(max(float(fraction), 0.0), 1.0) * PROGRESS_STEPS)
    parts = (str(job.get("state")), phase, f"{job.get('rows_so_far', 0)} rows")
    text = " ".join(part for part in parts if isinstance(part, str) and part)
    bar.update(max(target - bar.pos, 0), text)


@_job_command("download")
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write here (atomically: a temp file renamed when complete) instead of stdout.",
)
@format_option("jsonl", "Output shape, as for `query`.")
def download(job_id: str, remote: str, token: str | None, output: Path | None, fmt: str) -> None:
    """Download a succeeded job's result (GET /v1/query-jobs/JOB/result), rows then outcome.

    Exit codes as for `query`: 0 complete, 1 incomplete (or the download broke), 3 budget.
    A job that has not succeeded yet is an error (409, exit 5).

    \b
    Example:
      baml-studio jobs download --remote https://data-plane.example.com --token "$TOKEN" \\
        "$JOB" --format json --output result.json
    """
    if output is not None and not output.parent.is_dir():
        raise click.BadParameter(f"{output.parent} is not a directory", param_hint="'--output'")
    with _client(remote, token) as client, client.job_result(job_id) as result:
        if output is None:
            outcome = render(result, fmt)
        else:
            try:
                with _atomic_text(output) as out:
                    outcome = render(result, fmt, out)
                    if _broke(outcome):  # rows without their outcome: not a result
                        raise _DownloadBroke
            except _DownloadBroke:
                click.echo(f"error: the download broke before its outcome; {output} not written",
                           err=True)  # fmt: skip
            except OSError as exc:
                click.echo(f"error: cannot write {output}: {exc}", err=True)
                sys.exit(5)
    sys.exit(exit_code(outcome))


class _DownloadBroke(Exception):
    """The result stream ended without its outcome: the temp file is discarded."""


def _broke(outcome: dict[str, Any]) -> bool:
    error = outcome.get("error")
    return isinstance(error, dict) and error.get("code") == "stream_incomplete"


@contextlib.contextmanager
def _atomic_text(path: Path) -> Iterator[TextIO]:
    """A text file that appears at ``path`` only when the block ends without error."""
    directory = path.parent if str(path.parent) else Path(".")
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
