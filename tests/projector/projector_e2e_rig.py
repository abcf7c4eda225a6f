"""The whole ingest path for projector tests: a workload store shipped by the real publisher
through the real gateway (directory bucket + SQLite queue), a real control plane on 127.0.0.1
provisioned for the store's scope, and a worker over both with Lance under tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from projector_control_rig import control_plane
from projector_fixtures import SCOPE, copy_store, real_dataplane

from baml_studio.catalog import LocalStoreSource
from baml_studio.catalog.schema import BY_NAME
from baml_studio.catalog.split import join_split, private_schema
from baml_studio.control.identity import TokenIssuer
from baml_studio.control.model import DeploymentKind
from baml_studio.control.schemas import PUBLIC_RELATIONS
from baml_studio.control.service import ControlPlane
from baml_studio.coordinator.source import first_per_key
from baml_studio.gateway.service import Dataplane
from baml_studio.projector.control_client import ControlClient, SentRequest
from baml_studio.projector.lance_store import PrivateStore
from baml_studio.projector.worker import ProjectorWorker, WorkerConfig
from baml_studio.publisher import Publisher


@dataclass
class Ingest:
    dataplane: Dataplane
    control: ControlPlane
    client: ControlClient
    worker: ProjectorWorker
    private: PrivateStore
    store_root: Path
    gateway_url: str = ""
    publisher_token: str = ""
    captured: list[SentRequest] = field(default_factory=list)
    """Every request the worker sent to the control plane, bodies included."""

    def generation(self) -> str:
        return self.control.metastore.active_generation(SCOPE)

    def projected_tables(self) -> dict[str, pa.Table]:
        """Every public relation as ClickHouse facts joined with the Lance private rows."""
        out: dict[str, pa.Table] = {}
        gen = self.generation()
        for relation in PUBLIC_RELATIONS:
            public = self.control.facts.rows(relation.name, SCOPE, gen)
            names = private_schema(relation).names
            if relation.private_columns():
                dataset = self.private.open_dataset(relation.name)
                if dataset is None:  # no execution had a row of this relation
                    private = private_schema(relation).empty_table()
                else:
                    private = dataset.to_table().select(names).cast(private_schema(relation))
                if relation.name == "function_definitions_v1":
                    private = first_per_key(private, ["program_id", "function_id"])
                out[relation.name] = join_split(relation, public, private)
            else:
                out[relation.name] = public.cast(relation.schema())
        return out

    def local_tables(self) -> dict[str, pa.Table]:
        source = LocalStoreSource(self.store_root)
        names = [r.name for r in PUBLIC_RELATIONS]
        return source.tables(names, None)


def rows_of(table: pa.Table) -> list[str]:
    """Rows as sorted reprs (order-free comparison)."""
    return sorted(repr(sorted(row.items())) for row in table.to_pylist())


def assert_same_relations(got: dict[str, pa.Table], want: dict[str, pa.Table]) -> None:
    for name, expected in want.items():
        expected = expected.cast(BY_NAME[name].schema())
        actual = got[name].cast(BY_NAME[name].schema())
        if name == "function_definitions_v1":
            expected = first_per_key(expected, ["program_id", "function_id"])
            actual = first_per_key(actual, ["program_id", "function_id"])
        assert actual.num_rows == expected.num_rows, (name, actual.num_rows, expected.num_rows)
        assert rows_of(actual) == rows_of(expected), name


@contextmanager
def ingest_path(
    tmp_path: Path,
    chdb_dsn: str,
    database: str,
    store_root: Path,
    *,
    ship: bool = True,
    config: WorkerConfig | None = None,
) -> Iterator[Ingest]:
    store_root = copy_store(store_root, tmp_path / "store")  # publishing writes its cursors
    with control_plane(tmp_path / "control", chdb_dsn, database) as rig:
        ms = rig.control.metastore
        ms.create_tenant(SCOPE.tenant)
        ms.create_project(SCOPE.tenant, SCOPE.project)
        ms.create_environment(SCOPE.tenant, SCOPE.project, SCOPE.environment)
        ms.create_deployment("dep_proj", DeploymentKind.BYOC, "cell-1", tenant_id=SCOPE.tenant)
        ms.assign_environment("dep_proj", SCOPE)
        token = (
            TokenIssuer(rig.control.keys, ms)
            .issue_workload(SCOPE.tenant, "dep_proj", "cell-1")
            .token
        )
        with real_dataplane(tmp_path / "dataplane") as (url, publisher_token, dataplane):
            if ship:
                report = Publisher(store_root, url, publisher_token).flush()
                assert report.complete, report.problems
            captured: list[SentRequest] = []
            # the client's own connections: batches go through the asyncio sender, as deployed
            client = ControlClient(rig.url, token, backoff_s=0.01, on_request=captured.append)
            private = PrivateStore(str(tmp_path / "derived"))
            worker = ProjectorWorker(
                store=dataplane.store,
                queue=dataplane.queue,
                control=client,
                private_store=lambda scope: private,
                config=config or WorkerConfig(retry_backoff_s=(0,)),
            )
            try:
                yield Ingest(
                    dataplane,
                    rig.control,
                    client,
                    worker,
                    private,
                    store_root,
                    url,
                    publisher_token,
                    captured,
                )
            finally:
                client.close()
