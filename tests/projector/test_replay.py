"""The replay tool: plans list exactly the meta objects and packs whose projection is missing
(ClickHouse or Lance), synthetic notifications are S3's shape, and replaying them (or the
dead-letter queue) makes the projected relations equal the local catalog again."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from projector_e2e_rig import Ingest, assert_same_relations, ingest_path
from projector_fixtures import SCOPE, MemoryStore, put, upload_store, walk_store, workload_store
from projector_service_rig import receive_all, rig_worker

from baml_studio.cli_replay import replay_command
from baml_studio.control.identity import TokenIssuer
from baml_studio.format.cas import encode_cas_object
from baml_studio.format.ids import value_cid, value_cid_wire
from baml_studio.format.records import RootEnded
from baml_studio.gateway.keys import evidence_prefix
from baml_studio.objectstore.port import ObjectStore
from baml_studio.projector.control_client import ControlClient
from baml_studio.projector.evidence import EvidenceReader
from baml_studio.projector.lance_store import PrivateStore
from baml_studio.projector.messages import parse_evidence_key, parse_notification
from baml_studio.projector.replay import (
    ReplayError,
    ReplayPlan,
    delete_private_datasets,
    plan_rebuild,
    plan_replay,
    projected_state,
    replay,
    replay_dead_letters,
)
from baml_studio.projector.resident_client import projected_root_ids, resident_query
from baml_studio.projector.worker import ProjectorWorker, WorkerConfig
from baml_studio.publisher.pack import compress, pack_body
from baml_studio.queue.config import QueueSettings, SqliteQueueConfig
from baml_studio.queue.port import Message, Queue
from baml_studio.queue.sqlite import SqliteQueue

__all__ = ["walk_store", "workload_store"]

PREFIX = evidence_prefix(SCOPE)
ULIDS = ("01J8ZK3V5N4Q2W8X7Y6T5R4E3D", "01J8ZK3V5N4Q2W8X7Y6T5R4E3E", "01J8ZK3V5N4Q2W8X7Y6T5R4E3F")


# --- helpers ---------------------------------------------------------------------------------


def ended_roots(store: ObjectStore) -> dict[str, list[str]]:
    """Meta key → root ids of its RootEnded records (only objects that end executions)."""
    reader = EvidenceReader(store, SCOPE)
    out: dict[str, list[str]] = {}
    for info in store.list(PREFIX + "streams/"):
        key = parse_evidence_key(info.key)
        if key.kind != "meta" or key.euid is None or key.sequence is None:
            continue
        segment = reader.meta(key.euid, key.sequence)
        roots = [r.root.wire() for r in segment.records if isinstance(r, RootEnded)]
        if roots:
            out[info.key] = roots
    return out


def pack_keys(store: ObjectStore) -> list[str]:
    return [i.key for i in store.list(PREFIX + "streams/") if i.key.endswith(".bamlpack.zst")]


def key_of(message: Message) -> str:
    [event] = parse_notification(message.body)
    return event.key


def release(queue: Queue, messages: list[Message]) -> None:
    for message in messages:
        queue.change_visibility(message.receipt, 0)


def drain(ingest: Ingest) -> None:
    ingest.worker.drain()
    assert ingest.dataplane.queue.approximate_count() == 0


def plan_of(ingest: Ingest) -> ReplayPlan:
    state = projected_state(ingest.client, ingest.private, SCOPE)
    return plan_replay(
        ingest.dataplane.store,
        SCOPE,
        projected_roots=state.both,
        ingested_cids=ingest.private.missing_values,
    )


def control_url(ingest: Ingest) -> str:
    return ingest.client._base


# --- the whole path --------------------------------------------------------------------------


def test_a_missed_notification_is_planned_alone_and_replayed(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest:
        queue = ingest.dataplane.queue
        ended = ended_roots(ingest.dataplane.store)
        messages = receive_all(queue)
        victim = next(m for m in messages if key_of(m) in ended)
        lost = key_of(victim)
        queue.delete(victim.receipt)  # the notification S3 never delivered
        release(queue, [m for m in messages if m is not victim])
        drain(ingest)

        state = projected_state(ingest.client, ingest.private, SCOPE)
        everything = {r for roots in ended.values() for r in roots}
        assert state.clickhouse == state.lance == everything - set(ended[lost])
        plan = plan_of(ingest)
        assert [o.key for o in plan.objects] == [lost]
        assert plan.metas[0].missing == tuple(ended[lost])
        assert plan.packs == () and plan.corrupt == ()
        assert plan.listed["pack"] == len(pack_keys(ingest.dataplane.store)) > 0

        assert replay(plan, queue) == 1
        [synthetic] = queue.receive()
        [event], [original] = parse_notification(synthetic.body), parse_notification(victim.body)
        assert (event.bucket, event.key, event.size, event.etag) == (
            original.bucket,
            original.key,
            original.size,
            original.etag,
        )
        assert ingest.worker.handle(synthetic) == "deleted"  # treated like S3's
        drain(ingest)
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())
        assert plan_of(ingest).objects == ()


def test_b_a_new_clickhouse_generation_replays_every_ending_meta_object(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest:
        drain(ingest)
        old = ingest.generation()
        new = ingest.control.metastore.bump_generation(SCOPE)
        assert new != old
        state = projected_state(ingest.client, ingest.private, SCOPE)
        assert state.generation == new and state.clickhouse == frozenset()
        assert state.lance  # Lance still has every execution
        plan = plan_of(ingest)
        ended = ended_roots(ingest.dataplane.store)
        assert [o.key for o in plan.metas] == sorted(ended)
        assert plan.packs == ()

        assert replay(plan, ingest.dataplane.queue) == len(ended)
        drain(ingest)
        assert ingest.generation() == new
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())
        assert plan_of(ingest).objects == ()


def test_c_lance_rebuilt_from_nothing(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest:
        drain(ingest)
        deleted = delete_private_datasets(ingest.private.root_uri)
        assert {"values_v1", "projected_v1"} <= set(deleted)
        assert not Path(ingest.private.root_uri).exists()
        state = projected_state(ingest.client, ingest.private, SCOPE)
        assert state.lance == frozenset() and state.clickhouse
        plan = plan_of(ingest)
        store = ingest.dataplane.store
        assert sorted(o.key for o in plan.packs) == sorted(pack_keys(store))
        assert [o.key for o in plan.metas] == sorted(ended_roots(store))
        kinds = [o.kind for o in plan.objects]
        assert kinds == sorted(kinds, key=lambda k: k != "pack")  # packs before meta objects

        assert replay(plan, ingest.dataplane.queue) == len(plan.objects)
        drain(ingest)
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())
        assert plan_of(ingest).objects == ()


def test_d_a_quarantined_message_replays_from_the_dead_letter_queue(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest:
        queue = ingest.dataplane.queue
        ended = ended_roots(ingest.dataplane.store)
        messages = receive_all(queue)
        victim = next(m for m in messages if key_of(m) in ended)
        # a wrong workload token (401) past the receive limit: the message is retried (the
        # token, not its evidence, is at fault) until the queue dead-letters it
        with ControlClient(control_url(ingest), "not-a-workload-token", retries=0) as refused:
            broken = rig_worker(ingest, refused)
            handled = [broken.handle(victim)]
            for _ in range(2 * QueueSettings().max_receive_count):
                again = receive_all(queue)  # the others stay leased: the victim alone
                if not again:  # moved to the dead-letter queue by this receive
                    break
                assert [key_of(m) for m in again] == [key_of(victim)]
                handled.append(broken.handle(again[0]))
        assert handled == ["retry"] * QueueSettings().max_receive_count
        assert broken.stats.quarantined == 0
        assert not [o.key for o in ingest.dataplane.store.list() if "/quarantine/" in o.key]
        release(queue, [m for m in messages if m is not victim])
        drain(ingest)
        dead = queue.dead_letter_queue()
        assert dead.approximate_count() == 1
        assert [o.key for o in plan_of(ingest).objects] == [key_of(victim)]

        assert replay_dead_letters(queue) == 1  # after the fix (the right token)
        assert dead.approximate_count() == 0
        drain(ingest)
        assert_same_relations(ingest.projected_tables(), ingest.local_tables())


def test_e_nothing_missing_plans_and_enqueues_nothing(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest:
        drain(ingest)
        plan = plan_of(ingest)
        assert plan.listed["meta"] > 0 and plan.listed["pack"] > 0
        assert plan.objects == () and plan.corrupt == () and plan.vanished == 0
        assert replay(plan, ingest.dataplane.queue) == 0
        assert ingest.dataplane.queue.approximate_count() == 0

        state = projected_state(ingest.client, ingest.private, SCOPE)
        paged = projected_root_ids(ingest.client, SCOPE, page_rows=7)  # several pages
        assert len(state.clickhouse) > 7 and paged.root_ids == state.clickhouse
        snapshot = ingest.client.snapshot(SCOPE)
        counted = resident_query(
            ingest.client,
            SCOPE,
            "SELECT count(DISTINCT execution_id) AS n FROM threads_v1",
            snapshot_id=snapshot["snapshot_id"],
        )
        assert counted.generation == state.generation
        assert counted.table.column("n").to_pylist() == [len(state.clickhouse)]


def test_the_cli_replays_lost_notifications_end_to_end(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest:
        queue = ingest.dataplane.queue
        for message in receive_all(queue):  # every notification lost
            queue.delete(message.receipt)
        token = (
            TokenIssuer(ingest.control.keys, ingest.control.metastore)
            .issue_workload(SCOPE.tenant, "dep_proj", "cell-1")
            .token
        )
        derived = tmp_path / "cli-derived"
        base = [
            "--data",
            str(tmp_path / "dataplane"),
            "--control-plane",
            control_url(ingest),
            "--token",
            token,
            "--derived",
            str(derived),
        ]
        runner = CliRunner()
        store = ingest.dataplane.store
        want = {"pack": len(pack_keys(store)), "meta": len(ended_roots(store))}

        dry = runner.invoke(replay_command, [*base, "--dry-run"])
        assert dry.exit_code == 0, dry.output
        summary = json.loads(dry.stdout)
        [scope] = summary["scopes"]
        assert scope["scope"] == "tn_proj/prj_proj/env_proj"  # from environments.json
        assert scope["missing"] == want and summary["enqueued"] == {"pack": 0, "meta": 0}
        assert queue.approximate_count() == 0

        real = runner.invoke(replay_command, [*base, "--scope", "tn_proj/prj_proj/env_proj"])
        assert real.exit_code == 0, real.output
        assert json.loads(real.stdout)["enqueued"] == want
        assert queue.approximate_count() == want["pack"] + want["meta"]

        private = PrivateStore(str(derived / SCOPE.tenant / SCOPE.project / SCOPE.environment))
        worker = ProjectorWorker(
            store=store,
            queue=queue,
            control=ingest.client,
            private_store=lambda _scope: private,
            config=WorkerConfig(retry_backoff_s=(0,)),
        )
        cli_ingest = dataclasses.replace(ingest, private=private, worker=worker)
        drain(cli_ingest)
        assert_same_relations(cli_ingest.projected_tables(), cli_ingest.local_tables())

        rebuild = runner.invoke(replay_command, [*base, "--lance-rebuild"])
        assert rebuild.exit_code == 0, rebuild.output
        [scope] = json.loads(rebuild.stdout)["scopes"]
        assert "projected_v1" in scope["lance_deleted"] and scope["rebuild"]
        assert scope["enqueued"] == {"pack": want["pack"], "meta": scope["listed"]["meta"]}
        drain(cli_ingest)
        assert_same_relations(cli_ingest.projected_tables(), cli_ingest.local_tables())

        dead = runner.invoke(replay_command, [*base, "--dead-letters"])
        assert dead.exit_code == 0, dead.output
        assert json.loads(dead.stdout)["dead_letters"] == {"moved": 0}


# --- without services ----------------------------------------------------------------------


@pytest.fixture
def walk_bucket_mem(walk_store: Path) -> MemoryStore:
    store = MemoryStore()
    upload_store(walk_store, store)
    return store


def _pack(store: MemoryStore, euid: str, ulid: str, bodies: list[bytes]) -> tuple[str, list[str]]:
    raws = [encode_cas_object(1, body) for body in bodies]
    key = f"{PREFIX}streams/{euid}/values/{ulid}.bamlpack.zst"
    put(store, key, compress(pack_body(raws)))
    return key, [value_cid_wire(value_cid(1, body)) for body in bodies]


def test_plan_lists_only_unprojected_meta_objects_and_corrupt_ones(
    walk_bucket_mem: MemoryStore,
) -> None:
    store = walk_bucket_mem
    ended = ended_roots(store)
    assert len(ended) > 3
    keys = sorted(ended)
    everything = {r for roots in ended.values() for r in roots}
    plan = plan_replay(
        store, SCOPE, projected_roots=everything - set(ended[keys[1]]), ingested_cids=set
    )
    assert [o.key for o in plan.metas] == [keys[1]] and plan.packs == ()
    assert plan.metas[0].sequence == parse_evidence_key(keys[1]).sequence

    put(store, keys[2], compress(b"not a meta segment"))
    plan = plan_replay(store, SCOPE, projected_roots=set(), ingested_cids=set)
    assert [c.key for c in plan.corrupt] == [keys[2]]
    assert [o.key for o in plan.metas] == [k for k in keys if k != keys[2]]


def test_a_pack_is_missing_when_any_cid_is_not_ingested(walk_bucket_mem: MemoryStore) -> None:
    store = walk_bucket_mem
    euid = next(iter(ended_roots(store))).split("/streams/")[1].split("/")[0]
    first, first_cids = _pack(store, euid, ULIDS[0], [b"a", b"b"])
    second, second_cids = _pack(store, euid, ULIDS[1], [b"c"])
    corrupt = f"{PREFIX}streams/{euid}/values/{ULIDS[2]}.bamlpack.zst"
    put(store, corrupt, compress(b"not a pack"))
    asked: list[set[str]] = []

    def missing(cids: set[str]) -> set[str]:
        asked.append(set(cids))
        return {first_cids[1]}

    everything = {r for roots in ended_roots(store).values() for r in roots}
    plan = plan_replay(store, SCOPE, projected_roots=everything, ingested_cids=missing)
    assert asked == [set(first_cids + second_cids)]  # one look-up for every pack
    assert [(o.key, o.missing) for o in plan.packs] == [(first, (first_cids[1],))]
    assert [c.key for c in plan.corrupt] == [corrupt]
    assert plan.listed == {"pack": 3, "meta": plan.listed["meta"]}
    assert second not in [o.key for o in plan.objects]


def test_rebuild_plans_every_object_packs_first_and_synthetic_messages_parse(
    walk_bucket_mem: MemoryStore,
) -> None:
    store = walk_bucket_mem
    euid = next(iter(ended_roots(store))).split("/streams/")[1].split("/")[0]
    pack, _ = _pack(store, euid, ULIDS[0], [b"a"])
    plan = plan_rebuild(store, SCOPE)
    metas = [i.key for i in store.list(PREFIX + "streams/") if i.key.endswith(".bamlmeta.zst")]
    assert [o.key for o in plan.objects] == [pack, *metas]
    assert plan.rebuild and plan.summary()["missing"] == {"pack": 1, "meta": len(metas)}

    sent: list[str] = []

    class Sender:
        def send(self, body: str, *, delay_s: int = 0) -> str:
            sent.append(body)
            return str(len(sent))

    assert replay(plan, Sender()) == len(plan.objects)
    for body, obj in zip(sent, plan.objects, strict=True):
        [event] = parse_notification(body)
        info = store.head(obj.key)
        assert (event.bucket, event.key, event.size, event.etag) == (
            store.bucket,
            obj.key,
            info.size,
            info.etag,
        )
        assert json.loads(body)["Records"][0]["userIdentity"]["baml-replay"] is True


def test_replay_dead_letters_moves_every_message_back(tmp_path: Path) -> None:
    queue = SqliteQueue.open(SqliteQueueConfig(path=tmp_path / "q.sqlite3"))
    try:
        bodies = [f"body-{i}" for i in range(13)]
        for body in bodies:
            queue.send(body)
        for message in receive_all(queue):
            queue.send_to_dead_letter(message, "test")
        dead = queue.dead_letter_queue()
        assert dead.approximate_count() == 13 and queue.approximate_count() == 0
        assert replay_dead_letters(queue) == 13
        assert dead.approximate_count() == 0
        assert sorted(m.body for m in receive_all(queue)) == sorted(bodies)
        assert replay_dead_letters(queue) == 0
    finally:
        queue.close()


def test_delete_private_datasets_local_and_bucket_prefix(tmp_path: Path) -> None:
    root = tmp_path / "derived" / "t" / "p" / "e"
    private = PrivateStore(str(root))
    private.ingest_values([(value_cid_wire(value_cid(1, b"v")), 1, b"v", "x")])
    assert "values_v1" in delete_private_datasets(str(root))
    assert not root.exists()
    assert delete_private_datasets(str(root)) == ()

    store = MemoryStore("bkt")
    put(store, "derived/v1/t/p/e/values_v1/data/a.lance", b"x")
    put(store, "derived/v1/t/p/e/projected_v1/_versions/1.manifest", b"x")
    put(store, "derived/v1/t/p/other/values_v1/data/a.lance", b"x")
    assert delete_private_datasets("s3://bkt/derived/v1/t/p/e", store) == (
        "projected_v1",
        "values_v1",
    )
    assert list(store.objects) == ["derived/v1/t/p/other/values_v1/data/a.lance"]
    with pytest.raises(ReplayError, match="not a prefix of the data plane's bucket"):
        delete_private_datasets("s3://elsewhere/derived/v1/t/p/e", store)
    with pytest.raises(ReplayError, match="only a local directory"):
        delete_private_datasets("gs://bkt/derived")


def test_cli_help_and_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    help_text = runner.invoke(replay_command, ["--help"]).output
    assert "Example" in help_text and "admin generation bump" in help_text
    assert "--lance-rebuild" in help_text
    base = ["--data", str(tmp_path), "--control-plane", "http://127.0.0.1:9", "--token", "t"]
    bad_scope = runner.invoke(replay_command, [*base, "--scope", "a/b"])
    assert bad_scope.exit_code == 2 and "TENANT/PROJECT/ENVIRONMENT" in bad_scope.output
    mixed = runner.invoke(replay_command, [*base, "--dead-letters", "--all"])
    assert mixed.exit_code == 2 and "--dead-letters" in mixed.output


def test_cli_exits_4_when_the_control_plane_is_unreachable(tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["--data", str(tmp_path), "--control-plane", "http://127.0.0.1:9", "--token", "t"]
    result = runner.invoke(replay_command, [*args, "--scope", "tn_a/prj/env"])
    assert result.exit_code == 4, result.output
    assert "ControlPlaneUnavailable" in result.output
    rebuild = runner.invoke(replay_command, [*args, "--scope", "tn_a/prj/env", "--all"])
    assert rebuild.exit_code == 0, rebuild.output  # a rebuild never asks the control plane
    assert json.loads(rebuild.stdout)["enqueued"] == {"pack": 0, "meta": 0}
