"""Metastore conformance: the token registry (hashes only, revocation, expiry filtering)."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest
from metastore_servers import T0, Clock
from sqlalchemy import create_engine, update

from baml_studio.control.metastore import (
    AlreadyExists,
    InvalidArgument,
    InvalidId,
    Metastore,
    MetastoreConflict,
    MetastoreError,
    NotFoundInMetastore,
)
from baml_studio.control.metastore.tables import tokens
from baml_studio.control.model import DeploymentKind, TokenKind, TokenRecord

pytest_plugins = ("metastore_servers",)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def user(token_id: str = "tok_user1", tenant: str = "acme", **changes: object) -> TokenRecord:
    record = TokenRecord(
        token_id=token_id,
        kind=TokenKind.USER,
        tenant_id=tenant,
        token_hash=sha256(token_id),
        issued_at=T0,
        expires_at=T0 + 3600,
        project_id="web",
        environments=("dev", "prod"),
        erasure=True,
    )
    return replace(record, **changes)  # type: ignore[arg-type]  # reason: test overrides


def publisher(token_id: str = "tok_pub1") -> TokenRecord:
    return TokenRecord(
        token_id=token_id,
        kind=TokenKind.PUBLISHER,
        tenant_id="acme",
        token_hash=sha256(token_id),
        issued_at=T0,
        expires_at=T0 + 365 * 86400,
        project_id="web",
        environments=("prod",),
    )


def workload(
    token_id: str = "tok_work1", deployment: str = "dep-acme", cell: str = "eu1"
) -> TokenRecord:
    return TokenRecord(
        token_id=token_id,
        kind=TokenKind.WORKLOAD,
        tenant_id="acme",
        token_hash=sha256(token_id),
        issued_at=T0,
        expires_at=T0 + 900,
        deployment_id=deployment,
        cell=cell,
    )


@pytest.fixture
def seeded(metastore: Metastore) -> Metastore:
    for tenant in ("acme", "globex"):
        metastore.create_tenant(tenant)
        metastore.create_project(tenant, "web")
        for environment in ("dev", "prod"):
            metastore.create_environment(tenant, "web", environment)
    metastore.create_deployment("dep-acme", DeploymentKind.BYOC, "eu1", tenant_id="acme")
    metastore.create_deployment("dep-globex", DeploymentKind.BYOC, "eu1", tenant_id="globex")
    metastore.create_deployment("cell-eu1", DeploymentKind.ALIEN, "eu1")
    return metastore


def test_every_kind_round_trips(seeded: Metastore) -> None:
    records = [user(), publisher(), workload(), workload("tok_work2", deployment="cell-eu1")]
    for record in records:
        seeded.record_token(record)
    for record in records:
        assert seeded.get_token(record.token_id) == record
    assert seeded.get_token("tok_missing") is None
    with pytest.raises(AlreadyExists, match="tok_user1"):
        seeded.record_token(replace(user(), token_hash=sha256("other")))
    assert seeded.get_token("tok_user1") == user()


def test_token_state_compares_the_hash(seeded: Metastore) -> None:
    seeded.record_token(user())
    assert seeded.token_state("tok_user1", sha256("tok_user1")) == "active"
    assert seeded.token_state("tok_user1", sha256("forged")) == "unknown"
    assert seeded.token_state("tok_user1", sha256("tok_user1").upper()) == "unknown"
    assert seeded.token_state("tok_user1", "ü") == "unknown"
    assert seeded.token_state("tok_nobody", sha256("tok_nobody")) == "unknown"
    assert seeded.token_state("not an id", sha256("tok_user1")) == "unknown"
    assert seeded.revoke_token("tok_user1") is True
    assert seeded.token_state("tok_user1", sha256("tok_user1")) == "revoked"
    assert seeded.token_state("tok_user1", sha256("forged")) == "unknown"


def test_revocation_keeps_the_first_time(seeded: Metastore, metastore_clock: Clock) -> None:
    seeded.record_token(user())
    metastore_clock.now += 100
    assert seeded.revoke_token("tok_user1") is True
    metastore_clock.now += 100
    assert seeded.revoke_token("tok_user1") is False
    token = seeded.get_token("tok_user1")
    assert token is not None
    assert token.revoked_at == T0 + 100
    with pytest.raises(NotFoundInMetastore, match="tok_nobody"):
        seeded.revoke_token("tok_nobody")


def test_revoked_list_leaves_out_expired_tokens(seeded: Metastore, metastore_clock: Clock) -> None:
    seeded.record_token(user("tok_short", expires_at=T0 + 60))
    seeded.record_token(user("tok_long", expires_at=T0 + 7200))
    seeded.record_token(user("tok_kept"))
    seeded.revoke_token("tok_short")
    seeded.revoke_token("tok_long")
    assert seeded.revoked_token_ids() == ["tok_long", "tok_short"]
    metastore_clock.now = T0 + 60
    assert seeded.revoked_token_ids() == ["tok_long"]
    metastore_clock.now = T0 + 7200
    assert seeded.revoked_token_ids() == []


def test_list_tokens_filters_and_orders(seeded: Metastore) -> None:
    seeded.record_token(user("tok_b", issued_at=T0 + 2))
    seeded.record_token(user("tok_a", issued_at=T0 + 2))
    seeded.record_token(user("tok_old", issued_at=T0))
    seeded.record_token(user("tok_globex", tenant="globex"))
    seeded.revoke_token("tok_b")
    assert [r.token_id for r in seeded.list_tokens()] == ["tok_globex", "tok_old", "tok_a"]
    assert [r.token_id for r in seeded.list_tokens("acme")] == ["tok_old", "tok_a"]
    everything = seeded.list_tokens("acme", include_revoked=True)
    assert [r.token_id for r in everything] == ["tok_old", "tok_a", "tok_b"]
    assert everything[-1].revoked_at == T0


def test_references_must_exist(seeded: Metastore) -> None:
    with pytest.raises(NotFoundInMetastore, match="tenant 'initech'"):
        seeded.record_token(user(tenant="initech"))
    with pytest.raises(NotFoundInMetastore, match="project acme/api"):
        seeded.record_token(user(project_id="api"))
    with pytest.raises(NotFoundInMetastore, match="acme/web/staging"):
        seeded.record_token(user(environments=("prod", "staging")))
    with pytest.raises(NotFoundInMetastore, match="deployment 'dep-nope'"):
        seeded.record_token(workload(deployment="dep-nope"))
    with pytest.raises(NotFoundInMetastore, match="tok_gone"):
        seeded.record_token(user("tok_new", replaces="tok_gone"))
    assert seeded.list_tokens(include_revoked=True) == []


def test_workload_tokens_match_their_deployment(seeded: Metastore) -> None:
    with pytest.raises(MetastoreConflict, match="dep-globex"):
        seeded.record_token(workload(deployment="dep-globex"))
    with pytest.raises(MetastoreConflict, match="cell 'us1'"):
        seeded.record_token(workload(cell="us1"))
    seeded.record_token(workload(deployment="cell-eu1"))


def test_rotation_replaces_a_token_of_the_same_tenant_and_kind(seeded: Metastore) -> None:
    seeded.record_token(user())
    seeded.record_token(publisher())
    rotated = user("tok_user2", replaces="tok_user1")
    seeded.record_token(rotated)
    assert seeded.get_token("tok_user2") == rotated
    with pytest.raises(MetastoreConflict, match="same tenant and kind"):
        seeded.record_token(user("tok_user3", replaces="tok_pub1"))


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (user(token_hash="not-a-hash"), "token_hash"),
        (user(token_hash="A" * 64), "token_hash"),
        (user(expires_at=T0), "expires before"),
        (user(environments=()), "at least one environment"),
        (user(project_id=None), "needs project_id"),
        (user(deployment_id="dep-acme"), "takes no deployment_id"),
        (replace(publisher(), environments=("dev", "prod")), "exactly one environment"),
        (replace(publisher(), erasure=True), "no erasure"),
        (replace(workload(), cell=None), "needs deployment_id and cell"),
        (replace(workload(), project_id="web"), "takes no project"),
    ],
)
def test_malformed_records_are_refused(
    seeded: Metastore, record: TokenRecord, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        seeded.record_token(record)
    assert seeded.get_token(record.token_id) is None


def test_bad_token_ids_are_invalid(seeded: Metastore) -> None:
    with pytest.raises(InvalidId):
        seeded.record_token(user("tok with space"))
    with pytest.raises(InvalidId):
        seeded.get_token("tok/../x")
    with pytest.raises(InvalidId):
        seeded.revoke_token("")


@pytest.mark.parametrize(
    ("column", "value"),
    [("environments", "{not json"), ("environments", '{"a": 1}'), ("kind", "root")],
)
def test_a_damaged_token_row_is_a_metastore_error_naming_it(
    seeded: Metastore, metastore_url: str, column: str, value: str
) -> None:
    """A token row this version cannot read fails the calls that read it with a typed
    MetastoreError naming the token (it was JSONDecodeError or ValueError); other tokens read."""
    seeded.record_token(user())
    seeded.record_token(publisher())
    engine = create_engine(metastore_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                update(tokens).where(tokens.c.token_id == "tok_user1").values({column: value})
            )
    finally:
        engine.dispose()
    with pytest.raises(MetastoreError, match="token 'tok_user1' in the metastore cannot be read"):
        seeded.get_token("tok_user1")
    assert seeded.get_token("tok_pub1") == publisher()
