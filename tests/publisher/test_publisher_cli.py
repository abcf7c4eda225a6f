from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner
from publisher_env import TOKEN, FakeEnv

from baml_studio.cli_publish import EXIT_AUTH, publish
from baml_studio.tokenfile import write_token_file


def test_publish_once(fake_env: FakeEnv, demo_store: Path) -> None:
    args = ["--store", str(demo_store), "--gateway", fake_env.url, "--once"]
    result = CliRunner().invoke(publish, [*args, "--token", "wrong"])
    assert result.exit_code == EXIT_AUTH and "token refused" in result.output
    result = CliRunner().invoke(publish, [*args, "--token", TOKEN])
    assert result.exit_code == 0, result.output
    assert "uploaded" in result.output and fake_env.gateway.puts
    assert "Example:" in (publish.help or "")


def test_a_gateway_that_is_not_an_http_url_is_a_usage_error(tmp_path: Path) -> None:
    for gateway in ("notaurl", "ftp://gateway.example", "http://"):
        args = ["--store", str(tmp_path), "--gateway", gateway, "--token", TOKEN, "--once"]
        result = CliRunner().invoke(publish, args)
        assert result.exit_code == 2, result.output
        assert "--gateway" in result.output and repr(gateway) in result.output


def test_publish_once_with_a_token_file(
    fake_env: FakeEnv, demo_store: Path, tmp_path: Path
) -> None:
    token_file = tmp_path / "publisher.token"
    write_token_file(token_file, TOKEN)
    args = ["--store", str(demo_store), "--gateway", fake_env.url, "--once"]
    unset: dict[str, str | None] = {"BAML_PUBLISHER_TOKEN": None, "BAML_PUBLISHER_TOKEN_FILE": None}
    result = CliRunner().invoke(publish, [*args, "--token-file", str(token_file)], env=unset)
    assert result.exit_code == 0, result.output
    assert "uploaded" in result.output and fake_env.gateway.puts
    for extra, says in [
        ([], "give --token or --token-file"),
        (["--token", TOKEN, "--token-file", str(token_file)], "not both"),
        (["--token-file", str(tmp_path / "missing.token")], "does not exist"),
    ]:
        refused = CliRunner().invoke(publish, [*args, *extra], env=unset)
        assert refused.exit_code == 2 and says in refused.output, (extra, refused.output)


def test_a_store_that_cannot_be_read_exits_4_with_the_reason(
    fake_env: FakeEnv, demo_store: Path
) -> None:
    """A file where the store's streams directory goes: exit 4 and the reason (it was a
    NotADirectoryError traceback, exit 1)."""
    shutil.rmtree(demo_store / "streams")
    (demo_store / "streams").write_text("not a directory")
    args = ["--store", str(demo_store), "--gateway", fake_env.url, "--once", "--token", TOKEN]
    result = CliRunner().invoke(publish, args)
    assert result.exit_code == 4, result.output
    assert "the store cannot be read" in result.output, result.output


def test_a_gateway_url_with_a_wrong_path_says_to_check_it(
    fake_env: FakeEnv, demo_store: Path
) -> None:
    """A 404 is not a moment to wait out: the message names --gateway (exit 1, as documented
    for a failed flush)."""
    wrong = fake_env.url + "/sub/path"
    args = ["--store", str(demo_store), "--gateway", wrong, "--once", "--token", TOKEN]
    result = CliRunner().invoke(publish, args)
    assert result.exit_code == 1, result.output
    assert f"is --gateway {wrong} the data plane's base URL?" in result.output, result.output
    assert "retry later" not in result.output
