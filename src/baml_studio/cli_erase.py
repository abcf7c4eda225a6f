"""``baml-studio erase``: erase streams through a remote data plane (openapi.yaml
``createErasure``, ``getErasure``; docs/erasure.md).

Exactly one selector: ``--euid`` (repeatable), ``--execution-id`` (repeatable), or ``--from``
and ``--to`` (a time range, RFC 3339; a time without offset is UTC). The erasure is printed as
its ``Erasure`` JSON on standard output.

Without ``--idempotency-key`` the key is derived from the environment and the selector, so
running the same command again returns the same erasure instead of starting another (pass a new
key to erase the same selection again).

Exit codes:
    0  the erasure was accepted (with ``--wait``: it succeeded)
    2  usage error; the data plane refused the request as invalid (400: a malformed selector, a
       stream or execution that is not in the token's scope)
    3  ``--wait``: the erasure failed (its error is printed on standard error)
    5  any other HTTP error (401, 403 without the erasure permission, 409 a reused key, 503 …)
       or no answer from the data plane
  130  interrupted (Ctrl-C; the erasure keeps running on the data plane)
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from baml_studio.cli_query import TOKEN_OPTION, parse_duration, session
from baml_studio.cli_tokens import header_text

if TYPE_CHECKING:
    from baml_studio.erasure.client import ErasureClient

EXIT_FAILED = 3
FINAL_STATES = frozenset({"succeeded", "failed"})


@click.command("erase")
@click.option("--remote", metavar="URL", required=True, help="The data plane's base URL.")
@TOKEN_OPTION
@click.option(
    "--environment", metavar="ID", default=None, callback=header_text,
    help="The environment to erase in (needed when the token grants several).",
)  # fmt: skip
@click.option("--euid", "euids", multiple=True, metavar="EUID", help="A stream (32 hex); repeat.")
@click.option(
    "--execution-id", "execution_ids", multiple=True, metavar="ID",
    help="An execution; its whole stream is erased. Repeat for several.",
)  # fmt: skip
@click.option("--from", "start", metavar="TIME", help="Time range start (RFC 3339), with --to.")
@click.option("--to", "end", metavar="TIME", help="Time range end (exclusive), with --from.")
@click.option(
    "--idempotency-key", default=None, callback=header_text,
    help="Resend with the same key to get the same erasure (default: derived from the request).",
)  # fmt: skip
@click.option("--wait", is_flag=True, help="Poll until the erasure ends; exit 3 if it failed.")
@click.option("--interval", default="1s", show_default=True, help="Time between polls.")
def erase_command(
    remote: str,
    token: str | None,
    environment: str | None,
    euids: tuple[str, ...],
    execution_ids: tuple[str, ...],
    start: str | None,
    end: str | None,
    idempotency_key: str | None,
    wait: bool,
    interval: str,
) -> None:
    """Erase whole streams: their evidence, facts and private rows (POST /v1/erasures).

    Needs a user token issued with the erasure permission. A selected execution erases the whole
    stream (process) that holds it; so does every execution starting or ending in a time range.

    \b
    Example:
      baml-studio erase --remote https://data-plane.example.com --token "$TOKEN" \\
        --euid 3f9c2b7e1a4d4c8e9b0f1e2d3c4b5a69 --wait
    """
    from baml_studio.erasure.client import ErasureClient

    selector = _selector(euids, execution_ids, start, end)
    interval_s = parse_duration(interval)
    key = idempotency_key or _derived_key(selector, environment)
    with session(remote, token, ErasureClient) as client:
        erasure = client.create_erasure(selector, key, environment)
        if wait:
            erasure = _poll(client, erasure, interval_s)
    click.echo(json.dumps(erasure, indent=2))
    if erasure.get("state") == "failed":
        error = erasure.get("error") or {}
        click.echo(f"error: {error.get('message')} ({error.get('code')})", err=True)
        sys.exit(EXIT_FAILED)


def _selector(
    euids: tuple[str, ...], execution_ids: tuple[str, ...], start: str | None, end: str | None
) -> dict[str, Any]:
    given = [bool(euids), bool(execution_ids), start is not None or end is not None]
    if sum(given) != 1:
        raise click.UsageError("give exactly one of --euid, --execution-id, or --from with --to")
    if euids:
        return {"process_euids": list(dict.fromkeys(euids))}
    if execution_ids:
        return {"execution_ids": list(dict.fromkeys(execution_ids))}
    if start is None or end is None:
        raise click.UsageError("a time range needs both --from and --to")
    return {"time_range": {"start": _time(start, "--from"), "end": _time(end, "--to")}}


def _time(text: str, option: str) -> str:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise click.BadParameter(
            f"{text!r} is not an RFC 3339 time (e.g. 2026-09-09T10:20:00Z)", param_hint=option
        ) from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.isoformat()


def _derived_key(selector: dict[str, Any], environment: str | None) -> str:
    canonical = json.dumps([environment, selector], sort_keys=True, separators=(",", ":"))
    return "cli-" + hashlib.sha256(canonical.encode()).hexdigest()[:40]


def _poll(client: ErasureClient, erasure: dict[str, Any], interval_s: float) -> dict[str, Any]:
    erasure_id = str(erasure["erasure_id"])
    with click.progressbar(
        length=max(1, int(erasure.get("streams_matched", 0))),
        label=f"erasure {erasure_id}",
        file=sys.stderr,
        item_show_func=lambda text: text,
    ) as bar:
        while True:
            done = int(erasure.get("streams_deleted", 0))
            bar.update(max(done - bar.pos, 0), str(erasure.get("state")))
            if erasure.get("state") in FINAL_STATES:
                return erasure
            time.sleep(interval_s)
            erasure = client.get_erasure(erasure_id)
