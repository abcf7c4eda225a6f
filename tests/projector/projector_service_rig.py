"""Helpers for the projector service tests (loop, Lambda handler, compaction, faults) over the
e2e rig of ``projector_e2e_rig``: the rig's control plane served on a URL these tests own, a
fresh workload token, a :class:`ProjectorConfig` over the rig's data-plane directory, and the
"one fact set" checks (no duplicate fact rows in ClickHouse, one Lance row per id)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from projector_control_rig import serve
from projector_e2e_rig import Ingest
from projector_fixtures import SCOPE

from baml_studio.catalog.split import key_columns
from baml_studio.control.app import create_app
from baml_studio.control.facts.ddl import qualified, scope_where_sql
from baml_studio.control.identity import TokenIssuer
from baml_studio.control.schemas import PUBLIC_RELATIONS
from baml_studio.gateway.service import load_dataplane_config
from baml_studio.projector.control_client import ControlClient
from baml_studio.projector.lance_store import (
    PROJECTED,
    RELATION_DATASETS,
    VALUES,
    PrivateStore,
)
from baml_studio.projector.service import ProjectorConfig, scope_root
from baml_studio.projector.worker import ProjectorWorker, WorkerConfig
from baml_studio.queue.port import Message, Queue

SET_RELATION = "function_definitions_v1"


@contextmanager
def control_endpoint(ingest: Ingest) -> Iterator[tuple[str, str]]:
    """The rig's control plane served again on 127.0.0.1, and a fresh workload token."""
    token = (
        TokenIssuer(ingest.control.keys, ingest.control.metastore)
        .issue_workload(SCOPE.tenant, "dep_proj", "cell-1")
        .token
    )
    with serve(create_app(ingest.control)) as url:
        yield url, token


def rig_worker(ingest: Ingest, control: ControlClient) -> ProjectorWorker:
    """A worker over the rig's bucket, queue and private store, sending to ``control``, that
    retries a message at once (no visibility backoff)."""
    queue = ingest.dataplane.queue
    assert queue is not None
    return ProjectorWorker(
        store=ingest.dataplane.store,
        queue=queue,
        control=control,
        private_store=lambda _scope: ingest.private,
        config=WorkerConfig(retry_backoff_s=(0,)),
    )


def dataplane_dir(tmp_path: Path) -> Path:
    """The rig's data-plane directory (``ingest_path`` serves ``tmp_path / "dataplane"``)."""
    return tmp_path / "dataplane"


def projector_config(tmp_path: Path, url: str, token: str, **settings: Any) -> ProjectorConfig:
    """A :class:`ProjectorConfig` over the rig's data-plane directory, Lance under
    ``tmp_path / "service-derived"``."""
    dataplane = load_dataplane_config(dataplane_dir(tmp_path), host="127.0.0.1", port=8787)
    return ProjectorConfig(
        dataplane, url, token, derived_root=str(tmp_path / "service-derived"), **settings
    )


def with_private(ingest: Ingest, config: ProjectorConfig) -> Ingest:
    """The rig's view with the private store of ``config``'s scope root."""
    return dataclasses.replace(ingest, private=PrivateStore(scope_root(config, SCOPE)))


def receive_all(queue: Queue) -> list[Message]:
    """Lease every visible message (each stays leased for the visibility timeout)."""
    out: list[Message] = []
    while batch := queue.receive(max_messages=10):
        out.extend(batch)
    return out


def fact_counts(ingest: Ingest, database: str, where: str = "") -> dict[str, dict[str, int]]:
    """Per relation: stored rows, distinct fact ids ``(_batch_id, _row)`` and, but for the
    set relation, distinct key tuples, in the rig's scope and active generation."""
    scope = scope_where_sql(SCOPE, ingest.generation())
    out = {}
    for relation in PUBLIC_RELATIONS:
        columns = ["count() AS stored", "count(DISTINCT (_batch_id, _row)) AS ids"]
        if relation.name != SET_RELATION:
            keys = ", ".join(f"`{c}`" for c in key_columns(relation))
            columns.append(f"count(DISTINCT tuple({keys})) AS keys")
        sql = (
            f"SELECT {', '.join(columns)} FROM {qualified(database, relation.name)} "
            f"WHERE {scope}{' AND ' + where if where else ''}"
        )
        out[relation.name] = ingest.control.facts.query_arrow(sql, {}).to_pylist()[0]
    return out


def assert_no_duplicate_facts(ingest: Ingest, database: str) -> None:
    for name, counts in fact_counts(ingest, database).items():
        assert counts["stored"] > 0, name  # the check below can fail
        assert counts["stored"] == counts["ids"], (name, counts)
        if name != SET_RELATION:
            assert counts["stored"] == counts["keys"], (name, counts)


def assert_one_lance_row_per_id(private: PrivateStore) -> None:
    checked = 0
    for name, column in [
        *((r, "row_id") for r in RELATION_DATASETS),
        (PROJECTED, "execution_id"),
        (VALUES, "cid"),
    ]:
        dataset = private.open_dataset(name)
        if dataset is None:
            continue
        ids = dataset.to_table(columns=[column])[column]
        assert len(ids) == pc.count_distinct(ids).as_py(), name
        checked += len(ids)
    assert checked > 0


def assert_one_fact_set(ingest: Ingest, database: str) -> None:
    """Public facts and private rows equal the local catalog, with no duplicate anywhere."""
    from projector_e2e_rig import assert_same_relations

    assert_same_relations(ingest.projected_tables(), ingest.local_tables())
    assert_no_duplicate_facts(ingest, database)
    assert_one_lance_row_per_id(ingest.private)
    queue = ingest.dataplane.queue
    assert queue is not None
    assert queue.approximate_count() == 0
    assert queue.dead_letter_queue().approximate_count() == 0
