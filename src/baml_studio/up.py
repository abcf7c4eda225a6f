"""``baml-studio up``: the whole hosted stack on one machine, on the embedded defaults.

Under one directory ``DIR``::

    DIR/control/            serve control: SQLite metastore, chDB facts, the control key ring
    DIR/dataplane/          serve dataplane: directory bucket, SQLite queue, Lance under derived/v1
    DIR/tokens/             workload.token, publisher.token, user.token, eraser.token (each 0600,
                            one line; eraser: a user token with the erasure permission)
    DIR/logs/               control.log, dataplane.log, projector.log (each child's stderr)

:func:`provision` makes one scope (tenant, project, environment; ``local/default/dev`` unless
told otherwise) and a BYOC deployment ``local`` serving it, in the metastore and in the data
plane's environments file, each step only if missing, so a second ``up`` over the same
directory finds its data again. :class:`Tokens` issues the four tokens into ``DIR/tokens``
and issues each again at half its lifetime: a workload token lives at most an hour, so the
data plane and the projector read theirs from the file (``--workload-token-file``,
``--token-file``: :mod:`baml_studio.tokenfile`), and a user token at most a day. The user
token queries; only the eraser token (a user token with the erasure permission) can erase.

:class:`Stack` starts ``serve control``, then ``serve dataplane`` (gateway and query
coordinator, publisher tokens checked with the control plane's keys), then ``projector``, each
``python -m baml_studio.cli`` in its own process as deployed, waits for each HTTP service to
answer, then watches them: a child that exits ends the stack (:class:`ChildExited`, with the
tail of its log). :meth:`Stack.stop` stops them in the reverse order (SIGTERM, then SIGKILL
after ``stop_timeout_s``).

Exception tree (``UpError`` is a ``BamlStudioError``)::

    UpError
    ├── StartFailed     a child exited or did not answer before it was ready
    └── ChildExited     a child exited while the stack ran
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from baml_studio.format.errors import BamlStudioError
from baml_studio.gateway.config import Scope
from baml_studio.tokenfile import write_token_file

log = logging.getLogger(__name__)

DEPLOYMENT = "local"
CELL = "local"
WORKLOAD_TTL_S = 3600
"""A workload token's longest life (``control.identity.MAX_TTL_S``)."""
USER_TTL_S = 24 * 3600
PUBLISHER_TTL_S = 90 * 86400
START_TIMEOUT_S = 120.0
CLI = (sys.executable, "-m", "baml_studio.cli")
DEFAULT_SCOPE = Scope("local", "default", "dev")
LIFETIMES = {
    "workload": WORKLOAD_TTL_S,
    "user": USER_TTL_S,
    "eraser": USER_TTL_S,
    "publisher": PUBLISHER_TTL_S,
}
"""Seconds each token issued by :class:`Tokens` lives; it is issued again at half of it."""


class UpError(BamlStudioError):
    """``baml-studio up`` could not start or keep its stack."""


class StartFailed(UpError):
    """A child exited, or did not answer, before the stack was ready."""


def _check_port_free(name: str, host: str, port: int) -> None:
    """:class:`StartFailed` if something listens on ``host:port`` already: its answers would
    pass for the child's (``up`` said "ready" with another stack's control plane, then failed
    when its own child exited on the address in use)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind(address)
    except OSError as exc:
        raise StartFailed(
            f"the {name} cannot listen on {host}:{port} ({exc.strerror or exc}): is another "
            f"stack running? Stop it, or pick other ports with --control-port/--dataplane-port"
        ) from exc


class ChildExited(UpError):
    """A child exited while the stack ran."""


@dataclass(frozen=True, slots=True)
class UpConfig:
    """Where the stack lives and listens."""

    data_dir: Path
    """``DIR``: the layout in the module docstring."""
    scope: Scope = DEFAULT_SCOPE
    """The one tenant, project and environment provisioned."""
    host: str = "127.0.0.1"
    """Address both services listen on."""
    control_port: int = 8700
    dataplane_port: int = 8787
    projector_processes: int = 1
    """``projector --processes``."""
    stop_timeout_s: float = 30.0
    """How long each child has to stop after SIGTERM before SIGKILL."""

    @property
    def control_dir(self) -> Path:
        return self.data_dir / "control"

    @property
    def dataplane_dir(self) -> Path:
        return self.data_dir / "dataplane"

    @property
    def tokens_dir(self) -> Path:
        return self.data_dir / "tokens"

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def control_url(self) -> str:
        return f"http://{_url_host(self.host)}:{self.control_port}"

    @property
    def dataplane_url(self) -> str:
        return f"http://{_url_host(self.host)}:{self.dataplane_port}"

    def token_path(self, kind: str) -> Path:
        """``DIR/tokens/<kind>.token`` (``workload``, ``publisher``, ``user`` or ``eraser``)."""
        return self.tokens_dir / f"{kind}.token"


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def provision(config: UpConfig) -> None:
    """The scope, the deployment serving it and the data plane's environment, each made only
    if missing (metastore errors propagate as the metastore's typed errors)."""
    from baml_studio.control.config import ControlConfig
    from baml_studio.control.metastore import Metastore
    from baml_studio.control.metastore.errors import AlreadyExists
    from baml_studio.control.model import DeploymentKind
    from baml_studio.gateway.environments import EnvironmentsFile
    from baml_studio.gateway.service import load_dataplane_config

    for directory in (config.control_dir, config.dataplane_dir, config.logs_dir):
        directory.mkdir(parents=True, exist_ok=True)
    config.tokens_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    scope = config.scope
    control = ControlConfig.from_data_dir(config.control_dir)
    with Metastore.open(control.metastore_url) as metastore:
        for make in (
            lambda: metastore.create_tenant(scope.tenant),
            lambda: metastore.create_project(scope.tenant, scope.project),
            lambda: metastore.create_environment(scope.tenant, scope.project, scope.environment),
        ):
            with contextlib.suppress(AlreadyExists):
                make()
        if metastore.get_deployment(DEPLOYMENT) is None:
            metastore.create_deployment(
                DEPLOYMENT, DeploymentKind.BYOC, CELL, tenant_id=scope.tenant
            )
        if not metastore.deployment_serves(DEPLOYMENT, scope):
            metastore.assign_environment(DEPLOYMENT, scope)
    dataplane = load_dataplane_config(config.dataplane_dir, host="127.0.0.1", port=8787)
    environments = EnvironmentsFile(dataplane.environments_path)
    if not environments.is_provisioned(scope):
        environments.add(scope)


@dataclass
class Tokens:
    """The stack's four tokens in ``DIR/tokens``, each issued again at half its life."""

    config: UpConfig
    clock: Callable[[], float] = time.time
    issued_at: dict[str, float] = field(default_factory=dict)
    """When each kind was last written (this process's clock)."""

    def refresh(self, *, force: bool = False) -> list[str]:
        """Issue every token at least half its lifetime old (all of them with ``force``);
        the kinds written."""
        now = self.clock()
        due = [
            kind
            for kind, ttl in LIFETIMES.items()
            if force or now - self.issued_at.get(kind, float("-inf")) >= ttl / 2
        ]
        if due:
            self._issue(due, now)
        return due

    def _issue(self, kinds: Sequence[str], now: float) -> None:
        from baml_studio.control.config import ControlConfig
        from baml_studio.control.identity import ControlKeys, TokenIssuer
        from baml_studio.control.metastore import Metastore

        scope = self.config.scope
        control = ControlConfig.from_data_dir(self.config.control_dir)
        with Metastore.open(control.metastore_url) as metastore:
            issuer = TokenIssuer(ControlKeys(control.keys_path).ring, metastore)
            for kind in kinds:
                if kind == "workload":
                    issued = issuer.issue_workload(scope.tenant, DEPLOYMENT, CELL, WORKLOAD_TTL_S)
                elif kind in ("user", "eraser"):
                    issued = issuer.issue_user(
                        scope.tenant,
                        scope.project,
                        [scope.environment],
                        erasure=kind == "eraser",
                        ttl_s=USER_TTL_S,
                    )
                else:
                    issued = issuer.issue_publisher(scope, PUBLISHER_TTL_S)
                write_token_file(self.config.token_path(kind), issued.token)
                self.issued_at[kind] = now
                log.info("%s token written to %s", kind, self.config.token_path(kind))


Popen = subprocess.Popen[bytes]


@dataclass
class _Child:
    name: str
    process: Popen
    log_path: Path


class Stack:
    """The three services as child processes (see the module docstring)."""

    def __init__(self, config: UpConfig) -> None:
        self.config = config
        self.children: list[_Child] = []

    def start(self, stop: threading.Event | None = None) -> None:
        """Start control plane, data plane and projector in turn, each once the one before
        answers; :class:`StartFailed` (after stopping what started) if one cannot."""
        c = self.config
        control = ["--control-plane", c.control_url]
        gateway_ready = c.dataplane_url + "/v1/publisher/config"  # 401 without a token: up
        commands = [
            ("control", ["serve", "control", "--data", str(c.control_dir), "--host", c.host,
                         "--port", str(c.control_port)], c.control_url + "/healthz"),
            ("dataplane", ["serve", "dataplane", "--data", str(c.dataplane_dir), "--host", c.host,
                           "--port", str(c.dataplane_port), *control, "--workload-token-file",
                           str(c.token_path("workload"))], gateway_ready),
            ("projector", ["projector", "--data", str(c.dataplane_dir), *control, "--token-file",
                           str(c.token_path("workload")), "--processes",
                           str(c.projector_processes)], None),
        ]  # fmt: skip
        for name, port in (("control", c.control_port), ("dataplane", c.dataplane_port)):
            _check_port_free(name, c.host, port)
        try:
            for name, args, ready_url in commands:
                child = self._spawn(name, args)
                if ready_url is not None:
                    self._wait_ready(child, ready_url, stop)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name: str, args: list[str]) -> _Child:
        log_path = self.config.logs_dir / f"{name}.log"
        with open(log_path, "ab") as log_file:
            env = {k: v for k, v in os.environ.items() if not k.startswith("BAML_WORKLOAD_TOKEN")}
            with warnings.catch_warnings():  # the child runs a new interpreter at once
                warnings.filterwarnings("ignore", message="lance is not fork-safe")
                process = self._popen(args, log_file, env)
        child = _Child(name, process, log_path)
        self.children.append(child)
        return child

    @staticmethod
    def _popen(args: list[str], log_file: IO[bytes], env: dict[str, str]) -> Popen:
        return subprocess.Popen(
            [*CLI, *args],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            env={**env, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,  # a Ctrl-C at the terminal reaches ``up`` alone
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )

    def _wait_ready(self, child: _Child, url: str, stop: threading.Event | None) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        with httpx.Client(timeout=1.0) as client:
            while True:
                if child.process.poll() is not None:
                    raise StartFailed(_exited(child, "before it was ready"))
                with contextlib.suppress(httpx.TransportError):
                    if client.get(url).status_code < 500 and child.process.poll() is None:
                        return
                if stop is not None and stop.is_set():
                    raise StartFailed(f"stopped while {child.name} was starting")
                if time.monotonic() > deadline:
                    raise StartFailed(
                        f"{child.name} did not answer on {url} in {START_TIMEOUT_S:.0f} s; "
                        f"see {child.log_path}"
                    )
                time.sleep(0.1)  # readiness poll of a child process, bounded by the deadline

    def check(self) -> None:
        """:class:`ChildExited` if a child is no longer running."""
        for child in self.children:
            if child.process.poll() is not None:
                raise ChildExited(_exited(child, "while the stack ran"))

    def stop(self) -> None:
        """Stop the children, the last started first: SIGTERM, then SIGKILL after
        ``stop_timeout_s``. Safe to call more than once."""
        for child in reversed(self.children):
            process = child.process
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
                try:
                    process.wait(self.config.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    log.warning("%s did not stop in time; killed", child.name)
                    process.kill()
                    process.wait()
        self.children.clear()

    @property
    def pids(self) -> dict[str, int]:
        return {child.name: child.process.pid for child in self.children}


PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In a child before it runs the command: SIGTERM when ``up`` dies (Linux ``prctl``), so
    an ``up`` killed with SIGKILL leaves no service behind."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _exited(child: _Child, when: str) -> str:
    try:
        tail = child.log_path.read_text(errors="replace")[-2000:]
    except OSError:
        tail = ""
    return (
        f"{child.name} exited with {child.process.returncode} {when}; the end of "
        f"{child.log_path}:\n{tail}"
    )


def run(
    config: UpConfig,
    stop: threading.Event,
    *,
    on_ready: Callable[[Stack], None] | None = None,
    check_every_s: float = 1.0,
) -> None:
    """Provision, issue the tokens, start the stack, call ``on_ready``, then watch the
    children and refresh the tokens until ``stop`` is set; the stack is stopped on the way
    out whatever happens. Raises :class:`StartFailed` or :class:`ChildExited`."""
    provision(config)
    tokens = Tokens(config)
    tokens.refresh(force=True)
    stack = Stack(config)
    try:
        stack.start(stop)
        if on_ready is not None:
            on_ready(stack)
        while not stop.wait(check_every_s):
            stack.check()
            tokens.refresh()
    finally:
        stack.stop()
