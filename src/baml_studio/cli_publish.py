"""``baml-studio publish``: ship a local profiler store to a data-plane gateway.

Exit codes: 0 shipped (``--once``: the flush completed; otherwise: stopped by Ctrl-C after a
final flush); 1 the flush failed and should be retried (gateway unreachable, throttled, a PUT
failed); 2 usage error; 3 the token was refused (401/403); 4 the flush finished with reported
problems (a segment or pack conflict, or a blocked plane), or the store cannot be read.
"""

from __future__ import annotations

import threading
from pathlib import Path

import click

from baml_studio.cli_tokens import header_text, token_or_file
from baml_studio.format.errors import BamlStudioError
from baml_studio.publisher import GatewayAuthError, Publisher, PublisherError, PublisherSettings
from baml_studio.tokenfile import TokenFile

EXIT_RETRY = 1
EXIT_AUTH = 3
EXIT_PROBLEMS = 4


@click.command("publish")
@click.option(
    "--store",
    required=True,
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="The profiles-v1 store directory, e.g. .baml/profiles-v1.",
)
@click.option("--gateway", required=True, help="Gateway base URL, e.g. http://127.0.0.1:8787.")
@click.option(
    "--token", envvar="BAML_PUBLISHER_TOKEN", callback=header_text, help="Publisher token (JWT)."
)
@click.option(
    "--token-file",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar="BAML_PUBLISHER_TOKEN_FILE",
    help="Instead of --token: a file holding it, read again whenever it changes (a token "
    "rotated while publish runs is used without a restart).",
)
@click.option("--once", is_flag=True, help="Run one flush and exit instead of running forever.")
def publish(
    store: Path, gateway: str, token: str | None, token_file: Path | None, once: bool
) -> None:
    """Ship closed profiler files to the customer's bucket through the gateway.

    Example: baml-studio publish --store .baml/profiles-v1 --gateway http://127.0.0.1:8787
    --token "$BAML_PUBLISHER_TOKEN" --once
    """
    try:
        settings = PublisherSettings(store, gateway)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--gateway'") from exc
    publisher = Publisher(store, gateway, _token(token, token_file), settings=settings)
    if once:
        try:
            report = publisher.flush()
        except GatewayAuthError as exc:
            raise _failure(f"token refused (401/403): {exc}", EXIT_AUTH) from exc
        except PublisherError as exc:
            if getattr(exc, "status", None) == 404:  # no such route: the URL, not the moment
                hint = f"; is --gateway {gateway} the data plane's base URL?"
                raise _failure(f"flush failed: {exc}{hint}", EXIT_RETRY) from exc
            raise _failure(f"flush failed, retry later: {exc}", EXIT_RETRY) from exc
        except (OSError, BamlStudioError) as exc:  # the store itself (a file where a dir goes)
            raise _failure(f"the store cannot be read: {exc}", EXIT_PROBLEMS) from exc
        click.echo(
            f"flush {report.flush_id}: {len(report.uploaded)} uploaded, {len(report.stored)} "
            f"already stored, {len(report.conflicts)} conflicts, {report.original_bytes} bytes"
        )
        for problem in report.problems:
            click.echo(f"problem: {problem.path}: {problem.reason}", err=True)
        if not report.complete:
            raise _failure("flush finished with problems (see above)", EXIT_PROBLEMS)
        return
    publisher.start()
    click.echo(f"publishing {store} to {gateway}; Ctrl-C to stop")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        publisher.close()


def _token(token: str | None, token_file: Path | None) -> str | TokenFile:
    found = token_or_file(token, token_file, option="--token")
    if found is None:
        raise click.UsageError("give --token or --token-file")
    return found


class _Failure(click.ClickException):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code

    @property
    def exit_code(self) -> int:  # type: ignore[override]  # reason: per-instance exit code
        return self.code


def _failure(message: str, code: int) -> click.ClickException:
    return _Failure(message, code)
