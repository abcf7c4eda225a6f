"""Options sent in an HTTP header (tokens, idempotency keys, environment ids) take printable
ASCII, from the command line or the environment: anything else is a usage error (exit 2)
naming the option, before any request. It was a ``UnicodeEncodeError`` traceback (exit 1)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.cli import main
from baml_studio.cli_tokens import header_text

NOWHERE = "http://127.0.0.1:9"  # never contacted: the option is refused first
UNSET = {
    name: None
    for name in ("BAML_USER_TOKEN", "BAML_PUBLISHER_TOKEN", "BAML_WORKLOAD_TOKEN",
                 "BAML_WORKLOAD_TOKEN_FILE", "BAML_PUBLISHER_TOKEN_FILE")
}  # fmt: skip


def commands(tmp_path: Path, bad: str) -> list[tuple[list[str], dict[str, str | None], str]]:
    remote = ["--remote", NOWHERE]
    return [
        (["query", *remote, "--token", bad, "SELECT 1"], {}, "--token"),
        (["query", *remote, "SELECT 1"], {"BAML_USER_TOKEN": bad}, "--token"),
        (["query", *remote, "--token", "t", "--environment", bad, "SELECT 1"], {}, "--environment"),
        (["jobs", "start", *remote, "--token", "t", "--idempotency-key", bad, "SELECT 1"], {},
         "--idempotency-key"),
        (["erase", *remote, "--token", "t", "--euid", "0" * 32, "--idempotency-key", bad], {},
         "--idempotency-key"),
        (["publish", "--store", str(tmp_path), "--gateway", NOWHERE, "--token", bad, "--once"],
         {}, "--token"),
        (["projector", "--data", str(tmp_path), "--control-plane", NOWHERE, "--token",
          bad, "--once"], {}, "--token"),
        (["projector", "--data", str(tmp_path), "--control-plane", NOWHERE, "--once"],
         {"BAML_WORKLOAD_TOKEN": bad}, "BAML_WORKLOAD_TOKEN"),
    ]  # fmt: skip


@pytest.mark.parametrize("bad", ["t☃ken", "tok\u00a0en", "tok\nen", "“tok”"])
def test_a_header_option_that_is_not_printable_ascii_is_a_usage_error(
    tmp_path: Path, bad: str
) -> None:
    for args, env, option in commands(tmp_path, bad):
        result = CliRunner().invoke(main, args, env={**UNSET, **env})
        assert result.exit_code == 2, (args, env, result.output)
        assert "printable ASCII" in result.output and option in result.output, result.output
        assert "Traceback" not in result.output


@settings(max_examples=200)
@given(st.text(max_size=40))
def test_fuzz_header_text_passes_printable_ascii_and_refuses_the_rest(text: str) -> None:
    if all(0x20 <= ord(c) < 0x7F for c in text):
        assert header_text(None, None, text) == text
    else:
        with pytest.raises(click.BadParameter, match="printable ASCII"):
            header_text(None, None, text)
