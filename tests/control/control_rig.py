"""A control plane for tests: stores under tmp_path, the session's chDB, two tenants.

Tenant ``tn_a`` (project ``prj``, environment ``prod``) is served by BYOC deployment ``dep_a``;
tenant ``tn_b`` (``prj_b``, ``prod_b``) by ``dep_b``. Each has a workload
token. :func:`batch` builds a valid public batch of any relation for one root id.
"""

from __future__ import annotations

import hashlib
import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import zstandard
from starlette.testclient import TestClient

from baml_studio.control.app import create_app
from baml_studio.control.config import ControlConfig
from baml_studio.control.identity import TokenIssuer
from baml_studio.control.model import DeploymentKind
from baml_studio.control.schemas import registered_schema
from baml_studio.control.service import ControlPlane
from baml_studio.gateway.config import Scope

SCOPE_A = Scope("tn_a", "prj", "prod")
SCOPE_B = Scope("tn_b", "prj_b", "prod_b")


@dataclass
class Rig:
    control: ControlPlane
    client: TestClient
    issuer: TokenIssuer
    token_a: str
    token_b: str

    def headers(self, token: str, **extra: str) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {token}",
            "X-Baml-Request-Id": f"req_{uuid.uuid4().hex}",
            **extra,
        }

    def put(
        self,
        token: str,
        scope: Scope,
        relation: str,
        root_id: str,
        table: pa.Table,
        *,
        partition: int = 0,
        generation: str | None = None,
        batch_id: str | None = None,
        digest: str | None = None,
        prefix: str = "",
    ) -> Any:
        raw = ipc_bytes(table)
        gen = generation or self._generation(scope)
        headers = self.headers(
            token,
            **{
                "Content-Encoding": "zstd",
                "Content-Type": "application/vnd.apache.arrow.stream",
                "X-Baml-Root-Id": root_id,
                "X-Baml-Project-Id": scope.project,
                "X-Baml-Environment-Id": scope.environment,
                "X-Baml-Relation": relation,
                "X-Baml-Partition": str(partition),
                "X-Baml-Projection-Generation": gen,
                "X-Baml-Content-Digest": digest or sha256(raw),
            },
        )
        bid = batch_id or f"{root_id}.{relation}.{partition}"
        return self.client.put(
            f"{prefix}/projection-batches/{bid}", content=zstd(raw), headers=headers
        )

    def _generation(self, scope: Scope) -> str:
        environment = self.control.metastore.get_environment(scope)
        return environment.active_generation if environment else "gen_1"

    def snapshot(self, token: str, scope: Scope) -> Any:
        return self.client.post(
            "/query-snapshots",
            json={
                "scope": {
                    "tenant_id": scope.tenant,
                    "project_id": scope.project,
                    "environment_id": scope.environment,
                },
                "catalog_version": "v1",
            },
            headers=self.headers(token),
        )

    def query(
        self,
        token: str,
        sql: str,
        *,
        snapshot_id: str | None = None,
        parameters: list[dict[str, Any]] | None = None,
        budget: dict[str, int] | None = None,
        scope: Scope | None = None,
        generation: str | None = None,
    ) -> Any:
        body: dict[str, Any] = {
            "sql": sql,
            "parameters": parameters or [],
            "budget": budget
            or {
                "max_wall_ms": 10_000,
                "max_rows_read": 10_000_000,
                "max_bytes_read": 1_000_000_000,
                "max_result_rows": 100_000,
                "max_result_bytes": 100_000_000,
            },
        }
        extra: dict[str, str] = {}
        if snapshot_id is not None:
            body["snapshot_id"] = snapshot_id
        else:
            body["generation"] = generation
            body["catalog_version"] = "v1"
            if scope is not None:
                extra = {
                    "X-Baml-Project-Id": scope.project,
                    "X-Baml-Environment-Id": scope.environment,
                }
        return self.client.post(
            "/resident-queries", json=body, headers=self.headers(token, **extra)
        )

    def query_table(self, token: str, scope: Scope, sql: str, **kwargs: Any) -> pa.Table:
        snap = self.snapshot(token, scope)
        assert snap.status_code == 200, snap.text
        answer = self.query(token, sql, snapshot_id=snap.json()["snapshot_id"], **kwargs)
        assert answer.status_code == 200, answer.text
        return read_ipc(answer.content)


def ipc_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def read_ipc(data: bytes) -> pa.Table:
    with pa.ipc.open_stream(pa.BufferReader(data)) as reader:
        return reader.read_all()


def sha256(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def zstd(raw: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(raw)


def _value(field: pa.Field, root_id: str, row: int) -> Any:
    name, type_ = field.name, field.type
    if name == "execution_id":
        return root_id
    if pa.types.is_string(type_):
        if name == "fqn":
            return f"Fn{row % 3}"
        return f"{name}_{root_id}_{row}"
    if pa.types.is_integer(type_):
        return (row + 1) * 1000 if name.endswith("_ns") else row
    if pa.types.is_boolean(type_):
        return row % 2 == 0
    if pa.types.is_timestamp(type_):
        return 1_700_000_000_000_000_000 + row
    if pa.types.is_list(type_):
        return [f"x{row}"]
    raise AssertionError(f"no test value for {field}")


def batch(relation: str, root_id: str, rows: int = 3) -> pa.Table:
    """A valid batch of ``relation`` with ``rows`` rows for ``root_id``."""
    schema = registered_schema(relation)
    columns = [pa.array([_value(f, root_id, i) for i in range(rows)], type=f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def build(tmp_path: Path, chdb_dsn: str, database: str) -> Iterator[Rig]:
    config = ControlConfig(
        data_dir=tmp_path,
        metastore_url=f"sqlite:///{tmp_path / 'metastore.db'}",
        facts_dsn=chdb_dsn,
        facts_database=database,
    )
    control = ControlPlane.open(config)
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
    with TestClient(create_app(control)) as client:
        yield Rig(control, client, issuer, token_a, token_b)
    control.close()
