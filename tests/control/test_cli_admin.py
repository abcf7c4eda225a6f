"""``baml-studio admin``: every command, its JSON output, its help and its exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from metastore_servers import closed_port, empty_store

from baml_studio.cli import main
from baml_studio.cli_admin import (
    EXIT_INPUT,
    EXIT_UNAVAILABLE,
    admin_group,
    echo_json,
    with_metastore,
)
from baml_studio.control.metastore import Metastore, sqlite_url
from baml_studio.gateway.config import Scope

pytest_plugins = ("metastore_servers",)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "control"


def run(*args: str, data: Path | None = None, code: int = 0) -> Result:
    where = ["--data", str(data)] if data is not None else []
    result = CliRunner().invoke(main, ["admin", *args, *where])
    assert result.exit_code == code, (result.output, result.exception)
    return result


def run_json(*args: str, data: Path) -> dict[str, Any]:
    document = json.loads(run(*args, data=data).stdout)
    assert isinstance(document, dict)
    return document


def _seed(data: Path) -> None:
    run("tenants", "create", "acme", data=data)
    run("projects", "create", "acme", "web", data=data)
    run("environments", "create", "acme", "web", "prod", data=data)


def test_tenants(data: Path) -> None:
    created = run_json("tenants", "create", "acme", "--name", "Acme Inc.", data=data)
    assert created["tenant_id"] == "acme"
    assert created["name"] == "Acme Inc."
    assert isinstance(created["created_at"], int)
    run("tenants", "create", "globex", data=data)
    listed = run_json("tenants", "list", data=data)
    assert [t["tenant_id"] for t in listed["tenants"]] == ["acme", "globex"]
    assert (data / "metastore.db").is_file()


def test_projects_and_environments(data: Path) -> None:
    run("tenants", "create", "acme", data=data)
    project = run_json("projects", "create", "acme", "web", data=data)
    assert (project["tenant_id"], project["project_id"], project["name"]) == ("acme", "web", None)
    run("projects", "create", "acme", "api", data=data)
    assert [
        p["project_id"] for p in run_json("projects", "list", "acme", data=data)["projects"]
    ] == [
        "api",
        "web",
    ]
    env = run_json("environments", "create", "acme", "web", "prod", data=data)
    assert env["active_generation"] == "gen_1"
    assert (env["tenant_id"], env["project_id"], env["environment_id"]) == ("acme", "web", "prod")
    run("environments", "create", "acme", "api", "dev", data=data)
    everything = run_json("environments", "list", "acme", data=data)["environments"]
    assert [(e["project_id"], e["environment_id"]) for e in everything] == [
        ("api", "dev"),
        ("web", "prod"),
    ]
    web = run_json("environments", "list", "acme", "--project", "web", data=data)["environments"]
    assert [e["environment_id"] for e in web] == ["prod"]


def test_deployments(data: Path) -> None:
    _seed(data)
    byoc = run_json(
        "deployments", "create", "dep-1", "--kind", "byoc", "--cell", "eu1", "--tenant", "acme",
        data=data,
    )  # fmt: skip
    assert byoc["kind"] == "byoc"
    assert (byoc["deployment_id"], byoc["cell"], byoc["tenant_id"]) == ("dep-1", "eu1", "acme")
    alien = run_json(
        "deployments", "create", "cell-1", "--kind", "alien", "--cell", "eu1", data=data
    )
    assert (alien["kind"], alien["tenant_id"]) == ("alien", None)
    assigned = run_json("deployments", "assign", "dep-1", "acme", "web", "prod", data=data)
    prod = {"tenant": "acme", "project": "web", "environment": "prod"}
    assert assigned == {"deployment_id": "dep-1", "assigned": prod, "environments": [prod]}
    with Metastore.open(sqlite_url(data / "metastore.db")) as store:
        assert store.deployment_serves("dep-1", Scope("acme", "web", "prod"))


def test_generation_show_and_bump(data: Path) -> None:
    _seed(data)
    shown = run_json("generation", "show", "acme", "web", "prod", data=data)
    assert shown["active_generation"] == "gen_1"
    assert [g["generation"] for g in shown["generations"]] == ["gen_1"]
    bumped = run_json("generation", "bump", "acme", "web", "prod", data=data)
    assert bumped == {
        "tenant": "acme",
        "project": "web",
        "environment": "prod",
        "active_generation": "gen_2",
    }
    shown = run_json("generation", "show", "acme", "web", "prod", data=data)
    assert shown["active_generation"] == "gen_2"
    assert [(g["generation"], g["active"]) for g in shown["generations"]] == [
        ("gen_1", False),
        ("gen_2", True),
    ]


def test_a_server_metastore_url(postgres_database: str) -> None:
    empty_store(postgres_database)
    result = CliRunner().invoke(
        main, ["admin", "tenants", "create", "acme", "--metastore", postgres_database]
    )
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(
        main, ["admin", "tenants", "list", "--metastore", postgres_database]
    )
    assert [t["tenant_id"] for t in json.loads(result.stdout)["tenants"]] == ["acme"]
    empty_store(postgres_database)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("tenants", "create", "acme"), "tenant 'acme' already exists"),
        (("tenants", "create", "bad id"), "not a valid id"),
        (("projects", "create", "globex", "web"), "tenant 'globex' does not exist"),
        (("projects", "list", "globex"), "does not exist"),
        (("environments", "create", "acme", "api", "prod"), "project acme/api does not exist"),
        (("environments", "list", "acme", "--project", "api"), "does not exist"),
        (
            ("deployments", "create", "d", "--kind", "byoc", "--cell", "eu1"),
            "belongs to one tenant",
        ),
        (("deployments", "create", "d", "--kind", "moon", "--cell", "eu1"), "moon"),
        (("deployments", "assign", "nope", "acme", "web", "prod"), "deployment 'nope'"),
        (("deployments", "assign", "g", "acme", "web", "prod"), "BYOC deployment of tenant"),
        (("generation", "show", "acme", "web", "nope"), "acme/web/nope does not exist"),
        (("generation", "bump", "acme", "web", "bad/env"), "not a valid id"),
    ],
)
def test_bad_input_exits_2_with_a_clean_message(
    data: Path, args: tuple[str, ...], message: str
) -> None:
    _seed(data)
    run("tenants", "create", "globex2", data=data)
    run(
        "deployments",
        "create",
        "g",
        "--kind",
        "byoc",
        "--cell",
        "eu1",
        "--tenant",
        "globex2",
        data=data,
    )
    result = run(*args, data=data, code=EXIT_INPUT)
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_an_unreachable_metastore_exits_3() -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/x"
    result = CliRunner().invoke(main, ["admin", "tenants", "list", "--metastore", url])
    assert result.exit_code == EXIT_UNAVAILABLE, result.output
    assert "metastore is unavailable" in result.stderr


def test_a_metastore_file_that_is_not_a_database_exits_3(tmp_path: Path) -> None:
    """It was exit 2, "bad input", though nothing the command was given was wrong."""
    (tmp_path / "metastore.db").write_bytes(b"not a database, " * 100)
    result = run("tenants", "list", data=tmp_path, code=EXIT_UNAVAILABLE)
    assert "not a database" in result.stderr and "Traceback" not in result.output


def test_a_name_that_is_not_text_exits_2(data: Path) -> None:
    """Bytes that are not UTF-8 on a command line reach Python as lone surrogates: it was a
    UnicodeEncodeError traceback from the database driver."""
    result = run("tenants", "create", "acme3", "--name", "caf\udce9", data=data, code=EXIT_INPUT)
    assert "UTF-8" in result.stderr and "Traceback" not in result.output
    assert [t["tenant_id"] for t in run_json("tenants", "list", data=data)["tenants"]] == []


@pytest.mark.parametrize("where", [[], ["--data", "d", "--metastore", "sqlite:///x.db"]])
def test_exactly_one_location_is_required(where: list[str]) -> None:
    result = CliRunner().invoke(main, ["admin", "tenants", "list", *where])
    assert result.exit_code == 2
    assert "exactly one of --metastore URL or --data DIR" in result.stderr


def _commands(
    group: click.Group, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], click.Command]]:
    found: list[tuple[tuple[str, ...], click.Command]] = [(path, group)]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += _commands(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


COMMANDS = _commands(admin_group)


@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=[" ".join(path) or "admin" for path, _ in COMMANDS]
)
def test_every_command_has_help_with_an_example(
    path: tuple[str, ...], command: click.Command
) -> None:
    result = CliRunner().invoke(main, ["admin", *path, "--help"])
    assert result.exit_code == 0
    assert "Example:" in result.stdout
    assert f"baml-studio admin {' '.join(path)}".strip() in result.stdout
    if not isinstance(command, click.Group):
        assert "--data" in result.stdout
        if path[0] != "keys":  # the signing keys live in DATA/control-keys.json, not the metastore
            assert "--metastore" in result.stdout


def test_the_group_documents_its_exit_codes() -> None:
    text = CliRunner().invoke(main, ["admin", "--help"]).stdout
    assert "Exit codes:" in text
    assert f"{EXIT_INPUT}  bad input" in text
    assert f"{EXIT_UNAVAILABLE}  the metastore is unavailable" in text


def test_other_modules_can_build_admin_commands_on_the_same_shell(data: Path) -> None:
    @click.command("probe")
    @with_metastore
    def probe(store: Metastore) -> None:
        echo_json({"dialect": store.dialect, "tenants": len(store.list_tenants())})

    result = CliRunner().invoke(probe, ["--data", str(data)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"dialect": "sqlite", "tenants": 0}
    assert CliRunner().invoke(probe, []).exit_code == EXIT_INPUT
