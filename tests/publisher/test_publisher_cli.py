from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from publisher_env import TOKEN, FakeEnv

from baml_studio.cli_publish import EXIT_AUTH, publish


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
