"""``baml-studio up``: the control plane, the data plane (gateway and query coordinator) and
the projector on one machine, on the embedded defaults (:mod:`baml_studio.up`).

Exit codes: 0 stopped by SIGTERM or Ctrl-C; 1 internal error; 2 usage error; 4 a service
could not start, or exited while the stack ran (its log's tail is printed).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType

import click

from baml_studio.format.errors import BamlStudioError
from baml_studio.gateway.config import Scope
from baml_studio.up import DEFAULT_SCOPE, Stack, UpConfig, UpError, run

EXIT_UNAVAILABLE = 4


@click.command("up")
@click.option(
    "--data",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("baml-studio-data"),
    show_default=True,
    help="Directory of the whole stack (created if missing; a second up finds its data again).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--control-port", type=click.IntRange(1, 65535), default=8700, show_default=True,
    help="The control plane's port.",
)  # fmt: skip
@click.option(
    "--dataplane-port", type=click.IntRange(1, 65535), default=8787, show_default=True,
    help="The data plane's port: the gateway publishers ship to, and the query coordinator.",
)  # fmt: skip
@click.option(
    "--processes", type=click.IntRange(1, 64), default=1, show_default=True,
    help="Projector processes (each uses about one core).",
)  # fmt: skip
@click.option(
    "--scope",
    default=f"{DEFAULT_SCOPE.tenant}/{DEFAULT_SCOPE.project}/{DEFAULT_SCOPE.environment}",
    show_default=True,
    metavar="TENANT/PROJECT/ENVIRONMENT",
    help="The one scope provisioned, and the tokens' scope.",
)
def up(
    data: Path, host: str, control_port: int, dataplane_port: int, processes: int, scope: str
) -> None:
    """Run the whole hosted stack on this machine until SIGTERM or Ctrl-C: the control plane
    (SQLite metastore, chDB), the data plane (directory bucket, SQLite queue, the gateway and
    the query coordinator) and the projector (Lance), each in its own process, with one scope
    provisioned and its tokens in DATA/tokens (the workload token issued again every 30
    minutes). Studio in the browser is not part of it yet.

    Example: baml-studio up --data ./studio &  (then, once it prints "ready": baml-studio
    query --remote http://127.0.0.1:8787 --token "$(cat studio/tokens/user.token)" "SELECT
    count(*) FROM calls")
    """
    if control_port == dataplane_port:
        raise click.UsageError("--control-port and --dataplane-port must differ")
    config = UpConfig(data.resolve(), _scope(scope), host, control_port, dataplane_port, processes)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        click.echo(f"starting the stack under {config.data_dir} …", err=True)
        run(config, stop, on_ready=lambda stack: click.echo(_summary(config, stack)))
    except UpError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from exc
    except ValueError as exc:  # a bad control.json or dataplane.json, an id the metastore refuses
        raise click.UsageError(str(exc)) from exc
    except (BamlStudioError, OSError) as exc:
        click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from exc
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    click.echo("baml-studio up: stopped", err=True)


def _scope(text: str) -> Scope:
    parts = text.split("/")
    try:
        if len(parts) != 3:
            raise ValueError("three ids separated by '/'")
        return Scope(*parts)
    except ValueError as exc:
        raise click.BadParameter(
            f"{text!r} is not TENANT/PROJECT/ENVIRONMENT: {exc}", param_hint="'--scope'"
        ) from exc


def _show(scope: Scope) -> str:
    return f"{scope.tenant}/{scope.project}/{scope.environment}"


def _summary(config: UpConfig, stack: Stack) -> str:
    tokens = config.tokens_dir
    gateway = config.dataplane_url
    publisher_file = tokens / "publisher.token"
    user = f'"$(cat {tokens / "user.token"})"'
    eraser = f'"$(cat {tokens / "eraser.token"})"'
    pids = ", ".join(f"{name} {pid}" for name, pid in stack.pids.items())
    return "\n".join(
        [
            "baml-studio up: ready",
            f"  control plane  {config.control_url}",
            f"  data plane     {gateway} (gateway and query coordinator)",
            f"  projector      {config.projector_processes} process(es)",
            f"  scope          {_show(config.scope)}; tokens in {tokens}",
            f"  logs           {config.logs_dir}; pids {pids}",
            "ship a profiled application's calls here:",
            f"  export BAML_PUBLISH_GATEWAY={gateway} BAML_PUBLISH_TOKEN_FILE={publisher_file}",
            "or the synthetic workload:",
            "  baml-studio demo --store demo-store --executions 200",
            f"  baml-studio publish --store demo-store --gateway {gateway} --token-file "
            f"{publisher_file} --once",
            "then query it:",
            f"  baml-studio query --remote {gateway} --token {user} "
            '"SELECT fqn, count(*) AS calls FROM calls GROUP BY fqn"',
            "and erase a stream (its evidence, facts and private rows):",
            f"  baml-studio erase --remote {gateway} --token {eraser} --euid EUID --wait",
            "SIGTERM or Ctrl-C stops everything.",
        ]
    )
