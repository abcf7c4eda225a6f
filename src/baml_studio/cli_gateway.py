"""``baml-studio serve dataplane`` and ``baml-studio tokens``: a thin shell over
:mod:`baml_studio.gateway`. Register with ``main.add_command(serve)`` and
``main.add_command(tokens)``.

Exit codes: 0 success, 2 usage error (bad option or an unreadable ``dataplane.json``),
4 the data directory is unavailable (cannot be created, read or written).
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from baml_studio.gateway.config import Scope
from baml_studio.gateway.environments import EnvironmentsFile
from baml_studio.gateway.errors import KeyringError
from baml_studio.gateway.service import DataplaneConfig, load_dataplane_config
from baml_studio.gateway.tokens import MAX_TTL_SECONDS, KeyRingFile, mint_publisher_token

EXIT_UNAVAILABLE = 4
_TTL = re.compile(r"(\d+)([smhd]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}

DATA_OPTION = click.option(
    "--data",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="The data-plane directory (created if missing).",
)


def parse_ttl(text: str) -> int:
    """``90``, ``90s``, ``15m``, ``1h`` or ``7d`` as seconds."""
    match = _TTL.fullmatch(text.strip())
    if match is None:
        raise click.BadParameter(f"{text!r} is not a duration like 90s, 15m, 1h or 7d")
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if not 1 <= seconds <= MAX_TTL_SECONDS:
        raise click.BadParameter(f"{text!r} must be between 1s and {MAX_TTL_SECONDS // 86400}d")
    return seconds


@click.group()
def serve() -> None:
    """Run a long-lived service.

    Example: baml-studio serve dataplane --data ./dataplane --port 8787
    """


@serve.command("dataplane")
@DATA_OPTION
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8787, show_default=True, help="TCP port."
)
def serve_dataplane(data: Path, host: str, port: int) -> None:
    """Serve the upload gateway (publisher config, authorize, presigned PUTs) on the embedded
    defaults: a directory bucket and an SQLite projection queue under DATA, or S3 when
    DATA/dataplane.json configures it.

    Example: baml-studio serve dataplane --data ./dataplane --host 127.0.0.1 --port 8787
    """
    import uvicorn

    from baml_studio.gateway.service import open_dataplane

    config = _load_config(data, host, port)
    try:
        dataplane = open_dataplane(config)
    except OSError as exc:
        click.echo(f"error: data directory {data} is unavailable: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from exc
    click.echo(f"gateway on http://{host}:{port} (data {data})", err=True)
    try:
        uvicorn.run(dataplane.app, host=host, port=port, log_level="info", access_log=False)
    finally:
        dataplane.close()


@click.group()
def tokens() -> None:
    """Publisher tokens, signed with a local key until the control plane issues them.

    Example: baml-studio tokens mint --data ./dataplane --tenant t --project p --environment prod
    """


@tokens.command("mint")
@DATA_OPTION
@click.option("--tenant", required=True, help="Tenant id.")
@click.option("--project", required=True, help="Project id.")
@click.option("--environment", required=True, help="Environment id (one per token).")
@click.option("--ttl", default="1h", show_default=True, help="Lifetime: 90s, 15m, 1h, 7d.")
@click.option(
    "--provision/--no-provision",
    default=True,
    show_default=True,
    help="Also provision the environment's evidence prefix on this gateway.",
)
def mint(
    data: Path, tenant: str, project: str, environment: str, ttl: str, provision: bool
) -> None:
    """Print a publisher token for one environment. The signing key is created under
    DATA/keys/ on first use.

    Example: baml-studio tokens mint --data ./dataplane --tenant t --project p --environment prod
    """
    seconds = parse_ttl(ttl)
    try:
        scope = Scope(tenant, project, environment)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    config = DataplaneConfig(data_dir=data, public_base_url="http://127.0.0.1")
    try:
        ring = KeyRingFile(config.keys_path).load_or_create()
        if provision:
            EnvironmentsFile(config.environments_path).add(scope)
    except (OSError, KeyringError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from exc
    click.echo(mint_publisher_token(ring, scope, seconds))


@tokens.command("rotate")
@DATA_OPTION
@click.option(
    "--retire", "retire", default=None, help="Also remove this old key id (its tokens get 401)."
)
def rotate(data: Path, retire: str | None) -> None:
    """Add a new signing key and mint with it from now on; old tokens keep working until their
    key is retired. Prints the new key id.

    Example: baml-studio tokens rotate --data ./dataplane --retire k_0123456789abcdef
    """
    keys = KeyRingFile(DataplaneConfig(data_dir=data, public_base_url="http://x").keys_path)
    try:
        ring = keys.load_or_create().rotated()
        if retire is not None:
            ring = ring.without(retire)
        keys.save(ring)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    except (OSError, KeyringError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from exc
    click.echo(ring.active)


def _load_config(data: Path, host: str, port: int) -> DataplaneConfig:
    try:
        return load_dataplane_config(data, host=host, port=port)
    except (ValueError, TypeError) as exc:
        raise click.UsageError(f"{data}/dataplane.json: {exc}") from exc
    except OSError as exc:
        click.echo(f"error: data directory {data} is unavailable: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from exc
