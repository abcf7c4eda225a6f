"""``tokens mint`` / ``tokens rotate`` and the help of ``serve dataplane``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from baml_studio import cli_gateway
from baml_studio.cli_gateway import parse_ttl, serve, tokens
from baml_studio.gateway.config import Scope
from baml_studio.gateway.tokens import KeyRingFile, PublisherTokenVerifier


def test_gateway_cli_mint_and_rotate(tmp_path: Path) -> None:
    data = tmp_path / "dp"
    args = ["mint", "--data", str(data), "--tenant", "t", "--project", "p", "--environment", "e"]
    result = CliRunner().invoke(tokens, [*args, "--ttl", "15m"])
    assert result.exit_code == 0, result.output
    token = result.output.strip()
    keys = KeyRingFile(data / "keys" / "publisher-keys.json")
    identity = PublisherTokenVerifier(keys.load).verify(token)
    assert identity.scope == Scope("t", "p", "e")
    environments = json.loads((data / "environments.json").read_text())
    assert environments == {"environments": [{"tenant": "t", "project": "p", "environment": "e"}]}
    old = keys.load().active
    rotated = CliRunner().invoke(tokens, ["rotate", "--data", str(data), "--retire", old])
    assert rotated.exit_code == 0, rotated.output
    assert KeyRingFile(keys.path).load().active == rotated.output.strip() != old
    bad = CliRunner().invoke(tokens, [*args[:-1], "a/b"])
    assert bad.exit_code == 2
    before = (data / "keys" / "publisher-keys.json").read_bytes()
    unknown = CliRunner().invoke(tokens, ["rotate", "--data", str(data), "--retire", "k_nope"])
    assert unknown.exit_code == 2 and "k_nope" in unknown.output, unknown.output
    # nothing saved, and the keys it lists are the ring's (it listed a new key it had not saved)
    assert (data / "keys" / "publisher-keys.json").read_bytes() == before
    listed = unknown.output[unknown.output.index("ring [") :]
    assert listed.count("k_") == len(KeyRingFile(keys.path).load().keys)


def test_gateway_cli_ttl() -> None:
    texts = ("90", "90s", "15m", "1h", "7d", "1w")
    assert [parse_ttl(t) for t in texts] == [90, 90, 900, 3600, 604800, 604800]
    for bad in ("0s", "1x", "h", "400d"):
        try:
            parse_ttl(bad)
        except click.BadParameter:
            continue
        raise AssertionError(bad)


def test_gateway_cli_commands_are_documented() -> None:
    for group in (serve, tokens):
        assert isinstance(group, click.Group)
        assert "Example:" in (group.help or "")
        for command in group.commands.values():
            assert "Example:" in (command.help or ""), command.name


def test_serve_dataplane_workload_token_usage_errors_open_nothing(tmp_path: Path) -> None:
    data = tmp_path / "dp"
    unset: dict[str, str | None] = {"BAML_WORKLOAD_TOKEN": None, "BAML_WORKLOAD_TOKEN_FILE": None}
    control = ["--control-plane", "http://127.0.0.1:9"]
    token = tmp_path / "workload.token"
    token.write_text("t\n")
    cases = [
        (["--workload-token", "t"], "needs --control-plane"),
        (["--workload-token-file", str(token)], "needs --control-plane"),
        ([*control, "--workload-token-file", str(tmp_path / "missing")], "does not exist"),
        ([*control, "--workload-token", "t", "--workload-token-file", str(token)], "not both"),
    ]
    for extra, says in cases:
        args = ["dataplane", "--data", str(data), "--port", "1", *extra]
        result = CliRunner().invoke(serve, args, env=unset)
        assert result.exit_code == 2, (extra, result.output)
        assert says in result.output, (extra, result.output)
    assert not data.exists()


@pytest.mark.parametrize("variable", ["BAML_WORKLOAD_TOKEN", "BAML_WORKLOAD_TOKEN_FILE"])
def test_serve_dataplane_without_a_control_plane_ignores_a_workload_token_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """A workload token set in the environment (for a projector on the same machine) does not
    stop a gateway-only start: it is ignored with a note, and no coordinator is attached."""
    served: list[Any] = []
    monkeypatch.setattr(cli_gateway, "serve_until_signalled", lambda app, **kw: served.append(app))
    token = tmp_path / "workload.token"
    token.write_text("t\n")
    env: dict[str, str | None] = {"BAML_WORKLOAD_TOKEN": None, "BAML_WORKLOAD_TOKEN_FILE": None}
    env[variable] = "t" if variable == "BAML_WORKLOAD_TOKEN" else str(token)
    args = ["dataplane", "--data", str(tmp_path / "dp"), "--port", "8787"]
    result = CliRunner().invoke(serve, args, env=env)
    assert result.exit_code == 0, result.output
    assert "serving the gateway without the query coordinator" in result.output
    assert "query coordinator on" not in result.output
    assert len(served) == 1
    with TestClient(served[0]) as client:  # the app as served: no coordinator route
        assert client.post("/v1/query", json={"sql": "SELECT 1"}).status_code == 404
        refused = client.get("/v1/publisher/config")  # the gateway's route, no token given
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] != "not_found", refused.text


def _dataplane_dir(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    data = tmp_path / name
    for relative, text in files.items():
        (data / relative).parent.mkdir(parents=True, exist_ok=True)
        (data / relative).write_text(text)
    return data


@pytest.mark.parametrize(
    ("files", "code", "says"),
    [
        ({"dataplane.json": '{"public_base_url": "not a url"}'}, 2, "must start with http"),
        ({"dataplane.json": '{"s3": {"bucket": "evidence", "endpoint_url": "notaurl"}}'}, 2,
         "endpoint"),
        ({"queue/projection.sqlite3": "garbage"}, 4, "file is not a database"),
        ({"buckets": "a file where a directory goes"}, 4, "is unusable"),
    ],
)  # fmt: skip
def test_serve_dataplane_refuses_what_it_cannot_use_without_a_traceback(
    tmp_path: Path, files: dict[str, str], code: int, says: str
) -> None:
    """Values in dataplane.json are usage errors (2); files under DATA it cannot use are
    unavailable (4). They were tracebacks with exit 1."""
    data = _dataplane_dir(tmp_path, "dp", files)
    result = CliRunner().invoke(serve, ["dataplane", "--data", str(data), "--port", "8787"])
    assert result.exit_code == code, result.output
    assert says in result.output, result.output
    assert isinstance(result.exception, SystemExit), result.exception


@pytest.mark.parametrize("text", ["garbage", "", "[]", "null", '{"environments": [1]}'])
def test_tokens_mint_with_an_unreadable_environments_file_exits_4(
    tmp_path: Path, text: str
) -> None:
    data = _dataplane_dir(tmp_path, "dp", {"environments.json": text})
    args = ["mint", "--data", str(data), "--tenant", "t", "--project", "p", "--environment", "e"]
    result = CliRunner().invoke(tokens, args)
    assert result.exit_code == 4 and "environments file" in result.output, result.output
