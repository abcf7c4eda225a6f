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


def header_text(
    ctx: click.Context | None, param: click.Parameter | None, value: str | None
) -> str | None:
    """A click callback for an option sent in an HTTP header (a token, an idempotency key, an
    environment id): printable ASCII, as HTTP/1.1 clients send (a pasted smart quote or a
    non-breaking space was a ``UnicodeEncodeError`` traceback)."""
    if value and (not value.isascii() or not value.isprintable()):
        raise click.BadParameter(
            "must be printable ASCII: it is sent in an HTTP header"
            f" (found {next(c for c in value if not c.isascii() or not c.isprintable())!r})"
        )
    return value


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
    if found:
        return found
    from_env = os.environ.get(WORKLOAD_TOKEN_ENV) or None  # an empty variable is unset
    try:
        return header_text(None, None, from_env)
    except click.BadParameter as exc:
        raise click.BadParameter(str(exc.message), param_hint=f"${WORKLOAD_TOKEN_ENV}") from exc
