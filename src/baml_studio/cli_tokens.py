"""What the CLI's token options share: a bearer token given as text (``--token``) or as a file
read again whenever it changes (``--token-file``, :class:`~baml_studio.tokenfile.TokenFile`),
never both. The publisher's (``publish``) and the workload API's (``projector``, ``sweep``,
``replay``, ``compact``, ``serve dataplane``) options go through :func:`token_or_file`."""

from __future__ import annotations

import os
from pathlib import Path

import click

from baml_studio.tokenfile import TokenFile, TokenFileError

WORKLOAD_TOKEN_ENV = "BAML_WORKLOAD_TOKEN"
WORKLOAD_TOKEN_FILE_ENV = "BAML_WORKLOAD_TOKEN_FILE"


def token_or_file(
    token: str | None, token_file: Path | None, *, option: str
) -> str | TokenFile | None:
    """``option``'s token, or a :class:`TokenFile` over ``{option}-file``; ``None`` when
    neither is given. A usage error for both, a bad parameter for a file that holds no
    token."""
    if token_file is None:
        return token or None
    if token:
        raise click.UsageError(f"give {option} or {option}-file, not both")
    try:
        return TokenFile(token_file)
    except TokenFileError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{option}-file'") from exc


def optional_workload_token(
    token: str | None, token_file: Path | None, *, option: str
) -> str | TokenFile | None:
    """:func:`token_or_file`, else ``$BAML_WORKLOAD_TOKEN`` (a file, from ``{option}-file``
    or ``$BAML_WORKLOAD_TOKEN_FILE``, wins over it); ``None`` when no token is given at all."""
    found = token_or_file(token, token_file, option=option)
    return found or os.environ.get(WORKLOAD_TOKEN_ENV) or None  # an empty variable is unset
