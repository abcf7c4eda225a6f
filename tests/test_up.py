"""``baml-studio up``: the whole stack on one machine, as a process, and its parts as a library.

The process tests start ``up`` on free ports under a temp directory, ship a synthetic workload
through the real publisher to its gateway, and wait (bounded) until the coordinator answers
with what the local store answers; then they stop it and check that no service is left.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from baml_studio.apierrors import ApiError
from baml_studio.cli import main
from baml_studio.control.config import ControlConfig
from baml_studio.control.identity import ControlKeys, TokenVerifier
from baml_studio.control.metastore import Metastore
from baml_studio.control.model import TokenKind
from baml_studio.gateway.environments import EnvironmentsFile
from baml_studio.up import DEFAULT_SCOPE, DEPLOYMENT, Tokens, UpConfig, provision
from baml_studio.workload import run_workload

CLI = [sys.executable, "-m", "baml_studio.cli"]
READY_TIMEOUT_S = 180.0
VISIBLE_TIMEOUT_S = 120.0
BUDGET = {
    "max_wall_ms": 30_000,
    "max_result_rows": 1000,
    "max_result_bytes": 1 << 20,
    "max_private_bytes_read": 1 << 24,
}
COUNT = "SELECT fqn, count(*) AS n FROM calls GROUP BY fqn ORDER BY fqn"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the library ---------------------------------------------------------------------------------


def test_provision_twice_finds_what_the_first_made(tmp_path: Path) -> None:
    config = UpConfig(tmp_path / "stack")
    provision(config)
    provision(config)  # a second up over the same directory
    control = ControlConfig.from_data_dir(config.control_dir)
    with Metastore.open(control.metastore_url) as metastore:
        assert metastore.get_environment(DEFAULT_SCOPE) is not None
        assert metastore.deployment_environments(DEPLOYMENT) == [DEFAULT_SCOPE]
    environments = EnvironmentsFile(config.dataplane_dir / "environments.json")
    assert environments.is_provisioned(DEFAULT_SCOPE)
    assert oct(config.tokens_dir.stat().st_mode & 0o777) == "0o700"


def test_tokens_are_issued_again_at_half_their_life(tmp_path: Path) -> None:
    config = UpConfig(tmp_path / "stack")
    provision(config)
    now = [1_000.0]
    tokens = Tokens(config, clock=lambda: now[0])
    assert sorted(tokens.refresh(force=True)) == ["eraser", "publisher", "user", "workload"]
    first = {kind: config.token_path(kind).read_text() for kind in ("workload", "user")}
    assert tokens.refresh() == []
    now[0] += 1799
    assert tokens.refresh() == []
    now[0] += 2  # past half an hour: the workload token only
    assert tokens.refresh() == ["workload"]
    assert config.token_path("workload").read_text() != first["workload"]
    assert config.token_path("user").read_text() == first["user"]
    now[0] += 12 * 3600
    assert sorted(tokens.refresh()) == ["eraser", "user", "workload"]

    control = ControlConfig.from_data_dir(config.control_dir)
    with Metastore.open(control.metastore_url) as metastore:
        verifier = TokenVerifier(ControlKeys(control.keys_path).ring, metastore)
        for kind in TokenKind:  # each file holds a live token of its own kind, for the scope
            token = config.token_path(kind.value).read_text().strip()
            identity = verifier.verify(token, kind)
            tenant = identity.scope.tenant if kind is TokenKind.PUBLISHER else identity.tenant
            assert tenant == DEFAULT_SCOPE.tenant
            assert oct(config.token_path(kind.value).stat().st_mode & 0o777) == "0o600"
        with pytest.raises(ApiError):
            verifier.verify(config.token_path("workload").read_text().strip(), TokenKind.USER)
        user = verifier.verify(config.token_path("user").read_text().strip(), TokenKind.USER)
        eraser = verifier.verify(config.token_path("eraser").read_text().strip(), TokenKind.USER)
        assert (user.erasure, eraser.erasure) == (False, True)  # only the eraser token erases
        assert oct(config.token_path("eraser").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--scope", "a/b"], "TENANT/PROJECT/ENVIRONMENT"),
        (["--scope", "a/b c/d"], "not a valid id"),
        (["--control-port", "9000", "--dataplane-port", "9000"], "must differ"),
    ],
)
def test_usage_errors_exit_2_and_make_nothing(tmp_path: Path, args: list[str], says: str) -> None:
    result = CliRunner().invoke(main, ["up", "--data", str(tmp_path / "stack"), *args])
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert not (tmp_path / "stack").exists()


# --- the process ---------------------------------------------------------------------------------


@dataclass
class Running:
    process: subprocess.Popen[str]
    gateway: str
    pids: dict[str, int]
    data: Path
    lines: queue.Queue[str]


def _reader(stream: object, lines: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]  # reason: a text pipe
        lines.put(line)


@contextmanager
def up_process(data: Path) -> Iterator[Running]:
    """``baml-studio up`` on free ports; yields once it printed its summary, and makes sure
    it is gone afterwards."""
    dataplane_port = free_port()
    args = ["--data", str(data), "--control-port", str(free_port())]
    args += ["--dataplane-port", str(dataplane_port)]
    process = subprocess.Popen(
        [*CLI, "up", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_reader, args=(process.stdout, lines), daemon=True).start()
    try:
        seen = wait_for_line(process, lines, "  logs ")
        pids = dict(
            (name, int(pid))
            for name, pid in (p.split() for p in seen.split("pids ", 1)[1].split(", "))
        )
        yield Running(process, f"http://127.0.0.1:{dataplane_port}", pids, data, lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def wait_for_line(process: subprocess.Popen[str], lines: queue.Queue[str], start: str) -> str:
    deadline = time.monotonic() + READY_TIMEOUT_S
    said = []
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            if process.poll() is not None:
                break
            continue
        said.append(line)
        if line.startswith(start):
            return line
    raise AssertionError(f"up never printed {start!r}; it said:\n{''.join(said)}")


def remote_counts(gateway: str, data: Path) -> list[dict[str, object]] | None:
    token = (data / "tokens" / "user.token").read_text().strip()
    body = {"sql": COUNT, "parameters": [], "catalog_version": "v1", "budget": BUDGET}
    answer = httpx.post(
        f"{gateway}/v1/query", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )
    if answer.status_code != 200:
        return None
    lines = [json.loads(line) for line in answer.text.splitlines()]
    if lines[-1]["queryOutcome"]["resultState"] != "complete":
        return None
    return lines[:-1]


def local_counts(store: Path) -> list[dict[str, object]]:
    result = CliRunner().invoke(main, ["query", "--store", str(store), "--format", "json", COUNT])
    assert result.exit_code == 0, result.output
    rows: list[dict[str, object]] = json.loads(result.stdout)["rows"]
    return rows


def wait_until_visible(gateway: str, data: Path, expected: list[dict[str, object]]) -> None:
    deadline = time.monotonic() + VISIBLE_TIMEOUT_S
    seen = None
    while time.monotonic() < deadline:
        seen = remote_counts(gateway, data)
        if seen == expected:
            return
        time.sleep(0.5)  # the projector works in the background: poll, bounded by the deadline
    raise AssertionError(f"the coordinator answered {seen}, the local store {expected}")


def assert_gone(pids: dict[str, int]) -> None:
    deadline = time.monotonic() + 60
    alive = dict(pids)
    while alive and time.monotonic() < deadline:
        alive = {name: pid for name, pid in alive.items() if _alive(pid)}
        time.sleep(0.1)  # waiting for other processes to exit, bounded by the deadline
    assert not alive, f"still running: {alive}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except (OSError, IndexError):
        return False


def assert_only_the_eraser_token_erases(gateway: str, data: Path) -> None:
    """``up``'s user token is refused an erasure; its eraser token gets one accepted."""
    token = (data / "tokens" / "user.token").read_text().strip()
    rows = httpx.post(
        f"{gateway}/v1/query",
        json={"sql": "SELECT process_id FROM threads LIMIT 1", "parameters": [],
              "catalog_version": "v1", "budget": BUDGET},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    ).text.splitlines()  # fmt: skip
    euid = json.loads(rows[0])["process_id"]
    body = {"process_euids": [euid]}
    answers = {}
    for kind in ("user", "eraser"):
        token = (data / "tokens" / f"{kind}.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "up-test"}
        answers[kind] = httpx.post(f"{gateway}/v1/erasures", json=body, headers=headers, timeout=60)
    assert answers["user"].status_code == 403, answers["user"].text
    assert answers["user"].json()["error"]["code"] == "permission_denied"
    assert answers["eraser"].status_code == 202, answers["eraser"].text
    assert answers["eraser"].json()["streams_matched"] == 1


def test_up_serves_a_published_workload_and_a_second_up_finds_it_again(tmp_path: Path) -> None:
    store = tmp_path / "app" / "profiles-v1"
    run_workload(store, executions=40, seed=3)
    expected = local_counts(store)
    assert expected and sum(int(str(r["n"])) for r in expected) > 40
    data = tmp_path / "stack"
    with up_process(data) as running:
        token_file = data / "tokens" / "publisher.token"
        shipped = CliRunner().invoke(
            main,
            ["publish", "--store", str(store), "--gateway", running.gateway, "--once",
             "--token-file", str(token_file)],
            env={"BAML_PUBLISHER_TOKEN": None},
        )  # fmt: skip
        assert shipped.exit_code == 0, shipped.output
        wait_until_visible(running.gateway, data, expected)
        running.process.send_signal(signal.SIGTERM)
        assert running.process.wait(timeout=120) == 0
        assert_gone(running.pids)
    with up_process(data) as again:  # the same directory: the same facts and rows
        assert remote_counts(again.gateway, data) == expected
        assert_only_the_eraser_token_erases(again.gateway, data)
        again.process.send_signal(signal.SIGINT)
        assert again.process.wait(timeout=120) == 0
        assert_gone(again.pids)


def test_a_service_that_cannot_start_fails_up_with_its_log_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    stack = tmp_path / "stack"
    (stack / "control").mkdir(parents=True)
    (stack / "control" / "control.json").write_text('{"facts_dsn": "clickhouse://x:9/y"}')
    result = subprocess.run(
        [*CLI, "up", "--data", str(stack), "--control-port", str(free_port()),
         "--dataplane-port", str(free_port())],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    assert "control exited" in result.stderr and "control.log" in result.stderr
    assert "has scheme 'clickhouse'" in result.stderr  # the end of the child's log
    assert "ready" not in result.stdout
    assert not (stack / "logs" / "dataplane.log").exists()  # nothing after it was started


@pytest.mark.parametrize("which", ["--control-port", "--dataplane-port"])
def test_a_port_in_use_fails_up_before_anything_starts(tmp_path: Path, which: str) -> None:
    """Another stack on the port answered the readiness check: up said "ready", its projector
    talked to the other stack's control plane, and up failed ~35 s later."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"--control-port": str(free_port()), "--dataplane-port": str(free_port())}
        ports[which] = str(port)
        result = subprocess.run(
            [*CLI, "up", "--data", str(tmp_path / "stack"), *sum(ports.items(), ())],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert result.returncode == 4, result.stderr
    assert f"127.0.0.1:{port}" in result.stderr and "in use" in result.stderr.lower()
    assert which in result.stderr and "ready" not in result.stdout
    assert not (tmp_path / "stack" / "logs" / "control.log").exists()


def test_killing_up_stops_its_services(tmp_path: Path) -> None:
    with up_process(tmp_path / "stack") as running:
        running.process.kill()  # no chance to stop them itself
        running.process.wait()
        assert_gone(running.pids)
