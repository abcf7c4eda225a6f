"""``baml-studio serve control``: a thin shell over :mod:`baml_studio.control`.

Register with ``serve.add_command(serve_control)`` on the ``serve`` group.

Exit codes: 0 success (also after a graceful stop on SIGTERM or SIGINT, once the stores are
closed), 2 usage error (bad option or an unreadable ``control.json``), 4 a store
is unavailable (data directory, metastore or fact store cannot be opened) or the server could
not start (its address in use, its TLS files unreadable).
"""

from __future__ import annotations

from pathlib import Path

import click

EXIT_UNAVAILABLE = 4


@click.command("control")
@click.option(
    "--data",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="The control-plane directory (created if missing).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8700, show_default=True, help="TCP port."
)
@click.option("--metastore", "metastore_url", help="SQLAlchemy URL (default: SQLite under DATA).")
@click.option("--facts", "facts_dsn", help="ClickHouse DSN (default: chdb:// under DATA).")
@click.option("--tls-cert", type=click.Path(path_type=Path, dir_okay=False), help="Server cert.")
@click.option("--tls-key", type=click.Path(path_type=Path, dir_okay=False), help="Server key.")
@click.option(
    "--client-ca",
    type=click.Path(path_type=Path, dir_okay=False),
    help="With --tls-cert: require workload client certificates signed by this CA (mTLS).",
)
def serve_control(
    data: Path,
    host: str,
    port: int,
    metastore_url: str | None,
    facts_dsn: str | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    client_ca: Path | None,
) -> None:
    """Serve the control plane's workload API (projection batches and erasures, projection
    schemas, query snapshots, resident queries, the public key set) on the embedded defaults:
    an SQLite metastore and chDB under DATA, or what --metastore, --facts or DATA/control.json
    name. Create tenants, environments, deployments and tokens with `baml-studio admin`.

    Example: baml-studio serve control --data ./control --port 8700
    """
    from baml_studio.configfile import ConfigError
    from baml_studio.control.app import create_app
    from baml_studio.control.config import ControlConfig
    from baml_studio.control.service import ControlPlane
    from baml_studio.control.tls import server_ssl_options
    from baml_studio.format.errors import BamlStudioError
    from baml_studio.servergc import tune_for_serving
    from baml_studio.serving import ServeFailed, serve_until_signalled

    try:
        config = ControlConfig.from_data_dir(data, metastore_url=metastore_url, facts_dsn=facts_dsn)
    except (ConfigError, OSError) as exc:
        raise click.UsageError(f"control configuration: {exc}") from exc
    if (tls_key or client_ca) and not tls_cert:
        raise click.UsageError("--tls-key and --client-ca need --tls-cert")
    ssl_options = {}
    if tls_cert is not None:
        if tls_key is None:
            raise click.UsageError("--tls-cert needs --tls-key")
        try:
            ssl_options = server_ssl_options(tls_cert, tls_key, client_ca)
        except (OSError, BamlStudioError) as exc:  # a missing or unreadable PEM file
            raise click.UsageError(f"TLS: {exc}") from exc
    try:
        control = ControlPlane.open(config)
    except (OSError, BamlStudioError) as exc:
        click.echo(f"error: cannot open the control plane's stores: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from exc
    except ValueError as exc:  # a fact store setting (--facts, control.json) it cannot use
        raise click.UsageError(f"control configuration: {exc}") from exc
    scheme = "https" if ssl_options else "http"
    click.echo(f"control plane on {scheme}://{host}:{port} (data {data})", err=True)
    try:
        serve_until_signalled(
            create_app(control, on_started=tune_for_serving),
            host=host,
            port=port,
            log_level="info",
            access_log=False,
            **ssl_options,
        )
    except ServeFailed as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from exc
    finally:
        counts = control.facts.stats.snapshot()
        control.close()
        click.echo(f"control plane stopped (stores closed); fact store: {counts}", err=True)
