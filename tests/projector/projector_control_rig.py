"""A real control plane for the projector's client tests, served by uvicorn on 127.0.0.1.

Provisions tenant ``tn_a`` (project ``prj``, environment ``prod``) served by deployment
``dep_a``, and tenant ``tn_b`` (``prj_b``/``prod_b``) by ``dep_b``, each with a workload token,
in a fresh SQLite metastore and the session's chDB (its own database). :func:`serve` runs any
ASGI app (the control plane, or a small Starlette stub) in a thread on a bound socket.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import uvicorn

from baml_studio.control.app import create_app
from baml_studio.control.config import ControlConfig
from baml_studio.control.identity import TokenIssuer
from baml_studio.control.model import DeploymentKind
from baml_studio.control.schemas import registered_schema
from baml_studio.control.service import ControlPlane
from baml_studio.gateway.config import Scope

SCOPE_A = Scope("tn_a", "prj", "prod")
SCOPE_B = Scope("tn_b", "prj_b", "prod_b")
START_TIMEOUT_S = 10.0
AsgiApp = Callable[[Any, Any, Any], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class PublicBatch:
    """A public batch as the projector builds one (fits ``PublicBatchLike``)."""

    relation: str
    partition: int
    batch_id: str
    root_id: str
    table: pa.Table


@dataclass
class ControlRig:
    control: ControlPlane
    url: str
    token_a: str
    token_b: str

    def bump(self, scope: Scope = SCOPE_A) -> str:
        return self.control.metastore.bump_generation(scope)

    def generation(self, scope: Scope = SCOPE_A) -> str:
        return self.control.metastore.active_generation(scope)


def bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def closed_port_url() -> str:
    """The URL of a port nothing listens on (bound, then closed)."""
    sock = bound_socket()
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


@contextmanager
def serve(app: AsgiApp, log_level: str = "warning") -> Iterator[str]:
    """Run ``app`` under uvicorn on 127.0.0.1 in a thread; yield its base URL."""
    sock = bound_socket()
    config = uvicorn.Config(app, log_level=log_level, lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)  # readiness poll of the server thread, bounded by the deadline
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT_S)
        sock.close()


@contextmanager
def control_plane(tmp_path: Path, chdb_dsn: str, database: str) -> Iterator[ControlRig]:
    config = ControlConfig(
        data_dir=tmp_path,
        metastore_url=f"sqlite:///{tmp_path / 'metastore.db'}",
        facts_dsn=chdb_dsn,
        facts_database=database,
    )
    control = ControlPlane.open(config)
    try:
        ms = control.metastore
        for scope, deployment in ((SCOPE_A, "dep_a"), (SCOPE_B, "dep_b")):
            ms.create_tenant(scope.tenant)
            ms.create_project(scope.tenant, scope.project)
            ms.create_environment(scope.tenant, scope.project, scope.environment)
            ms.create_deployment(deployment, DeploymentKind.BYOC, "cell-1", tenant_id=scope.tenant)
            ms.assign_environment(deployment, scope)
        issuer = TokenIssuer(control.keys, ms)
        token_a = issuer.issue_workload("tn_a", "dep_a", "cell-1").token
        token_b = issuer.issue_workload("tn_b", "dep_b", "cell-1").token
        with serve(create_app(control)) as url:
            yield ControlRig(control, url, token_a, token_b)
    finally:
        control.close()


def _value(field: pa.Field, root_id: str, row: int, salt: str) -> Any:
    name, type_ = field.name, field.type
    if name == "execution_id":
        return root_id
    if pa.types.is_string(type_):
        return f"{name}_{root_id}_{row}{salt}"
    if pa.types.is_integer(type_):
        return (row + 1) * 1000 if name.endswith("_ns") else row
    if pa.types.is_boolean(type_):
        return row % 2 == 0
    if pa.types.is_timestamp(type_):
        return 1_700_000_000_000_000_000 + row
    if pa.types.is_list(type_):
        return [f"x{row}"]
    raise AssertionError(f"no test value for {field}")


def table(relation: str, root_id: str, rows: int = 3, *, salt: str = "") -> pa.Table:
    """A valid batch table of ``relation`` for ``root_id``; ``salt`` changes its content."""
    schema = registered_schema(relation)
    columns = [
        pa.array([_value(f, root_id, i, salt) for i in range(rows)], type=f.type) for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def public_batch(
    relation: str, root_id: str, *, partition: int = 0, rows: int = 3, salt: str = ""
) -> PublicBatch:
    return PublicBatch(
        relation,
        partition,
        f"{root_id}.{relation}.{partition}",
        root_id,
        table(relation, root_id, rows, salt=salt),
    )
