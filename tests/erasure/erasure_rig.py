"""Erasure over the real ingest path: the coordinator rig (real publisher, gateway, control plane
on 127.0.0.1, projector, Lance) with one or more stores shipped into one scope and projected,
and an :class:`ErasureManager` over the same bucket, control plane and Lance.

The checks read every store directly: every key of the directory bucket (and every file on disk
under it, so no version or sidecar survives unseen), every ``_root_id`` of every ClickHouse table
and the ledger (all scopes, all generations), every row of every Lance dataset's newest version.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "coordinator"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "projector"))

from coordinator_rig import CoordinatorRig, coordinator_over
from projector_fixtures import SCOPE, _once, copy_store, whole_workload

from baml_studio.catalog import LocalStoreSource
from baml_studio.control.facts.ddl import LEDGER_TABLE, qualified
from baml_studio.control.identity import TokenIssuer
from baml_studio.control.schemas import PUBLIC_RELATIONS
from baml_studio.erasure.config import ErasureConfig
from baml_studio.erasure.manager import AfterStep, ErasureManager
from baml_studio.erasure.refs import RefIndex
from baml_studio.erasure.selector import parse_selector
from baml_studio.erasure.store import ErasureRecord, ErasureStore
from baml_studio.gateway.config import Scope
from baml_studio.gateway.keys import cas_key, evidence_prefix
from baml_studio.objectstore.directory import DirectoryBucket
from baml_studio.projector.gather import referenced_values
from baml_studio.projector.lance_store import DATASETS, PROJECTED, VALUE_PATHS, VALUES
from baml_studio.projector.replay import (
    delete_private_datasets,
    plan_rebuild,
    plan_replay,
    projected_state,
    replay,
)
from baml_studio.publisher import Publisher
from baml_studio.publisher.pack import decode_pack
from baml_studio.query import QueryBudgets, QueryEngine
from baml_studio.store import StoreReader
from baml_studio.store.layout import StoreLayout, parse_cas_file_name

PREFIX = evidence_prefix(SCOPE)
LARGE = 32 * 1024
FAST = ErasureConfig(settle_s=0, retry_initial_s=0.01, retry_max_s=0.05)


@pytest.fixture(scope="session")
def other_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 executions of the same seeded workload in 2 other processes: each of its streams
    shares its large values with one stream of ``workload_store``."""
    return _once(
        "erasure-other",
        tmp_path_factory,
        lambda root: whole_workload(root, 24, 2, 11),
    )


@dataclass(frozen=True)
class Stream:
    euid: str
    store: Path
    executions: frozenset[str]
    values: frozenset[str]
    """Value CIDs (64 hex) its data segments reference."""
    large: frozenset[str]
    """Those at or above the large-value threshold (shipped under cas/values/)."""


def local_streams(root: Path) -> list[Stream]:
    reader = StoreReader(root)
    sizes = {
        parse_cas_file_name(p.name): p.stat().st_size
        for p in StoreLayout(root).cas_dir.glob("*/*.bamlvalue")
    }
    roots = LocalStoreSource(root).root_threads(columns=["execution_id", "process_id"])
    by_stream: dict[str, set[str]] = {}
    for execution, process in zip(
        roots["execution_id"].to_pylist(), roots["process_id"].to_pylist(), strict=True
    ):
        by_stream.setdefault(process, set()).add(execution)
    out = []
    for euid in reader.list_streams():
        cids: set[bytes] = set()
        for seq in reader.data_sequences(euid):
            cids |= referenced_values(reader.read_data(euid, seq).groups)
        large = {c for c in cids if (sizes.get(c) or 0) >= LARGE}
        out.append(
            Stream(
                euid.hex(), root, frozenset(by_stream.get(euid.hex(), ())),
                frozenset(c.hex() for c in cids), frozenset(c.hex() for c in large),
            )
        )  # fmt: skip
    return out


@dataclass
class ErasureRig:
    coordinator: CoordinatorRig
    manager: ErasureManager
    database: str
    tmp: Path
    stores: list[Path]
    streams: list[Stream] = field(default_factory=list)

    @property
    def ingest(self) -> Any:
        return self.coordinator.ingest

    @property
    def bucket(self) -> DirectoryBucket:
        store = self.ingest.dataplane.store
        assert isinstance(store, DirectoryBucket)
        return store

    # --- erasing ---------------------------------------------------------------------------------

    def erase(self, body: bytes, key: str | None = None, timeout_s: float = 120) -> ErasureRecord:
        selector = parse_selector(body, max_items=10_000)
        erasure, _ = self.manager.create(SCOPE, selector, key or uuid.uuid4().hex)
        return self.manager.wait(erasure["erasure_id"], timeout_s)

    def reopen(self, **kwargs: Any) -> ErasureManager:
        """A new manager over the same files (the old one is closed first)."""
        self.manager.close()
        self.manager = open_manager(self, **kwargs)
        return self.manager

    def user_token(
        self,
        *,
        erasure: bool = True,
        scope: Scope = SCOPE,
        environments: tuple[str, ...] | None = None,
    ) -> str:
        control = self.ingest.control
        grants = list(environments or (scope.environment,))
        issuer = TokenIssuer(control.keys, control.metastore)
        return issuer.issue_user(scope.tenant, scope.project, grants, erasure=erasure).token

    # --- what is left ----------------------------------------------------------------------------

    def keys(self, prefix: str = "") -> set[str]:
        return {info.key for info in self.bucket.list(prefix)}

    def files_mentioning(self, text: str) -> list[Path]:
        """Every file on disk under the bucket (objects, sidecars, staging) whose path names
        ``text``: what a deleted object could leave behind."""
        return [p for p in self.bucket.path.rglob("*") if text in str(p) and p.is_file()]

    def fact_roots(self) -> set[str]:
        """Every ``_root_id`` of every fact table and ledger root, any scope and generation."""
        facts = self.ingest.control.facts
        found: set[str] = set()
        for relation in PUBLIC_RELATIONS:
            sql = f"SELECT DISTINCT _root_id FROM {qualified(self.database, relation.name)}"
            found.update(facts.query_arrow(sql, {}).column(0).to_pylist())
        sql = f"SELECT DISTINCT root_id FROM {qualified(self.database, LEDGER_TABLE)}"
        found.update(facts.query_arrow(sql, {}).column(0).to_pylist())
        return found

    def lance_execution_ids(self) -> set[str]:
        """``execution_id`` of every row in the newest version of every execution dataset."""
        found: set[str] = set()
        for name in DATASETS:
            if name in (VALUES, VALUE_PATHS):
                continue
            dataset = self.ingest.private.open_dataset(name)
            if dataset is not None:
                found.update(dataset.to_table(columns=["execution_id"])["execution_id"].to_pylist())
        return found

    def lance_cids(self) -> tuple[set[str], set[str]]:
        """The CIDs (64 hex) in ``values_v1`` and in ``value_paths_v1`` (newest versions)."""
        out = []
        for name in (VALUES, VALUE_PATHS):
            dataset = self.ingest.private.open_dataset(name)
            cids = [] if dataset is None else dataset.to_table(columns=["cid"])["cid"].to_pylist()
            out.append({c.removeprefix("bamlv_1_") for c in cids})
        return out[0], out[1]

    def projected_process_ids(self) -> set[str]:
        dataset = self.ingest.private.open_dataset(PROJECTED)
        if dataset is None:
            return set()
        return set(dataset.to_table(columns=["process_id"])["process_id"].to_pylist())

    # --- replay ----------------------------------------------------------------------------------

    def replay_missing(self) -> int:
        state = projected_state(self.ingest.client, self.ingest.private, SCOPE)
        plan = plan_replay(
            self.bucket,
            SCOPE,
            projected_roots=state.both,
            ingested_cids=self.ingest.private.missing_values,
        )
        sent = replay(plan, self.ingest.dataplane.queue)
        self.drain()
        return sent

    def rebuild_everything(self) -> None:
        """A new ClickHouse generation and Lance from nothing, replayed from the bucket."""
        self.ingest.control.metastore.bump_generation(SCOPE)
        self.ingest.client.invalidate_generation(SCOPE)
        delete_private_datasets(self.ingest.private.root_uri)
        replay(plan_rebuild(self.bucket, SCOPE), self.ingest.dataplane.queue)
        self.drain()

    def drain(self) -> None:
        self.ingest.worker.drain()
        queue = self.ingest.dataplane.queue
        assert queue.approximate_count() == 0
        assert queue.dead_letter_queue().approximate_count() == 0, "a message was dead-lettered"

    # --- queries ---------------------------------------------------------------------------------

    def remote_rows(self, sql: str) -> list[dict[str, Any]]:
        answer = self.coordinator.remote(sql)
        assert answer.outcome["resultState"] == "complete", answer.outcome
        return answer.rows

    def local_rows(self, sql: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for root in self.stores:
            engine = QueryEngine(LocalStoreSource(root), QueryBudgets(max_result_rows=1_000_000))
            result = engine.execute(sql)
            rows.extend(result)
            assert result.outcome()["resultState"] == "complete"
        return rows


def open_manager(
    rig: ErasureRig,
    *,
    config: ErasureConfig = FAST,
    after_step: AfterStep | None = None,
    start: bool = True,
) -> ErasureManager:
    directory = rig.tmp / "erasures"
    directory.mkdir(exist_ok=True)
    ingest = rig.ingest
    return ErasureManager(
        ErasureStore(directory / "erasures.sqlite"),
        ingest.dataplane.store,
        ingest.client,
        lambda scope: ingest.private,
        config=config,
        refs=RefIndex(directory / "refs.sqlite"),
        on_values_erased=lambda scope: rig.coordinator.coordinator.cache.clear(),
        after_step=after_step,
        start=start,
    )


@contextmanager
def erasure_rig(
    tmp_path: Path,
    chdb_dsn: str,
    stores: list[Path],
    **kwargs: Any,
) -> Iterator[ErasureRig]:
    database = f"t_{uuid.uuid4().hex[:16]}"
    with coordinator_over(tmp_path, chdb_dsn, database, stores[0], project=False) as coordinator:
        ingest = coordinator.ingest
        roots = [ingest.store_root]
        for i, extra in enumerate(stores[1:]):
            root = copy_store(extra, tmp_path / f"store-{i + 1}")
            report = Publisher(root, ingest.gateway_url, ingest.publisher_token).flush()
            assert report.complete, report.problems
            roots.append(root)
        rig = ErasureRig(coordinator, None, database, tmp_path, roots)  # type: ignore[arg-type]
        rig.drain()
        rig.streams = [s for root in roots for s in local_streams(root)]
        rig.manager = open_manager(rig, **kwargs)
        try:
            yield rig
        finally:
            rig.manager.close()


def euid_body(*streams: Stream) -> bytes:
    return json.dumps({"process_euids": [s.euid for s in streams]}).encode()


def assert_gone(rig: ErasureRig, erased: list[Stream]) -> None:
    """Nothing of ``erased`` anywhere; every other stream whole."""
    survivors = [s for s in rig.streams if s not in erased]
    gone_roots = {r for s in erased for r in s.executions}
    kept_roots = {r for s in survivors for r in s.executions}
    for stream in erased:
        assert not rig.keys(f"{PREFIX}streams/{stream.euid}/"), stream.euid
        assert not rig.keys(f"{PREFIX}quarantine/streams/{stream.euid}/")
        assert rig.files_mentioning(stream.euid) == []  # no version, sidecar or staging file
    facts = rig.fact_roots()
    assert not facts & gone_roots
    assert kept_roots <= facts
    lance = rig.lance_execution_ids()
    assert not lance & gone_roots
    assert kept_roots <= lance
    assert not rig.projected_process_ids() & {s.euid for s in erased}
    only_erased = set().union(*(s.values for s in erased)) - set().union(
        *(s.values for s in survivors)
    )
    values, paths = rig.lance_cids()
    assert not values & only_erased and not paths & only_erased
    assert set().union(*(s.values for s in survivors)) <= values
    for cid in set().union(*(s.large for s in erased)) & only_erased:
        assert not rig.keys(cas_key(SCOPE, "values", cid))
    for cid in set().union(*(s.large for s in survivors)):
        assert rig.keys(cas_key(SCOPE, "values", cid)), "a survivor's large value went"
    # queries: the erased executions are not returned, the survivors' rows and values are
    roots = rig.remote_rows("SELECT execution_id FROM threads WHERE parent_thread_id IS NULL")
    assert {r["execution_id"] for r in roots} == kept_roots
    if kept_roots:
        ids = ", ".join(f"'{r}'" for r in sorted(kept_roots))
        sql = (
            f"SELECT call_id, args, output, error FROM calls WHERE execution_id IN ({ids}) "
            "ORDER BY call_id"
        )
        local = sorted(rig.local_rows(sql), key=lambda row: row["call_id"])  # two stores
        assert rig.remote_rows(sql) == local
    gone = ", ".join(f"'{r}'" for r in sorted(gone_roots))
    for relation in ("threads", "calls", "errors", "call_path_stats", "health"):
        assert rig.remote_rows(f"SELECT * FROM {relation} WHERE execution_id IN ({gone})") == []


def carrier(rig: ErasureRig, streams: list[Stream]) -> tuple[Stream, Stream]:
    """``(the stream whose packs carry the store's small values, the other one)``."""
    with_packs = [s for s in streams if rig.keys(f"{PREFIX}streams/{s.euid}/values/")]
    assert len(with_packs) == 1, "the publisher ships a store's packs under one stream"
    (first,) = with_packs
    (second,) = [s for s in streams if s != first]
    return first, second


def pack_cids(rig: ErasureRig) -> set[str]:
    """Every CID (64 hex) carried by a pack in the bucket."""
    out: set[str] = set()
    for key in rig.keys(f"{PREFIX}streams/"):
        if key.endswith(".bamlpack.zst"):
            out |= {e.cid.hex() for e in decode_pack(rig.bucket.get(key)).entries}
    return out


@contextmanager
def served(rig: ErasureRig) -> Iterator[str]:
    """The two erasure routes over ``rig.manager`` on 127.0.0.1, verifying user tokens with the
    control plane's published keys; yields the base URL."""
    from projector_control_rig import serve
    from starlette.applications import Starlette
    from starlette.requests import Request

    from baml_studio.control.identity import UserIdentity
    from baml_studio.control.identity_remote import RemoteKeySet
    from baml_studio.coordinator.auth import UserTokenAuth
    from baml_studio.erasure.app import erasure_routes

    key_set = RemoteKeySet(rig.ingest.client._base)  # reason: the rig's control-plane URL
    auth = UserTokenAuth.remote(key_set, owned=True)

    def authenticate(request: Request) -> UserIdentity:
        return auth.authenticate({k.lower(): v for k, v in request.headers.items()})

    try:
        with serve(Starlette(routes=erasure_routes(rig.manager, authenticate))) as url:
            yield url
    finally:
        auth.close()


def wait_until(predicate: Any, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


__all__ = ["PREFIX", "SCOPE", "other_store"]
