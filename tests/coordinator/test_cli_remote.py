"""``baml-studio query --remote`` and ``baml-studio jobs`` against a stub coordinator: the same
formats and exit codes as the local query, usage errors, and every jobs subcommand."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from coordinator_stub import ROWS, TOKEN, StubCoordinator, lines_of, outcome

from baml_studio.cli import main
from baml_studio.cli_query import render
from baml_studio.workload import run_workload
from projector.projector_control_rig import closed_port_url

FORMATS = ("table", "json", "jsonl")
LOCAL_SQL = "SELECT call_id, fqn, args, output FROM calls ORDER BY call_id LIMIT 6"


@pytest.fixture
def url(stub_served: tuple[StubCoordinator, str], stub: StubCoordinator) -> str:
    return stub_served[1]


def invoke(args: list[str], token: str | None = TOKEN, stdin: str | None = None) -> Result:
    runner = CliRunner(env={"BAML_USER_TOKEN": token, "BAML_INTERNAL": None})
    return runner.invoke(main, args, input=stdin)


def remote(url: str, sql: str, *extra: str) -> Result:
    return invoke(["query", "--remote", url, *extra, sql])


class Canned:
    """A result holding given rows and outcome, as :func:`render` reads a local one."""

    def __init__(self, rows: list[dict[str, Any]], final: dict[str, Any]) -> None:
        self.columns = list(rows[0]) if rows else []
        self._rows = rows
        self._outcome = final

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._rows)

    def outcome(self) -> dict[str, Any]:
        return self._outcome


def rendered(fmt: str, rows: list[dict[str, Any]], final: dict[str, Any]) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stderr(err):
        render(Canned(rows, final), fmt, out)
    return out.getvalue(), err.getvalue()


@pytest.mark.parametrize("fmt", FORMATS)
def test_remote_rows_render_as_the_shared_renderer_does(url: str, fmt: str) -> None:
    result = remote(url, "SELECT rows", "--format", fmt)
    assert result.exit_code == 0, result.output
    assert (result.stdout, result.stderr) == rendered(fmt, ROWS, outcome())


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Result]]:
    store = tmp_path_factory.mktemp("local") / "profiles-v1"
    run_workload(store, executions=6, processes=1, seed=3)
    runs = {
        fmt: invoke(["query", "--store", str(store), "--format", fmt, LOCAL_SQL]) for fmt in FORMATS
    }
    return store, runs


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_remote_answer_prints_byte_for_byte_as_the_local_query(
    url: str, stub: StubCoordinator, local_run: tuple[Path, dict[str, Result]], fmt: str
) -> None:
    """The coordinator streams what the local engine answered; every format prints the same."""
    _, runs = local_run
    assert all(run.exit_code == 0 for run in runs.values())
    local_lines = runs["jsonl"].stdout.split("\n")
    assert len(local_lines) > 3  # rows, the outcome and the final newline
    stub.extra_lines[LOCAL_SQL] = [line for line in local_lines if line]
    result = remote(url, LOCAL_SQL, "--format", fmt)
    assert result.exit_code == 0, result.output
    assert result.stdout == runs[fmt].stdout
    assert result.stderr == runs[fmt].stderr


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        ("SELECT rows", 0),
        ("SELECT incomplete", 1),
        ("SELECT cut", 1),
        ("SELECT garbage", 1),
        ("SELECT drop", 1),
        ("SELECT budget", 3),
        ("SELECT nope", 2),
        ("SELECT unavailable", 5),
        ("SELECT html", 5),
    ],
)
def test_exit_codes_match_the_local_query(url: str, sql: str, code: int) -> None:
    result = remote(url, sql, "--format", "jsonl")
    assert result.exit_code == code, result.output


def test_a_cut_stream_still_prints_its_rows_and_an_incomplete_outcome(url: str) -> None:
    result = remote(url, "SELECT cut", "--format", "jsonl")
    *rows, last = lines_of(result.stdout)
    assert rows == ROWS[:2]
    assert last["queryOutcome"]["resultState"] == "incomplete"
    assert last["queryOutcome"]["error"]["code"] == "stream_incomplete"


def test_http_errors_print_message_and_code(url: str) -> None:
    bad = remote(url, "SELECT nope")
    assert (bad.exit_code, bad.stdout) == (2, "")
    assert bad.stderr == "error: unknown column 'nope' (invalid_sql)\n"
    denied = invoke(["query", "--remote", url, "SELECT rows"], token="wrong")
    assert denied.exit_code == 5
    assert denied.stderr == "error: the user token is invalid or expired (unauthenticated)\n"
    gone = remote(closed_port_url(), "SELECT rows")
    assert gone.exit_code == 5 and "did not answer" in gone.stderr


def test_the_request_carries_the_budget_and_environment(url: str, stub: StubCoordinator) -> None:
    result = invoke(
        [
            "query",
            "--remote",
            url,
            "--max-rows",
            "7",
            "--max-wall",
            "1500ms",
            "--max-bytes",
            "8MiB",
            "--max-private-bytes",
            "0",
            "--environment",
            "prod",
            "-",
        ],
        stdin="SELECT rows",
    )
    assert result.exit_code == 0, result.output
    body = stub.seen[-1].body
    assert body["sql"] == "SELECT rows" and body["environment_id"] == "prod"
    assert body["catalog_version"] == "v1" and body["mode"] == "interactive"
    assert body["budget"] == {
        "max_wall_ms": 1500,
        "max_result_rows": 7,
        "max_result_bytes": 8 << 20,
        "max_private_bytes_read": 0,
    }
    assert remote(url, "SELECT rows").exit_code == 0
    assert stub.seen[-1].body["budget"] == {
        "max_wall_ms": 30_000,
        "max_result_rows": 10_000,
        "max_result_bytes": 64 << 20,
        "max_private_bytes_read": 256 << 20,
    }
    assert "environment_id" not in stub.seen[-1].body


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--store", "x"], "mutually exclusive"),
        (["--schema"], "local store only"),
        (["--explain"], "local store only"),
        (["--max-rows", "0"], "x>=1"),
        (["--max-bytes", "lots"], "expected a size"),
        (["--max-bytes", "9" * 5000], "expected a size"),
        (["--max-bytes", "\uff18MiB"], "expected a size"),  # a fullwidth 8: int() takes it
        (["--max-private-bytes", "9" * 20], "expected a size"),
        (["--max-bytes", "9999999999GiB"], "more than 9223372036854775807 bytes"),
    ],
)
def test_usage_errors_with_remote_exit_2(url: str, args: list[str], says: str) -> None:
    result = remote(url, "SELECT rows", *args)
    assert result.exit_code == 2
    assert says in result.stderr


def test_remote_needs_a_token_and_remote_options_need_remote(url: str, tmp_path: Path) -> None:
    missing = invoke(["query", "--remote", url, "SELECT rows"], token=None)
    assert missing.exit_code == 2 and "BAML_USER_TOKEN" in missing.stderr
    local = invoke(["query", "--store", str(tmp_path), "--max-bytes", "1M", "SELECT 1"])
    assert local.exit_code == 2 and "need --remote" in local.stderr
    not_a_url = invoke(["query", "--remote", "nowhere", "SELECT rows"])
    assert not_a_url.exit_code == 2 and "--remote" in not_a_url.stderr


def jobs(url: str, *args: str, token: str | None = TOKEN) -> Result:
    command, *rest = args
    return invoke(["jobs", command, "--remote", url, *rest], token=token)


def test_jobs_start_status_watch_download(url: str, stub: StubCoordinator, tmp_path: Path) -> None:
    started = jobs(url, "start", "SELECT job_ok", "--max-rows", "50", "--environment", "prod")
    assert started.exit_code == 0, started.output
    job = json.loads(started.stdout)
    assert job["state"] == "queued"
    body = stub.seen[-1].body
    assert body["mode"] == "background" and body["environment_id"] == "prod"
    assert body["budget"]["max_result_rows"] == 50
    assert body["budget"]["max_wall_ms"] == 600_000
    job_id = job["job_id"]

    early = jobs(url, "download", job_id)
    assert early.exit_code == 5 and "(conflict)" in early.stderr

    status = jobs(url, "status", job_id)
    assert status.exit_code == 0 and json.loads(status.stdout)["state"] == "running"

    watched = jobs(url, "watch", job_id, "--interval", "0")
    assert watched.exit_code == 0, watched.output
    assert json.loads(watched.stdout)["state"] == "succeeded"
    assert f"job {job_id}" in watched.stderr

    for fmt in FORMATS:
        got = jobs(url, "download", job_id, "--format", fmt)
        assert got.exit_code == 0, got.output
        assert (got.stdout, got.stderr) == rendered(fmt, ROWS, outcome())

    target = tmp_path / "result.jsonl"
    saved = jobs(url, "download", job_id, "--output", str(target))
    assert saved.exit_code == 0 and saved.stdout == ""
    assert lines_of(target.read_text()) == [*ROWS, {"queryOutcome": outcome()}]
    assert [p.name for p in tmp_path.iterdir()] == ["result.jsonl"]  # no temp file left


def test_a_download_that_breaks_writes_no_file_and_bad_targets_are_usage_errors(
    url: str, stub: StubCoordinator, tmp_path: Path
) -> None:
    job_id = jobs(url, "start", "-q", "SELECT job_ok").stdout.strip()
    assert jobs(url, "watch", job_id, "--interval", "0").exit_code == 0
    stub.blob_cut = True  # rows, then the connection ends: no outcome
    target = tmp_path / "result.jsonl"
    broke = jobs(url, "download", job_id, "--output", str(target))
    assert broke.exit_code == 1 and "not written" in broke.stderr, broke.output
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temp file
    nowhere = jobs(url, "download", job_id, "--output", str(tmp_path / "no" / "r.jsonl"))
    assert nowhere.exit_code == 2 and "is not a directory" in nowhere.output
    for bad in ("", "x" * 100_000, "job/../x"):
        refused = jobs(url, "status", bad)
        assert refused.exit_code == 2 and "job id" in refused.output, refused.output


def test_jobs_start_quiet_prints_the_id_and_reuses_the_idempotency_key(url: str) -> None:
    first = jobs(url, "start", "-q", "--idempotency-key", "k-7", "SELECT job_forever")
    again = jobs(url, "start", "-q", "--idempotency-key", "k-7", "SELECT job_forever")
    assert first.exit_code == again.exit_code == 0
    assert first.stdout == again.stdout and first.stdout.startswith("job_")


@pytest.mark.parametrize(("sql", "code"), [("SELECT job_budget", 3), ("SELECT job_cancelled", 4)])
def test_watch_exits_by_the_final_state(url: str, sql: str, code: int) -> None:
    job_id = jobs(url, "start", "-q", sql).stdout.strip()
    watched = jobs(url, "watch", job_id, "--interval", "0")
    assert watched.exit_code == code, watched.output
    if code == 3:
        assert "(E_QUERY_BUDGET_EXCEEDED)" in watched.stderr


def test_watch_rides_out_a_few_503s(url: str, stub: StubCoordinator) -> None:
    job_id = jobs(url, "start", "-q", "SELECT job_ok").stdout.strip()
    assert jobs(url, "status", job_id).exit_code == 0  # queued → running
    stub.flaky_gets = 2
    watched = jobs(url, "watch", job_id, "--interval", "0")
    assert watched.exit_code == 0, watched.output
    assert stub.flaky_gets == 0


def test_cancel_then_watch_reports_cancelled(url: str) -> None:
    job_id = jobs(url, "start", "-q", "SELECT job_forever").stdout.strip()
    cancelled = jobs(url, "cancel", job_id)
    assert cancelled.exit_code == 0 and json.loads(cancelled.stdout)["state"] == "cancelled"
    assert jobs(url, "cancel", job_id).exit_code == 0
    assert jobs(url, "watch", job_id, "--interval", "0").exit_code == 4


def test_jobs_errors_exit_2_or_5(url: str) -> None:
    invalid = jobs(url, "start", "SELECT not_a_job")
    assert invalid.exit_code == 2 and "(invalid_sql)" in invalid.stderr
    unknown = jobs(url, "status", "job_nope")
    assert unknown.exit_code == 5 and "(not_found)" in unknown.stderr
    denied = jobs(url, "status", "job_1", token="wrong")
    assert denied.exit_code == 5 and "(unauthenticated)" in denied.stderr
    no_token = jobs(url, "status", "job_1", token=None)
    assert no_token.exit_code == 2
