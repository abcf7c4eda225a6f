"""``baml-studio serve dataplane``, ``baml-studio tokens`` and ``baml-studio setup``: a thin shell
over :mod:`baml_studio.gateway`. Register with ``main.add_command(serve)``,
``main.add_command(tokens)`` and ``main.add_command(setup)``.

Exit codes: 0 success (``serve dataplane`` also after a graceful stop on SIGTERM or SIGINT,
once its queue, store and workers are closed), 2 usage error (bad option, an unreadable
``dataplane.json`` or a malformed ``keys/presign.key``), 3 ``setup s3-notifications --verify``
found rules missing, 4 the data directory (or its key ring) or S3/SQS is unavailable (cannot be
created, read, parsed or written; S3/SQS did not answer), or the server could not start (its
address in use, its TLS files unreadable), 5 S3 or SQS refused the setup (missing
bucket, access denied, invalid queue name).

AWS queue policy: S3 sends to a queue only if the queue's policy allows ``sqs:SendMessage`` from
``s3.amazonaws.com`` with ``aws:SourceArn`` = ``arn:aws:s3:::<bucket>``, and AWS refuses to save
notification rules until it does (it sends an ``s3:TestEvent`` to check). ``setup
s3-notifications`` sets that policy (replacing any other policy on the queue); with
``--no-queue-policy`` set it yourself first, e.g. with the document printed by
``baml_studio.objectstore.s3_notifications.bucket_send_policy(queue_arn, bucket)``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from baml_studio.cli_paths import dataset_root
from baml_studio.cli_tokens import optional_workload_token
from baml_studio.configfile import ConfigError
from baml_studio.durations import parse_seconds
from baml_studio.format.errors import BamlStudioError
from baml_studio.gateway.config import Scope
from baml_studio.gateway.environments import EnvironmentsFile
from baml_studio.gateway.errors import KeyringError
from baml_studio.gateway.service import DataplaneConfig, load_dataplane_config
from baml_studio.gateway.tokens import MAX_TTL_SECONDS, KeyRingFile, mint_publisher_token
from baml_studio.objectstore.errors import InvalidArgument as ObjectStoreInvalidArgument
from baml_studio.servergc import tune_for_serving
from baml_studio.serving import ServeFailed, serve_until_signalled

EXIT_RULES_MISSING = 3
EXIT_UNAVAILABLE = 4
EXIT_REFUSED = 5

DATA_OPTION = click.option(
    "--data",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="The data-plane directory (created if missing).",
)


def parse_ttl(text: str) -> int:
    """``90``, ``90s``, ``15m``, ``1h`` or ``7d`` as whole seconds (:mod:`.durations`)."""
    try:
        seconds = round(parse_seconds(text))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
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
@click.option(
    "--setup-s3",
    is_flag=True,
    help="With S3 + SQS in dataplane.json: create the projection queue and its dead-letter "
    "queue and install the bucket's two notification rules before serving.",
)
@click.option(
    "--control-plane",
    "control_plane",
    metavar="URL",
    default=None,
    help="Verify publisher tokens with this control plane's public keys and revocation list "
    "(fetched and cached) instead of the local key file DATA/keys/publisher-keys.json.",
)
@click.option(
    "--workload-token",
    default=None,
    help="With --control-plane: the data plane's workload token; also serves the query "
    "coordinator (POST /v1/query, /v1/query-jobs). Default: $BAML_WORKLOAD_TOKEN.",
)
@click.option(
    "--workload-token-file",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar="BAML_WORKLOAD_TOKEN_FILE",
    default=None,
    help="Instead of --workload-token: a file holding it, read again whenever it changes "
    "(a workload token lives at most an hour). Default: $BAML_WORKLOAD_TOKEN_FILE.",
)
@click.option(
    "--derived",
    default=None,
    callback=dataset_root,
    help="Root of the Lance datasets the coordinator reads (default: DATA/derived/v1).",
)
@click.option(
    "--studio-origin",
    "studio_origins",
    multiple=True,
    help="Browser origin allowed by CORS (Studio), e.g. https://studio.example.com; repeatable.",
)
@click.option(
    "--cache-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="The coordinator's read cache on local disk (default: DATA/cache; disposable).",
)
@click.option("--tls-cert", type=click.Path(path_type=Path, dir_okay=False), help="Server cert.")
@click.option("--tls-key", type=click.Path(path_type=Path, dir_okay=False), help="Server key.")
def serve_dataplane(
    data: Path,
    host: str,
    port: int,
    setup_s3: bool,
    control_plane: str | None,
    workload_token: str | None,
    workload_token_file: Path | None,
    derived: str | None,
    studio_origins: tuple[str, ...],
    cache_dir: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
) -> None:
    """Serve the upload gateway (publisher config, authorize, presigned PUTs) on the embedded
    defaults: a directory bucket and an SQLite projection queue under DATA, or S3 + SQS when
    DATA/dataplane.json configures them (the notification rules are verified at start, or
    installed with --setup-s3). Publisher tokens verify with the local key file, or with the
    control plane's keys when --control-plane is given. With --control-plane and a workload
    token, the same process serves the query coordinator (POST /v1/query, the /v1/query-jobs
    routes) over the control plane's facts and the Lance datasets under --derived.

    Example: baml-studio serve dataplane --data ./dataplane --host 127.0.0.1 --port 8787
    --control-plane https://control.example.com --workload-token "$TOKEN"
    """
    from baml_studio.gateway.service import open_dataplane
    from baml_studio.objectstore.notifications import NotificationSetupError

    if control_plane is not None and not control_plane.startswith(("http://", "https://")):
        raise click.BadParameter(
            f"{control_plane!r} is not an http:// or https:// URL", param_hint="--control-plane"
        )
    token = optional_workload_token(workload_token, workload_token_file, option="--workload-token")
    if token is not None and control_plane is None:
        if workload_token or _given_on_command_line("workload_token_file"):
            raise click.UsageError("--workload-token needs --control-plane")
        # only $BAML_WORKLOAD_TOKEN or $BAML_WORKLOAD_TOKEN_FILE (set for the projector, say):
        # a gateway without a control plane has no use for it
        click.echo(
            "note: a workload token is set in the environment but --control-plane is not; "
            "serving the gateway without the query coordinator",
            err=True,
        )
        token = None
    config = _load_config(data, host, port, setup_s3, control_plane)
    try:
        dataplane = open_dataplane(config)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    except OSError as exc:
        click.echo(f"error: data directory {data} is unavailable: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from exc
    except KeyringError as exc:  # as tokens mint and rotate report it
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from exc
    except NotificationSetupError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE if exc.transient else EXIT_REFUSED) from exc
    except (ValueError, ObjectStoreInvalidArgument) as exc:  # a value in dataplane.json
        raise click.UsageError(f"dataplane configuration: {exc}") from exc
    except BamlStudioError as exc:  # a file under DATA: the queue's, the bucket's
        click.echo(f"error: data directory {data} is unusable: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from exc
    if token is not None:
        try:
            _attach_coordinator(dataplane, config, token, derived, studio_origins,
                                cache_dir or data / "cache")  # fmt: skip
        except ValueError as exc:  # the read cache's directory cannot be made
            dataplane.close()
            click.echo(f"error: {exc}", err=True)
            raise SystemExit(EXIT_UNAVAILABLE) from exc
        click.echo("query coordinator on /v1/query and /v1/query-jobs", err=True)
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together")
    ssl: dict[str, Any] = (
        {"ssl_certfile": str(tls_cert), "ssl_keyfile": str(tls_key)} if tls_cert else {}
    )
    if dataplane.notifications is not None and dataplane.notifications.missing:
        missing = ", ".join(dataplane.notifications.missing)
        click.echo(f"warning: bucket notification rules missing: {missing}", err=True)
    # the SQL parser under DataFusion traces statements (literals included) at DEBUG
    logging.getLogger("sqlparser").setLevel(logging.WARNING)
    scheme = "https" if ssl else "http"
    click.echo(f"gateway on {scheme}://{host}:{port} (data {data})", err=True)
    tune_for_serving()  # what startup built stays out of the collector's way
    try:
        serve_until_signalled(
            dataplane.app, host=host, port=port, log_level="info", access_log=False, **ssl
        )
    except ServeFailed as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from exc
    finally:
        dataplane.close()
        click.echo("gateway stopped (queue, store and workers closed)", err=True)


def _given_on_command_line(parameter: str) -> bool:
    """Whether the current command's ``parameter`` came from its command line (not from its
    environment variable or its default)."""
    source = click.get_current_context().get_parameter_source(parameter)
    return source is ParameterSource.COMMANDLINE


def _attach_coordinator(
    dataplane: Any,
    config: Any,
    workload_token: str | Callable[[], str],
    derived: str | None,
    origins: tuple[str, ...],
    cache_dir: Path,
) -> None:
    from baml_studio.coordinator.config import CoordinatorConfig
    from baml_studio.coordinator.wiring import CoordinatorSetup, attach_coordinator

    settings = CoordinatorConfig(cache_dir=cache_dir, studio_origins=origins)
    attach_coordinator(dataplane, config, CoordinatorSetup(workload_token, derived, settings))


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
    except (OSError, KeyringError, BamlStudioError) as exc:  # the environments file, too
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
        current = keys.load_or_create()
        if retire is not None and current.get(retire) is None:  # before a key is added
            raise ValueError(f"no key {retire!r} in the ring {[k.kid for k in current.keys]}")
        ring = current.rotated()
        if retire is not None:
            ring = ring.without(retire)
        keys.save(ring)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    except (OSError, KeyringError) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from exc
    click.echo(ring.active)


def _load_config(
    data: Path, host: str, port: int, setup_s3: bool = False, control_plane: str | None = None
) -> DataplaneConfig:
    try:
        return load_dataplane_config(
            data, host=host, port=port, setup_s3=setup_s3, control_plane_url=control_plane
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    except OSError as exc:
        click.echo(f"error: data directory {data} is unavailable: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from exc


@click.group()
def setup() -> None:
    """One-off setup of the cloud resources the data plane uses.

    Example: baml-studio setup s3-notifications --bucket evidence --queue baml-projection
    """


@setup.command("s3-notifications")
@click.option("--bucket", required=True, help="The evidence bucket (must exist).")
@click.option("--queue", required=True, help="SQS projection queue name (DLQ: <queue>-dlq).")
@click.option("--region", default="us-east-1", show_default=True, help="AWS region.")
@click.option("--endpoint-url", default=None, help="S3 endpoint for S3-compatible stores.")
@click.option("--sqs-endpoint-url", default=None, help="SQS endpoint (default: --endpoint-url).")
@click.option(
    "--queue-policy/--no-queue-policy",
    default=True,
    show_default=True,
    help="Let the bucket send to the queue (replaces the queue's policy; AWS needs it).",
)
@click.option("--verify", is_flag=True, help="Only check: create nothing, exit 3 if rules lack.")
def s3_notifications(
    bucket: str,
    queue: str,
    region: str,
    endpoint_url: str | None,
    sqs_endpoint_url: str | None,
    queue_policy: bool,
    verify: bool,
) -> None:
    """Create (or reconcile) the SQS projection queue and its dead-letter queue (redrive after 8
    receives), allow the bucket to send to it, and install the two rules that send
    s3:ObjectCreated events of meta segments and value packs (prefix evidence/v1/, suffix
    .bamlmeta.zst or .bamlpack.zst) to it. Prints the queue URLs, ARN and any missing rule as
    JSON. Credentials come from boto3's default chain (AWS_* variables, profiles, roles).

    Example: baml-studio setup s3-notifications --endpoint-url http://127.0.0.1:4566
    --bucket evidence --queue baml-projection
    """
    from baml_studio.gateway import service
    from baml_studio.objectstore.config import S3Config
    from baml_studio.objectstore.errors import InvalidArgument
    from baml_studio.objectstore.notifications import NotificationSetupError
    from baml_studio.objectstore.s3 import make_client
    from baml_studio.queue.config import SqsQueueConfig

    try:
        s3_config = S3Config(bucket=bucket, region=region, endpoint_url=endpoint_url)
        queue_config = SqsQueueConfig(
            name=queue, region=region, endpoint_url=sqs_endpoint_url or endpoint_url
        )
    except (ValueError, InvalidArgument) as exc:
        raise click.BadParameter(str(exc)) from exc
    try:
        s3_client = make_client(s3_config, endpoint_url)
        sqs_client = service.make_sqs_client(s3_config, queue_config)
    except ValueError as exc:  # botocore: an endpoint URL or a region it cannot use
        raise click.BadParameter(str(exc)) from exc
    try:
        if verify:
            status = service.verify_s3_notifications(s3_client, sqs_client, bucket, queue_config)
        else:
            status = service.setup_s3_notifications(
                s3_client, sqs_client, bucket, queue_config, queue_policy=queue_policy
            )
    except NotificationSetupError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE if exc.transient else EXIT_REFUSED) from exc
    report: dict[str, Any] = {
        "bucket": status.bucket,
        "queue_url": status.queue_url,
        "dead_letter_url": status.dead_letter_url,
        "queue_arn": status.queue_arn,
        "missing_rules": list(status.missing),
    }
    click.echo(json.dumps(report, indent=2))
    if status.missing:
        raise SystemExit(EXIT_RULES_MISSING)
