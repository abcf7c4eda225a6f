"""Metastore conformance: the hierarchy, deployments and catalog versions, on SQLite,
PostgreSQL and MariaDB alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from metastore_servers import T0, Clock

from baml_studio.control.metastore import (
    AlreadyExists,
    CatalogVersion,
    InvalidArgument,
    InvalidId,
    Metastore,
    MetastoreConflict,
    NotFoundInMetastore,
    ProjectRecord,
    TenantRecord,
    sqlite_url,
)
from baml_studio.control.model import DeploymentKind, DeploymentRecord, EnvironmentRecord
from baml_studio.gateway.config import SCOPE_PART, Scope

pytest_plugins = ("metastore_servers",)


def _hierarchy(metastore: Metastore, tenant: str = "acme", project: str = "web") -> None:
    metastore.create_tenant(tenant)
    metastore.create_project(tenant, project)


# -- hierarchy ------------------------------------------------------------------------------------


def test_hierarchy_is_created_and_listed(metastore: Metastore, metastore_clock: Clock) -> None:
    assert metastore.create_tenant("globex") == TenantRecord("globex", None, T0)
    metastore_clock.now += 5
    assert metastore.create_tenant("acme", name="Acme Inc.") == TenantRecord(
        "acme", "Acme Inc.", T0 + 5
    )
    assert metastore.create_project("acme", "web", name="Web") == ProjectRecord(
        "acme", "web", "Web", T0 + 5
    )
    metastore.create_project("acme", "api")
    prod = metastore.create_environment("acme", "web", "prod", name="Production")
    assert prod == EnvironmentRecord("acme", "web", "prod", "gen_1", T0 + 5)
    metastore.create_environment("acme", "web", "dev")
    metastore.create_environment("acme", "api", "prod")

    assert [t.tenant_id for t in metastore.list_tenants()] == ["acme", "globex"]
    assert metastore.list_tenants()[0].name == "Acme Inc."
    assert [p.project_id for p in metastore.list_projects("acme")] == ["api", "web"]
    assert metastore.list_projects("globex") == []
    assert [(e.project_id, e.environment_id) for e in metastore.list_environments("acme")] == [
        ("api", "prod"),
        ("web", "dev"),
        ("web", "prod"),
    ]
    assert [e.environment_id for e in metastore.list_environments("acme", "web")] == ["dev", "prod"]
    assert metastore.get_environment(Scope("acme", "web", "prod")) == prod
    assert metastore.get_environment(Scope("acme", "web", "staging")) is None


def test_creating_what_exists_raises_already_exists(metastore: Metastore) -> None:
    _hierarchy(metastore)
    metastore.create_environment("acme", "web", "prod")
    with pytest.raises(AlreadyExists, match="tenant 'acme'"):
        metastore.create_tenant("acme", name="again")
    with pytest.raises(AlreadyExists, match="acme/web"):
        metastore.create_project("acme", "web")
    with pytest.raises(AlreadyExists, match="acme/web/prod"):
        metastore.create_environment("acme", "web", "prod")
    assert metastore.list_tenants()[0].name is None
    assert len(metastore.generations(Scope("acme", "web", "prod"))) == 1


def test_missing_parents_raise_not_found(metastore: Metastore) -> None:
    with pytest.raises(NotFoundInMetastore, match=r"tenant 'acme'.*tenants create acme"):
        metastore.create_project("acme", "web")
    metastore.create_tenant("acme")
    with pytest.raises(NotFoundInMetastore, match="project acme/web"):
        metastore.create_environment("acme", "web", "prod")
    with pytest.raises(NotFoundInMetastore):
        metastore.list_projects("globex")
    with pytest.raises(NotFoundInMetastore):
        metastore.list_environments("globex")
    with pytest.raises(NotFoundInMetastore):
        metastore.list_environments("acme", "web")
    assert metastore.list_environments("acme") == []


@pytest.mark.parametrize("bad", ["", "has space", "-leading-dash", "a/b", "x" * 129, "é"])
def test_bad_ids_raise_invalid_id(metastore: Metastore, bad: str) -> None:
    with pytest.raises(InvalidId, match="not a valid id"):
        metastore.create_tenant(bad)
    metastore.create_tenant("acme")
    with pytest.raises(InvalidId):
        metastore.create_project("acme", bad)
    metastore.create_project("acme", "web")
    with pytest.raises(InvalidId):
        metastore.create_environment("acme", "web", bad)
    with pytest.raises(InvalidId):
        metastore.create_deployment(bad, DeploymentKind.ALIEN, "eu1")
    assert [t.tenant_id for t in metastore.list_tenants()] == ["acme"]


def test_valid_ids_round_trip_and_all_others_are_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    path: Path = tmp_path_factory.mktemp("ids") / "metastore.db"
    with Metastore.open(sqlite_url(path)) as metastore:

        @settings(max_examples=150, deadline=None)
        @given(st.from_regex(SCOPE_PART, fullmatch=True) | st.text(max_size=140))
        def check(text: str) -> None:
            if SCOPE_PART.fullmatch(text):
                if metastore.get_environment(Scope(text, text, text)) is None:
                    metastore.create_tenant(text)
                    metastore.create_project(text, text)
                    metastore.create_environment(text, text, text)
                assert text in {t.tenant_id for t in metastore.list_tenants()}
                assert metastore.active_generation(Scope(text, text, text)) == "gen_1"
            else:
                with pytest.raises(InvalidId):
                    metastore.create_tenant(text)

        check()


def test_names_are_bounded(metastore: Metastore) -> None:
    with pytest.raises(InvalidArgument, match="name"):
        metastore.create_tenant("acme", name="n" * 257)
    assert metastore.create_tenant("acme", name="n" * 256).name == "n" * 256


def test_ids_are_case_sensitive_on_every_backend(metastore: Metastore) -> None:
    metastore.create_tenant("acme")
    metastore.create_tenant("Acme")
    metastore.create_project("acme", "Web")
    metastore.create_project("acme", "web")
    assert [t.tenant_id for t in metastore.list_tenants()] == ["Acme", "acme"]
    assert metastore.list_projects("Acme") == []
    assert {p.project_id for p in metastore.list_projects("acme")} == {"Web", "web"}


def test_longest_ids_fit(metastore: Metastore) -> None:
    longest = "x" * 128
    metastore.create_tenant(longest)
    metastore.create_project(longest, longest)
    metastore.create_environment(longest, longest, longest)
    assert metastore.active_generation(Scope(longest, longest, longest)) == "gen_1"


# -- deployments ----------------------------------------------------------------------------------


def test_deployment_kinds_and_tenants(metastore: Metastore, metastore_clock: Clock) -> None:
    metastore.create_tenant("acme")
    byoc = metastore.create_deployment("dep-acme", DeploymentKind.BYOC, "eu1", tenant_id="acme")
    assert byoc == DeploymentRecord("dep-acme", DeploymentKind.BYOC, "eu1", "acme", T0)
    alien = metastore.create_deployment("cell-eu1", DeploymentKind.ALIEN, "eu1")
    assert metastore.get_deployment("cell-eu1") == alien
    assert metastore.get_deployment("dep-acme") == byoc
    assert metastore.get_deployment("nope") is None
    with pytest.raises(InvalidArgument, match="BYOC deployment belongs to one tenant"):
        metastore.create_deployment("dep-2", DeploymentKind.BYOC, "eu1")
    with pytest.raises(InvalidArgument, match="Alien cell deployment belongs to no tenant"):
        metastore.create_deployment("cell-2", DeploymentKind.ALIEN, "eu1", tenant_id="acme")
    with pytest.raises(NotFoundInMetastore, match="tenant 'globex'"):
        metastore.create_deployment("dep-3", DeploymentKind.BYOC, "eu1", tenant_id="globex")
    with pytest.raises(AlreadyExists, match="deployment 'dep-acme'"):
        metastore.create_deployment("dep-acme", DeploymentKind.ALIEN, "us1")
    with pytest.raises(InvalidId):
        metastore.create_deployment("dep-4", DeploymentKind.ALIEN, "bad cell")
    assert metastore.get_deployment("dep-2") is None


def test_byoc_deployment_serves_only_its_own_tenant(metastore: Metastore) -> None:
    for tenant in ("acme", "globex"):
        _hierarchy(metastore, tenant)
        metastore.create_environment(tenant, "web", "prod")
    metastore.create_deployment("dep-acme", DeploymentKind.BYOC, "eu1", tenant_id="acme")
    acme, globex = Scope("acme", "web", "prod"), Scope("globex", "web", "prod")

    metastore.assign_environment("dep-acme", acme)
    with pytest.raises(MetastoreConflict, match="BYOC deployment of tenant 'acme'"):
        metastore.assign_environment("dep-acme", globex)

    assert metastore.deployment_serves("dep-acme", acme)
    assert not metastore.deployment_serves("dep-acme", globex)
    assert metastore.deployment_environments("dep-acme") == [acme]


def test_alien_deployment_serves_several_tenants(metastore: Metastore) -> None:
    scopes = []
    for tenant in ("globex", "acme"):
        _hierarchy(metastore, tenant)
        metastore.create_environment(tenant, "web", "prod")
        scopes.append(Scope(tenant, "web", "prod"))
    metastore.create_deployment("cell-eu1", DeploymentKind.ALIEN, "eu1")
    for scope in scopes:
        metastore.assign_environment("cell-eu1", scope)
    assert metastore.deployment_environments("cell-eu1") == sorted(scopes)
    assert all(metastore.deployment_serves("cell-eu1", scope) for scope in scopes)


def test_assignment_rules(metastore: Metastore) -> None:
    _hierarchy(metastore)
    metastore.create_environment("acme", "web", "prod")
    prod, dev = Scope("acme", "web", "prod"), Scope("acme", "web", "dev")
    metastore.create_deployment("cell-eu1", DeploymentKind.ALIEN, "eu1")

    with pytest.raises(NotFoundInMetastore, match="deployment 'nope'"):
        metastore.assign_environment("nope", prod)
    with pytest.raises(NotFoundInMetastore, match="acme/web/dev"):
        metastore.assign_environment("cell-eu1", dev)
    metastore.assign_environment("cell-eu1", prod)
    with pytest.raises(AlreadyExists):
        metastore.assign_environment("cell-eu1", prod)

    metastore.unassign_environment("cell-eu1", prod)
    assert not metastore.deployment_serves("cell-eu1", prod)
    assert metastore.deployment_environments("cell-eu1") == []
    with pytest.raises(NotFoundInMetastore, match="does not serve"):
        metastore.unassign_environment("cell-eu1", prod)
    with pytest.raises(NotFoundInMetastore):
        metastore.deployment_environments("nope")
    assert not metastore.deployment_serves("nope", prod)


# -- catalog versions -----------------------------------------------------------------------------


def test_catalog_versions_are_idempotent_and_immutable(
    metastore: Metastore, metastore_clock: Clock
) -> None:
    first = metastore.register_catalog_version("v1", "sha256:aaaa")
    assert first == CatalogVersion("v1", "sha256:aaaa", T0)
    metastore_clock.now += 60
    assert metastore.register_catalog_version("v1", "sha256:aaaa") == first
    with pytest.raises(MetastoreConflict, match="'v1' is registered with schema digest"):
        metastore.register_catalog_version("v1", "sha256:bbbb")
    second = metastore.register_catalog_version("v2", "sha256:bbbb")
    assert metastore.catalog_version("v1") == first
    assert metastore.catalog_version("v3") is None
    assert metastore.catalog_versions() == [first, second]
    with pytest.raises(InvalidId):
        metastore.register_catalog_version("v 1", "sha256:aaaa")
    with pytest.raises(InvalidArgument, match="schema digest"):
        metastore.register_catalog_version("v4", "")
