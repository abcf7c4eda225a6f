"""Options shared by the data plane's background commands (``projector``, ``sweep``,
``replay``, ``compact``): the data-plane directory, the control plane and a workload token.

``--token`` may be left out when ``BAML_WORKLOAD_TOKEN`` is set (the CLI reads it once, here).
A workload token lives at most an hour, so a long-running ``projector`` takes ``--token-file``
(or ``BAML_WORKLOAD_TOKEN_FILE``) instead: the file is read again whenever it changes, so a
rotated token is used from the next request on (:mod:`baml_studio.tokenfile`).
Exit codes of these commands: 0 success, 1 internal error, 2 usage error, 4 a store, the queue
or the control plane is unavailable.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from baml_studio.cli_paths import dataset_root
from baml_studio.cli_tokens import (
    WORKLOAD_TOKEN_ENV,
    WORKLOAD_TOKEN_FILE_ENV,
    header_text,
    optional_workload_token,
)
from baml_studio.configfile import ConfigError
from baml_studio.format.errors import BamlStudioError
from baml_studio.gateway.service import load_dataplane_config
from baml_studio.projector.lance_store import DEFAULT_KEY_CACHE_KEYS
from baml_studio.projector.service import Projector, ProjectorConfig, open_projector
from baml_studio.tokenfile import TokenFile

EXIT_UNAVAILABLE = 4

Command = Callable[..., None]


def projector_options(command: Command) -> Command:
    """Add ``--data``, ``--control-plane``, ``--token``, ``--derived`` and
    ``--lance-key-cache`` to ``command`` and call it with a :class:`ProjectorConfig` as
    ``config``."""

    @functools.wraps(command)
    def run(
        *args: Any,
        data: Path,
        control_plane: str,
        token: str | None,
        token_file: Path | None,
        derived: str | None,
        lance_key_cache: int,
        **kwargs: Any,
    ) -> None:
        workload_token = _workload_token(token, token_file)
        try:
            dataplane = load_dataplane_config(data, host="127.0.0.1", port=8787)
        except (ConfigError, OSError) as exc:
            raise click.UsageError(f"data-plane configuration in {data}: {exc}") from exc
        config = ProjectorConfig(
            dataplane,
            control_plane,
            workload_token,
            derived_root=derived,
            lance_key_cache_keys=lance_key_cache,
        )
        command(*args, config=config, **kwargs)

    for option in (
        click.option(
            "--lance-key-cache",
            type=click.IntRange(min=0),
            default=DEFAULT_KEY_CACHE_KEYS,
            show_default=True,
            metavar="KEYS",
            help="Keys of Lance fragments remembered (one cache for all scopes) to check keys "
            "without a scan (about 150 bytes a key; 0: scan every time).",
        ),
        click.option(
            "--derived",
            default=None,
            callback=dataset_root,
            help="Root of the Lance datasets (default: "
            "DATA/derived/v1, or s3://BUCKET/derived/v1 on S3).",
        ),
        click.option(
            "--token-file",
            type=click.Path(path_type=Path, dir_okay=False),
            envvar=WORKLOAD_TOKEN_FILE_ENV,
            default=None,
            help=f"File holding the workload token, read again whenever it changes (or "
            f"${WORKLOAD_TOKEN_FILE_ENV}): for a service that outlives one token.",
        ),
        click.option(
            "--token",
            default=None,
            callback=header_text,
            help=f"Workload token (or ${WORKLOAD_TOKEN_ENV}).",
        ),
        click.option(
            "--control-plane",
            required=True,
            metavar="URL",
            help="Base URL of the control plane's workload API.",
        ),
        click.option(
            "--data",
            type=click.Path(path_type=Path, file_okay=False, exists=True),
            required=True,
            help="The data-plane directory (as for serve dataplane, which creates it).",
        ),
    ):
        run = option(run)
    return run


def _workload_token(token: str | None, token_file: Path | None) -> str | TokenFile:
    """``--token`` (else ``$BAML_WORKLOAD_TOKEN``), or a :class:`TokenFile` over
    ``--token-file`` (or ``$BAML_WORKLOAD_TOKEN_FILE``, which wins over
    ``$BAML_WORKLOAD_TOKEN``); a usage error for neither, both options, or a file that holds
    no token."""
    found = optional_workload_token(token, token_file, option="--token")
    if found is None:
        raise click.UsageError(
            f"give --token or --token-file, or set {WORKLOAD_TOKEN_ENV} or "
            f"{WORKLOAD_TOKEN_FILE_ENV}"
        )
    return found


def opened(config: ProjectorConfig) -> Projector:
    """The projector's stores, or exit 4 when they cannot be opened."""
    try:
        return open_projector(config)
    except (OSError, ValueError, BamlStudioError) as exc:
        click.echo(f"error: cannot open the data plane's stores: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from exc
