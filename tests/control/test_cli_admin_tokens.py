"""``admin tokens …`` and ``admin keys …`` on a local ``admin`` group with an in-memory registry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from baml_studio.apierrors import DependencyUnavailable, Unauthenticated
from baml_studio.cli_admin_tokens import register
from baml_studio.control.identity import (
    TOKEN_ID,
    ControlKeys,
    MemoryTokenRegistry,
    TokenRegistry,
    TokenVerifier,
)
from baml_studio.control.model import TokenKind, TokenRecord
from baml_studio.format.errors import BamlStudioError
from baml_studio.gateway.config import Scope
from baml_studio.gateway.tokens import PublisherTokenVerifier


class Admin:
    def __init__(self, data: Path, registry: Any) -> None:
        self.data = data
        self.registry = registry
        self.opened_with: list[Path] = []

        @click.group()
        def admin() -> None:
            """Administer the control plane.

            Example: baml-studio admin tokens list --data ./control
            """

        def open_registry(ctx: click.Context) -> TokenRegistry:
            self.opened_with.append(ctx.params["data"])
            return self.registry  # type: ignore[no-any-return]

        register(admin, open_registry)
        self.group = admin

    def run(self, *args: str) -> Result:
        return CliRunner().invoke(self.group, [*args[:2], "--data", str(self.data), *args[2:]])

    def issue(self, kind: str, *args: str) -> Result:
        return CliRunner().invoke(
            self.group, ["tokens", "issue", kind, "--data", str(self.data), *args]
        )

    def ok(self, result: Result) -> Any:
        assert result.exit_code == 0, result.output
        return json.loads(result.output)


@pytest.fixture
def admin(tmp_path: Path) -> Admin:
    return Admin(tmp_path / "control", MemoryTokenRegistry())


def verifier(admin: Admin) -> TokenVerifier:
    return TokenVerifier(ControlKeys.in_dir(admin.data).ring, admin.registry)


PUBLISHER = ["--tenant", "tn_acme", "--project", "prj_billing", "--environment", "env_prod"]


def test_issue_each_kind_prints_a_verifiable_token(admin: Admin) -> None:
    publisher = admin.ok(admin.issue("publisher", *PUBLISHER, "--ttl", "30d"))
    assert set(publisher) >= {"token", "token_id", "expires_at"}
    assert TOKEN_ID.fullmatch(publisher["token_id"])
    assert (admin.data / "control-keys.json").exists()
    identity = verifier(admin).verify(publisher["token"], TokenKind.PUBLISHER)
    assert identity.scope == Scope("tn_acme", "prj_billing", "env_prod")
    assert identity.expires_at == publisher["expires_at"]
    keys = ControlKeys.in_dir(admin.data).ring
    assert PublisherTokenVerifier(keys).verify(publisher["token"]).token_id == identity.token_id

    user = admin.ok(
        admin.issue(
            "user",
            *PUBLISHER,
            "--environment",
            "env_dev",
            "--erasure",
        )
    )
    got = verifier(admin).verify(user["token"], TokenKind.USER)
    assert got.environments == ("env_prod", "env_dev") and got.erasure is True
    assert got.expires_at - got.issued_at == 8 * 3600

    workload = admin.ok(
        admin.issue("workload", "--tenant", "tn_acme", "--deployment", "dep_1", "--cell", "c1")
    )
    got_workload = verifier(admin).verify(workload["token"], TokenKind.WORKLOAD)
    assert (got_workload.deployment, got_workload.cell) == ("dep_1", "c1")
    assert got_workload.expires_at - got_workload.issued_at == 900
    assert admin.opened_with == [admin.data] * 3


def test_quiet_prints_the_token_alone_for_a_shell(admin: Admin) -> None:
    """``TOKEN=$(baml-studio admin tokens issue … -q)``: the README's recipes captured the JSON
    document, and every command given it as a token was refused."""
    workload = ["--tenant", "tn_acme", "--deployment", "dep_1", "--cell", "c1"]
    for kind, args, token_kind in (("publisher", PUBLISHER, TokenKind.PUBLISHER),
                                   ("user", PUBLISHER, TokenKind.USER),
                                   ("workload", workload, TokenKind.WORKLOAD)):  # fmt: skip
        result = admin.issue(kind, *args, "-q")
        assert result.exit_code == 0, result.output
        token = result.output.removesuffix("\n")
        assert "\n" not in token and token.count(".") == 2
        identity = verifier(admin).verify(token, token_kind)
        tenant = identity.scope.tenant if kind == "publisher" else identity.tenant
        assert tenant == "tn_acme"
    first = admin.ok(admin.issue("publisher", *PUBLISHER))
    rotated = admin.run("tokens", "rotate", first["token_id"], "--quiet")
    assert rotated.exit_code == 0, rotated.output
    assert verifier(admin).verify(rotated.output.strip(), TokenKind.PUBLISHER).scope == Scope(
        "tn_acme", "prj_billing", "env_prod"
    )


def test_issue_refuses_bad_input_with_exit_2(admin: Admin) -> None:
    too_long = admin.issue(
        "workload", "--tenant", "tn_acme", "--deployment", "d", "--cell", "c", "--ttl", "2h"
    )
    assert too_long.exit_code == 2 and "3600" in too_long.output
    assert admin.issue("publisher", *PUBLISHER[:-1], "env/prod").exit_code == 2
    assert admin.issue("user", *PUBLISHER, "--ttl", "soon").exit_code == 2
    assert admin.registry.list_tokens(include_revoked=True) == []


def test_revoke_rotate_and_list(admin: Admin) -> None:
    first = admin.ok(admin.issue("publisher", *PUBLISHER))
    rotated = admin.ok(admin.run("tokens", "rotate", first["token_id"]))
    assert rotated["replaces"] == first["token_id"] and rotated["token_id"] != first["token_id"]
    assert rotated["expires_at"] - first["expires_at"] in (0, 1)
    listed = admin.ok(admin.run("tokens", "list"))["tokens"]
    assert {r["token_id"] for r in listed} == {first["token_id"], rotated["token_id"]}
    assert all("token" not in r and "token_hash" not in r for r in listed)

    revoked = admin.ok(admin.run("tokens", "revoke", first["token_id"]))
    assert revoked["already_revoked"] is False and revoked["revoked_at"]
    again = admin.ok(admin.run("tokens", "revoke", first["token_id"]))
    assert again["already_revoked"] is True
    listed = admin.ok(admin.run("tokens", "list"))["tokens"]
    assert [r["token_id"] for r in listed] == [rotated["token_id"]]
    everything = admin.ok(admin.run("tokens", "list", "--all", "--tenant", "tn_acme"))
    assert len(everything["tokens"]) == 2
    assert admin.ok(admin.run("tokens", "list", "--tenant", "tn_other")) == {"tokens": []}

    unknown = admin.run("tokens", "revoke", "tok_01J8ZK3V5N4Q2W8X7Y6T5R4E3D")
    assert unknown.exit_code == 2 and "no token" in unknown.output
    assert admin.run("tokens", "rotate", first["token_id"]).exit_code == 2


def test_registry_outage_exits_3(admin: Admin) -> None:
    admin.registry.fail = DependencyUnavailable("metastore down")
    result = admin.issue("publisher", *PUBLISHER)
    assert result.exit_code == 3 and "metastore down" in result.output


def test_registry_errors_of_another_tree_map_to_exit_codes(admin: Admin) -> None:
    class Refused(BamlStudioError):
        transient = False

    class Busy(BamlStudioError):
        transient = True

    for error, code in ((Refused("no tenant 'tn_acme'"), 2), (Busy("database is locked"), 3)):
        admin.registry.fail = error
        result = admin.issue("publisher", *PUBLISHER)
        assert result.exit_code == code and str(error) in result.output


def test_factory_sees_the_metastore_option(admin: Admin) -> None:
    seen: list[Any] = []

    @click.group()
    def group() -> None:
        """Example: admin"""

    def open_registry(ctx: click.Context) -> TokenRegistry:
        seen.append((ctx.params["data"], ctx.params["metastore_url"]))
        return admin.registry  # type: ignore[no-any-return]

    register(group, open_registry)
    url = "postgresql+psycopg://db/control"
    args = ["tokens", "list", "--data", str(admin.data), "--metastore", url]
    assert CliRunner().invoke(group, args).exit_code == 0
    assert seen == [(admin.data, url)]


def test_list_needs_a_listing_registry(tmp_path: Path) -> None:
    class Minimal:
        def get_token(self, token_id: str) -> TokenRecord | None:
            return None

    admin = Admin(tmp_path / "control", Minimal())
    result = admin.run("tokens", "list")
    assert result.exit_code == 3 and "cannot list" in result.output


def test_keys_rotate_retire_and_jwks(admin: Admin) -> None:
    first = admin.ok(admin.issue("publisher", *PUBLISHER))
    old_kid = ControlKeys.in_dir(admin.data).ring().active
    rotated = admin.ok(admin.run("keys", "rotate"))
    assert rotated["active"] != old_kid and rotated["kids"] == [old_kid, rotated["active"]]
    jwks = admin.ok(admin.run("keys", "jwks"))
    assert [k["kid"] for k in jwks["keys"]] == rotated["kids"]
    assert all(set(k) == {"kty", "crv", "x", "kid", "alg", "use"} for k in jwks["keys"])
    assert verifier(admin).verify(first["token"], TokenKind.PUBLISHER)

    active = admin.run("keys", "retire", rotated["active"])
    assert active.exit_code == 2 and "active" in active.output
    assert admin.run("keys", "retire", "k_nope").exit_code == 2
    retired = admin.ok(admin.run("keys", "retire", old_kid))
    assert retired["kids"] == [rotated["active"]]
    with pytest.raises(Unauthenticated, match="unknown"):
        verifier(admin).verify(first["token"], TokenKind.PUBLISHER)


def test_every_command_is_documented_with_an_example(admin: Admin) -> None:
    def walk(group: click.Group, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
        found: list[tuple[tuple[str, ...], Any]] = []
        for name, command in group.commands.items():
            found.append(((*path, name), command))
            if isinstance(command, click.Group):
                found.extend(walk(command, (*path, name)))
        return found

    commands = walk(admin.group, ())
    names = {path for path, _ in commands}
    assert {
        ("tokens", "issue", "user"),
        ("tokens", "issue", "publisher"),
        ("tokens", "issue", "workload"),
        ("tokens", "revoke"),
        ("tokens", "rotate"),
        ("tokens", "list"),
        ("keys", "rotate"),
        ("keys", "retire"),
        ("keys", "jwks"),
    } <= names
    for path, command in commands:
        assert "Example:" in (command.help or ""), path
        shown = CliRunner().invoke(admin.group, [*path, "--help"])
        assert shown.exit_code == 0, path
        if not isinstance(command, click.Group):
            assert "--data" in shown.output, path
