"""The CLI: every command documented with an example, exit codes as documented in cli.py."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from baml_studio.cli import EXIT_CORRUPT, EXIT_UNAVAILABLE, main


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []
    for name, command in group.commands.items():
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found.extend(_commands(command, (*prefix, name)))
    return found


def test_every_command_has_help_with_an_example() -> None:
    runner = CliRunner()
    commands = _commands(main)
    assert ("demo",) in commands and ("store", "check") in commands
    for path in commands:
        result = runner.invoke(main, [*path, "--help"])
        assert result.exit_code == 0, path
        command = main
        for part in path:
            assert isinstance(command, click.Group)
            command = command.commands[part]  # type: ignore[assignment]
        if not isinstance(command, click.Group):
            assert "Example" in (command.help or ""), path


def test_demo_then_check_reports_every_execution(tmp_path: Path) -> None:
    store = tmp_path / "store"
    report = tmp_path / "report.json"
    runner = CliRunner()
    result = runner.invoke(
        main, ["demo", "--store", str(store), "--executions", "30", "--report", str(report)]
    )
    assert result.exit_code == 0, result.output
    assert "ran 30 executions" in result.output
    generated = json.loads(report.read_text())
    check = runner.invoke(main, ["store", "check", "--store", str(store), "--format", "json"])
    assert check.exit_code == 0, check.output
    summary = json.loads(check.output)
    assert summary["executions"] == 30
    assert summary["executions_missing_start_or_end"] == 0
    assert summary["corruptions"] == []
    expected = generated["totals"]["by_status"]
    assert {k: v for k, v in summary["statuses"].items() if v} == {
        k: v for k, v in expected.items() if v
    }


def _demo_with_one_byte_flipped(tmp_path: Path, pattern: str, offset: int) -> tuple[Path, Path]:
    """A 5-execution demo store, and its first file matching ``pattern`` with the byte at
    ``offset`` flipped."""
    store = tmp_path / "store"
    assert (
        CliRunner().invoke(main, ["demo", "--store", str(store), "--executions", "5"]).exit_code
        == 0
    )
    victim = sorted(store.rglob(pattern))[0]
    raw = bytearray(victim.read_bytes())
    raw[offset] ^= 0xFF
    victim.write_bytes(bytes(raw))
    return store, victim


def test_check_exits_3_on_a_corrupt_file_and_4_without_a_store(tmp_path: Path) -> None:
    store, victim = _demo_with_one_byte_flipped(tmp_path, "*.bamldata", 60)
    runner = CliRunner()
    result = runner.invoke(main, ["store", "check", "--store", str(store)])
    assert result.exit_code == EXIT_CORRUPT
    assert "InvalidChecksum" in result.output and victim.name in result.output
    missing = runner.invoke(main, ["store", "check", "--store", str(tmp_path / "nope")])
    assert missing.exit_code == EXIT_UNAVAILABLE


def test_a_directory_that_is_not_a_store_is_refused_not_read_as_empty(tmp_path: Path) -> None:
    """``query --store /etc`` (or a typo naming a real directory) answered count 0, complete,
    exit 0; ``store check`` called it a clean store."""
    other = tmp_path / "not-a-store"
    other.mkdir()
    (other / "notes.txt").write_text("hello")
    runner = CliRunner()
    query = runner.invoke(main, ["query", "--store", str(other), "SELECT count(*) FROM calls"])
    assert query.exit_code == 5 and "not a profiles-v1 store" in query.output, query.output
    check = runner.invoke(main, ["store", "check", "--store", str(other)])
    assert check.exit_code == EXIT_UNAVAILABLE and "not a profiles-v1 store" in check.output
    store = tmp_path / "store"
    assert runner.invoke(main, ["demo", "--store", str(store), "--executions", "2"]).exit_code == 0
    assert runner.invoke(main, ["query", "--store", str(store), "SELECT 1"]).exit_code == 0


def test_a_corrupt_cas_file_is_listed_once(tmp_path: Path) -> None:
    """The scan decodes CAS files and the CAS check verifies them: one bad file, one entry
    (it was listed and counted twice)."""
    store, victim = _demo_with_one_byte_flipped(tmp_path, "*.bamlvalue", 10)
    runner = CliRunner()
    result = runner.invoke(main, ["store", "check", "--store", str(store), "--format", "json"])
    assert result.exit_code == EXIT_CORRUPT
    corruptions = json.loads(result.output)["corruptions"]
    assert [c["path"] for c in corruptions] == [str(victim)], corruptions


def test_clean_removes_a_dot_baml_store(tmp_path: Path) -> None:
    store = tmp_path / ".baml" / "profiles-v1"
    runner = CliRunner()
    assert runner.invoke(main, ["demo", "--store", str(store), "--executions", "3"]).exit_code == 0
    result = runner.invoke(main, ["store", "clean", "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert not store.exists()
    assert (tmp_path / ".baml" / ".gitignore").read_text().splitlines() == ["*"]


def test_clean_of_a_store_not_named_dot_baml_profiles_v1_is_a_usage_error(tmp_path: Path) -> None:
    store = tmp_path / "demo-store"
    runner = CliRunner()
    assert runner.invoke(main, ["demo", "--store", str(store), "--executions", "2"]).exit_code == 0
    result = runner.invoke(main, ["store", "clean", "--store", str(store)])
    assert result.exit_code == 2 and "--store" in result.output, result.output  # was 4
    assert store.is_dir()


def test_demo_of_1000_executions_is_whole(tmp_path: Path) -> None:
    """The issue's bar: exactly 1,000 executions, each started and ended, every file intact."""
    store = tmp_path / "store"
    runner = CliRunner()
    result = runner.invoke(
        main, ["demo", "--store", str(store), "--executions", "1000", "--processes", "2"]
    )
    assert result.exit_code == 0, result.output
    check = runner.invoke(main, ["store", "check", "--store", str(store), "--format", "json"])
    assert check.exit_code == 0, check.output
    summary = json.loads(check.output)
    assert summary["executions"] == 1000
    assert summary["executions_missing_start_or_end"] == 0
    assert summary["corruptions"] == [] and len(summary["streams"]) == 2
    assert sum(summary["statuses"].values()) == 1000


def test_demo_into_a_path_it_cannot_make_exits_4_and_a_report_nowhere_is_a_usage_error(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("a file where the store's parent goes")
    runner = CliRunner()
    result = runner.invoke(main, ["demo", "--store", str(blocker / "x"), "--executions", "2"])
    assert result.exit_code == 4 and "cannot run the workload" in result.output, result.output
    store = tmp_path / "store"
    report = tmp_path / "nodir" / "r.json"
    args = ["demo", "--store", str(store), "--executions", "2", "--report", str(report)]
    result = runner.invoke(main, args)
    assert result.exit_code == 2 and "--report" in result.output, result.output
    assert not store.exists()  # refused before the workload ran


def test_demo_into_an_empty_store_path_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """click turned "" into ".": the store was written into the current directory."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["demo", "--store", "", "--executions", "2"])
    assert result.exit_code == 2 and "--store" in result.output, result.output
    assert list(tmp_path.iterdir()) == []
