"""``baml-studio admin tokens …`` and ``admin keys …``: a thin shell over
:mod:`baml_studio.control.identity`.

``register(admin, open_registry)`` adds both groups to the ``admin`` group. ``open_registry(ctx)``
gets the running command's context and returns the token registry (the metastore):
``ctx.params["data"]`` is the ``--data`` directory and ``ctx.params["metastore_url"]`` the
optional ``--metastore URL`` of the ``tokens`` commands; it may close the registry with
``ctx.call_on_close``. The signing keys are ``DATA/control-keys.json`` (created on first use,
mode 0600).

Every command prints one JSON object on stdout. Exit codes, as for all of ``admin``: 0 success;
2 bad input (a usage error, an invalid id or lifetime, no such token or key, a revoked token to
rotate, the active key to retire, or a registry refusal such as an unknown tenant, environment
or deployment); 3 the key file or the registry is unavailable (unreadable, unreachable or busy).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from baml_studio.apierrors import ApiError
from baml_studio.cli_gateway import parse_ttl
from baml_studio.control.identity import (
    ControlKeys,
    IssuedToken,
    TokenIssuer,
    TokenLister,
    TokenRegistry,
    jwks_document,
)
from baml_studio.control.model import TokenRecord
from baml_studio.format.errors import BamlStudioError
from baml_studio.gateway.config import Scope
from baml_studio.gateway.tokens import KeyRing

EXIT_INPUT = 2
EXIT_UNAVAILABLE = 3
OpenRegistry = Callable[[click.Context], TokenRegistry]

DATA_OPTION = click.option(
    "--data",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="The control-plane directory (holds control-keys.json).",
)
METASTORE_OPTION = click.option(
    "--metastore",
    "metastore_url",
    metavar="URL",
    default=None,
    help="The metastore holding the token registry (default: the one under --data).",
)


def register(admin: click.Group, open_registry: OpenRegistry) -> None:
    """Add ``tokens`` and ``keys`` to ``admin``; tokens are recorded in ``open_registry(ctx)``."""
    admin.add_command(tokens_group(open_registry))
    admin.add_command(keys_group())


@contextmanager
def _cli_errors() -> Iterator[None]:
    """Library errors as one line on stderr and the documented exit code."""
    try:
        yield
    except (BamlStudioError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(_exit_code(exc)) from exc


def _exit_code(exc: Exception) -> int:
    if isinstance(exc, ApiError):
        return EXIT_UNAVAILABLE if exc.retryable or exc.status >= 500 else EXIT_INPUT
    if isinstance(exc, OSError):
        return EXIT_UNAVAILABLE
    return EXIT_UNAVAILABLE if getattr(exc, "transient", False) else EXIT_INPUT


def _echo(document: dict[str, Any]) -> None:
    click.echo(json.dumps(document, sort_keys=True))


def _issuer(ctx: click.Context, open_registry: OpenRegistry) -> TokenIssuer:
    data: Path = ctx.params["data"]
    return TokenIssuer(ControlKeys.in_dir(data).ring, open_registry(ctx))


def _ttl(text: str | None) -> int | None:
    return None if text is None else parse_ttl(text)


def _record_json(record: TokenRecord) -> dict[str, Any]:
    return {
        "token_id": record.token_id,
        "kind": record.kind.value,
        "tenant": record.tenant_id,
        "project": record.project_id,
        "environments": list(record.environments),
        "erasure": record.erasure,
        "deployment": record.deployment_id,
        "cell": record.cell,
        "issued_at": record.issued_at,
        "expires_at": record.expires_at,
        "revoked_at": record.revoked_at,
        "replaces": record.replaces,
    }


def tokens_group(open_registry: OpenRegistry) -> click.Group:
    """The ``tokens`` group, recording in ``open_registry(ctx)``."""

    @click.group("tokens")
    def tokens() -> None:
        """Issue, rotate, revoke and list control-plane tokens (user, publisher, workload).

        Example: baml-studio admin tokens issue publisher --data ./control --tenant tn_acme
        --project prj_billing --environment env_prod
        """

    @tokens.group("issue")
    def issue() -> None:
        """Issue a token; prints {token, token_id, kind, expires_at} (with -q the token alone,
        for TOKEN=$(...) in a shell). The token is shown once.

        Example: baml-studio admin tokens issue workload --data ./control --tenant tn_acme
        --deployment dep_byoc1 --cell cell_eu1
        """

    def emit(issued: IssuedToken, quiet: bool) -> None:
        if quiet:
            click.echo(issued.token)
        else:
            _echo(issued.as_json())

    quiet_option = click.option(
        "-q", "--quiet", is_flag=True, help="Print the token alone (for TOKEN=$(...) in a shell)."
    )

    @issue.command("user")
    @DATA_OPTION
    @quiet_option
    @METASTORE_OPTION
    @click.option("--tenant", required=True, help="Tenant id.")
    @click.option("--project", required=True, help="Project id.")
    @click.option("--environment", "environments", multiple=True, required=True, help="Repeatable.")
    @click.option("--erasure", is_flag=True, help="Also allow POST /v1/erasures.")
    @click.option("--ttl", default="8h", show_default=True, help="Lifetime, at most 24h.")
    @click.pass_context
    def issue_user(
        ctx: click.Context,
        data: Path,
        metastore_url: str | None,
        tenant: str,
        project: str,
        environments: tuple[str, ...],
        erasure: bool,
        ttl: str,
        quiet: bool,
    ) -> None:
        """Issue a user token (Studio, the CLI, an agent) for environments of one project.

        Example: baml-studio admin tokens issue user --data ./control --tenant tn_acme
        --project prj_billing --environment env_prod --environment env_dev --ttl 8h
        """
        seconds = parse_ttl(ttl)
        with _cli_errors():
            emit(
                _issuer(ctx, open_registry).issue_user(
                    tenant, project, environments, erasure, seconds
                ),
                quiet,
            )

    @issue.command("publisher")
    @DATA_OPTION
    @quiet_option
    @METASTORE_OPTION
    @click.option("--tenant", required=True, help="Tenant id.")
    @click.option("--project", required=True, help="Project id.")
    @click.option("--environment", required=True, help="Environment id (one per token).")
    @click.option("--ttl", default="90d", show_default=True, help="Lifetime, at most 366d.")
    @click.pass_context
    def issue_publisher(
        ctx: click.Context,
        data: Path,
        metastore_url: str | None,
        tenant: str,
        project: str,
        environment: str,
        ttl: str,
        quiet: bool,
    ) -> None:
        """Issue a publisher token for one environment (presented to the data-plane gateway).

        Example: baml-studio admin tokens issue publisher --data ./control --tenant tn_acme
        --project prj_billing --environment env_prod --ttl 90d
        """
        seconds = parse_ttl(ttl)
        try:
            scope = Scope(tenant, project, environment)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from exc
        with _cli_errors():
            emit(_issuer(ctx, open_registry).issue_publisher(scope, seconds), quiet)

    @issue.command("workload")
    @DATA_OPTION
    @quiet_option
    @METASTORE_OPTION
    @click.option("--tenant", required=True, help="Tenant id.")
    @click.option("--deployment", required=True, help="Deployment id.")
    @click.option("--cell", required=True, help="Cell the deployment runs in.")
    @click.option("--ttl", default="15m", show_default=True, help="Lifetime, at most 1h.")
    @click.pass_context
    def issue_workload(
        ctx: click.Context,
        data: Path,
        metastore_url: str | None,
        tenant: str,
        deployment: str,
        cell: str,
        ttl: str,
        quiet: bool,
    ) -> None:
        """Issue a workload token for a data-plane deployment (calls the workload API).

        Example: baml-studio admin tokens issue workload --data ./control --tenant tn_acme
        --deployment dep_byoc1 --cell cell_eu1 --ttl 15m
        """
        seconds = parse_ttl(ttl)
        with _cli_errors():
            issued = _issuer(ctx, open_registry).issue_workload(tenant, deployment, cell, seconds)
            emit(issued, quiet)

    @tokens.command("rotate")
    @DATA_OPTION
    @quiet_option
    @METASTORE_OPTION
    @click.argument("token_id")
    @click.option("--ttl", default=None, help="Lifetime of the new token (default: the old one's).")
    @click.pass_context
    def rotate(
        ctx: click.Context,
        data: Path,
        metastore_url: str | None,
        token_id: str,
        ttl: str | None,
        quiet: bool,
    ) -> None:
        """Issue a token with the same claims that replaces TOKEN_ID. The old token keeps
        working until you revoke it: deploy the new one everywhere, then revoke the old.

        Example: baml-studio admin tokens rotate --data ./control tok_01J8ZK3V5N4Q2W8X7Y6T5R4E3D
        """
        seconds = _ttl(ttl)
        with _cli_errors():
            emit(_issuer(ctx, open_registry).rotate(token_id, seconds), quiet)

    @tokens.command("revoke")
    @DATA_OPTION
    @METASTORE_OPTION
    @click.argument("token_id")
    @click.pass_context
    def revoke(ctx: click.Context, data: Path, metastore_url: str | None, token_id: str) -> None:
        """Revoke TOKEN_ID: the control plane refuses it at once, data planes within their
        revocation cache time (5 minutes by default). Revoking twice is harmless.

        Example: baml-studio admin tokens revoke --data ./control tok_01J8ZK3V5N4Q2W8X7Y6T5R4E3D
        """
        with _cli_errors():
            registry = open_registry(ctx)
            if registry.get_token(token_id) is None:
                click.echo(f"error: no token {token_id!r}; see 'admin tokens list'", err=True)
                raise SystemExit(EXIT_INPUT)
            newly = registry.revoke_token(token_id)
            record = registry.get_token(token_id)
        revoked_at = record.revoked_at if record is not None else None
        _echo({"token_id": token_id, "revoked_at": revoked_at, "already_revoked": not newly})

    @tokens.command("list")
    @DATA_OPTION
    @METASTORE_OPTION
    @click.option("--tenant", default=None, help="Only this tenant's tokens.")
    @click.option("--all", "include_revoked", is_flag=True, help="Include revoked tokens.")
    @click.pass_context
    def list_(
        ctx: click.Context,
        data: Path,
        metastore_url: str | None,
        tenant: str | None,
        include_revoked: bool,
    ) -> None:
        """List token records, oldest first (never the tokens themselves).

        Example: baml-studio admin tokens list --data ./control --tenant tn_acme --all
        """
        with _cli_errors():
            registry = open_registry(ctx)
            if not isinstance(registry, TokenLister):
                click.echo("error: this token registry cannot list its tokens", err=True)
                raise SystemExit(EXIT_UNAVAILABLE)
            records = registry.list_tokens(tenant, include_revoked)
        _echo({"tokens": [_record_json(record) for record in records]})

    return tokens


def _ring_json(ring: KeyRing) -> dict[str, Any]:
    return {"active": ring.active, "kids": [key.kid for key in ring.keys]}


def keys_group() -> click.Group:
    """The ``keys`` group: the control plane's signing keys."""

    @click.group("keys")
    def keys() -> None:
        """The control plane's Ed25519 signing keys (DATA/control-keys.json).

        Example: baml-studio admin keys rotate --data ./control
        """

    @keys.command("rotate")
    @DATA_OPTION
    def rotate(data: Path) -> None:
        """Add a new signing key and sign with it from now on; tokens of the old keys keep
        verifying until the keys are retired. Prints the active key id and all key ids.

        Example: baml-studio admin keys rotate --data ./control
        """
        with _cli_errors():
            _echo(_ring_json(ControlKeys.in_dir(data).rotate()))

    @keys.command("retire")
    @DATA_OPTION
    @click.argument("kid")
    def retire(data: Path, kid: str) -> None:
        """Remove key KID: every token it signed gets 401 (data planes: after their key cache
        time). The active key cannot be retired; rotate first.

        Example: baml-studio admin keys retire --data ./control k_0123456789abcdef
        """
        with _cli_errors():
            try:
                ring = ControlKeys.in_dir(data).retire(kid)
            except ValueError as exc:
                click.echo(f"error: {exc}", err=True)
                raise SystemExit(EXIT_INPUT) from exc
            _echo(_ring_json(ring))

    @keys.command("jwks")
    @DATA_OPTION
    def jwks(data: Path) -> None:
        """Print the public key set (what GET /.well-known/jwks.json serves).

        Example: baml-studio admin keys jwks --data ./control
        """
        with _cli_errors():
            _echo(jwks_document(ControlKeys.in_dir(data).ring()))

    return keys
