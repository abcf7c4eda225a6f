"""The projector service loop (``loop.run_projector``) and its CLI (``cli_projector``): worker
threads drain the ingest path to one fact set equal to the local catalog while the sweep and
the compaction run on their intervals; stop, failures and ``--once`` behave as documented."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import types
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from projector_control_rig import closed_port_url
from projector_e2e_rig import ingest_path
from projector_fixtures import SCOPE, CountingStore, workload_store
from projector_service_rig import (
    assert_one_fact_set,
    control_endpoint,
    dataplane_dir,
    projector_config,
    receive_all,
    with_private,
)

from baml_studio.cli_projector import compaction_hook, projector_command, sweep_hook
from baml_studio.gateway.config import Scope
from baml_studio.gateway.keys import pack_key
from baml_studio.gateway.service import load_dataplane_config
from baml_studio.objectstore.errors import ObjectNotFound
from baml_studio.objectstore.notifications import s3_event
from baml_studio.projector import loop, maintenance
from baml_studio.projector.errors import LanceCommitFailed
from baml_studio.projector.loop import run_projector
from baml_studio.projector.maintenance import MaintenanceIncomplete
from baml_studio.projector.service import Projector, ProjectorConfig, open_projector
from baml_studio.projector.worker import WorkerConfig
from baml_studio.queue.errors import QueueUnavailable
from baml_studio.queue.port import Message, Queue
from baml_studio.tokenfile import write_token_file

__all__ = ["workload_store"]

GUARD_S = 120.0


def pack_notice(bucket: str, n: int) -> tuple[str, str]:
    """``(key, S3 event JSON)`` for a pack that is not in the bucket."""
    key = pack_key(SCOPE, "ab" * 16, f"01J{n:023d}")
    body = s3_event(bucket, key, 10, "0" * 32, None, None, datetime.now(UTC))
    return key, json.dumps(body)


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Projector]:
    """A projector over a fresh data-plane directory; the control plane is never reached."""
    dataplane = load_dataplane_config(tmp_path / "dp", host="127.0.0.1", port=8787)
    config = ProjectorConfig(
        dataplane, closed_port_url(), "token", worker=WorkerConfig(retry_backoff_s=(0,))
    )
    with open_projector(config) as projector:
        yield projector


def rewired(
    projector: Projector,
    *,
    fail: Callable[[str], Exception | None] | None = None,
    queue: Queue | None = None,
    **settings: Any,
) -> Projector:
    """``projector`` with a failing bucket, another queue, or other intervals."""
    store = CountingStore(projector.store, fail=fail) if fail is not None else projector.store
    config = dataclasses.replace(projector.config, **settings)
    return Projector(config, store, queue or projector.queue, projector.control)


class FlakyQueue:
    """A queue whose first ``failures`` receives raise :class:`QueueUnavailable`."""

    def __init__(self, inner: Queue, failures: int, on_delete: Callable[[], None]) -> None:
        self.inner = inner
        self.failures = failures
        self.on_delete = on_delete

    def receive(self, max_messages: int = 10, wait_s: float = 0, **kw: Any) -> list[Message]:
        if self.failures:
            self.failures -= 1
            raise QueueUnavailable("the queue is down (test)")
        return self.inner.receive(max_messages, wait_s, **kw)

    def delete(self, receipt: str) -> None:
        self.inner.delete(receipt)
        self.on_delete()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# --- the loop over the ingest path -------------------------------------------------------------


def test_the_service_drains_the_ingest_path_with_workers_sweep_and_compaction(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    with (
        ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest,
        control_endpoint(ingest) as (url, token),
    ):
        config = projector_config(
            tmp_path,
            url,
            token,
            worker=WorkerConfig(retry_backoff_s=(0,)),
            sweep_interval_s=0.2,
            compact_interval_s=0.5,
        )
        stop = threading.Event()
        drained = threading.Event()
        with open_projector(config) as projector:
            real_sweep = sweep_hook(projector)
            assert real_sweep is not None

            def sweep() -> None:  # the real sweep (nothing is silent), then: all projected?
                real_sweep()
                if projector.queue.approximate_count() == 0:
                    drained.set()
                    stop.set()

            guard = threading.Timer(GUARD_S, stop.set)
            guard.start()
            try:
                report = run_projector(
                    projector,
                    stop=stop,
                    workers=3,
                    wait_s=0.2,
                    sweep=sweep,
                    compact=compaction_hook(projector),
                )
            finally:
                guard.cancel()
        assert drained.is_set()
        assert report.worker.executions > 0 and report.worker.quarantined == 0
        assert report.errors == 0 and report.maintenance_errors == 0
        assert report.sweeps > 1 and report.compactions >= 1
        assert report.worker.deleted == report.worker.messages - report.worker.retried
        assert_one_fact_set(with_private(ingest, config), fact_database)


@pytest.mark.parametrize(
    ("spread", "token_file"),
    [(["--workers", "2"], False), (["--processes", "2"], False), (["--processes", "2"], True)],
    ids=["threads", "processes", "processes-token-file"],
)
def test_cli_once_drains_and_prints_the_counts(
    tmp_path: Path,
    chdb_dsn: str,
    fact_database: str,
    workload_store: Path,
    spread: list[str],
    token_file: bool,
) -> None:
    with (
        ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest,
        control_endpoint(ingest) as (url, token),
    ):
        queue = ingest.dataplane.queue
        assert queue is not None
        bodies = []
        for message in receive_all(queue):
            bodies.append(message.body)
            queue.delete(message.receipt)
        packs = [b for b in bodies if ".bamlpack.zst" in b]
        assert packs and len(packs) < len(bodies)
        args = ["--data", str(dataplane_dir(tmp_path)), "--control-plane", url]
        args += ["--derived", str(tmp_path / "service-derived"), *spread, "--once"]
        env = {"BAML_WORKLOAD_TOKEN": token}
        if token_file:  # the helper process reads the file itself
            write_token_file(tmp_path / "workload.token", token)
            args += ["--token-file", str(tmp_path / "workload.token")]
            env = {"BAML_WORKLOAD_TOKEN": "not-the-token"}  # the file wins
        # packs first, then the meta objects: no execution waits for values (the CLI's retry
        # backoff is the default, seconds long)
        for batch in (packs, [b for b in bodies if b not in packs]):
            for body in batch:
                queue.send(body)
            result = CliRunner().invoke(projector_command, args, env=env, catch_exceptions=False)
            assert result.exit_code == 0, result.output
            counts = json.loads(result.stdout)
            assert counts["messages"] == counts["deleted"] == len(batch), counts
            assert counts["errors"] == 0 and counts.get("process_restarts", 0) == 0
            assert queue.approximate_count() == 0
        assert counts["executions"] > 0
        config = projector_config(tmp_path, url, token)
        assert_one_fact_set(with_private(ingest, config), fact_database)


# --- stopping, failures, maintenance -----------------------------------------------------------


def test_maintenance_runs_on_its_interval_and_a_failing_task_is_retried(local: Projector) -> None:
    stop = threading.Event()
    calls: list[str] = []

    def sweep() -> None:
        calls.append("sweep")
        if len(calls) == 3:
            stop.set()
            return
        raise RuntimeError("sweep failed (test)")

    def compact() -> None:
        calls.append("compact")

    projector = rewired(local, sweep_interval_s=0.01, compact_interval_s=0)
    report = run_projector(projector, stop=stop, wait_s=0.05, sweep=sweep, compact=compact)
    assert calls == ["sweep"] * 3  # compaction interval 0: never
    assert report.sweeps == 3 and report.maintenance_errors == 2 and report.compactions == 0
    assert report.worker.messages == 0


def test_a_message_whose_handling_raises_is_counted_and_stays_in_the_queue(
    local: Projector,
) -> None:
    bad_key, bad = pack_notice(local.store.bucket, 1)
    _, gone = pack_notice(local.store.bucket, 2)
    local.queue.send(bad)
    local.queue.send(gone)

    def fail(key: str) -> Exception | None:
        return RuntimeError("a bug (test)") if key == bad_key else None

    report = run_projector(rewired(local, fail=fail), stop=threading.Event(), once=True, wait_s=0)
    assert report.errors == 1 and report.worker.deleted == 1  # the missing pack: nothing to do
    assert local.queue.approximate_count() == 1  # leased, back after its visibility timeout
    assert local.queue.receive(wait_s=0) == []
    assert local.queue.dead_letter_queue().approximate_count() == 0


def test_stop_makes_the_rest_of_a_leased_batch_visible_again(local: Projector) -> None:
    stop = threading.Event()
    first, body = pack_notice(local.store.bucket, 1)
    local.queue.send(body)
    for n in (2, 3):
        local.queue.send(pack_notice(local.store.bucket, n)[1])

    def fail(key: str) -> Exception:
        if key == first:
            stop.set()  # SIGTERM while the first message is handled
        return ObjectNotFound(key)

    report = run_projector(rewired(local, fail=fail), stop=stop, wait_s=0.05, receive_batch=10)
    assert report.worker.messages == 1 and report.worker.deleted == 1
    again = local.queue.receive(max_messages=10, wait_s=0)  # visible now, not in 30 s
    assert [m.receive_count for m in again] == [2, 2]


def test_workers_take_one_message_each_so_a_second_worker_is_not_starved(
    local: Projector,
) -> None:
    """Two workers, two messages: each worker handles one (with ten per receive, the first
    worker would take both and the second would wait on an empty queue)."""
    started = threading.Barrier(2, timeout=10)
    names = []
    for n in (1, 2):
        key, body = pack_notice(local.store.bucket, n)
        names.append(key)
        local.queue.send(body)

    def fail(key: str) -> Exception:
        started.wait()  # only passes while both messages are in hand at once
        return ObjectNotFound(key)

    report = run_projector(rewired(local, fail=fail), stop=threading.Event(), once=True, workers=2)
    assert report.worker.messages == 2 and report.worker.deleted == 2
    with pytest.raises(ValueError, match="receive_batch"):
        run_projector(local, stop=threading.Event(), receive_batch=11)


def test_receive_failures_are_retried_and_raised_in_once_mode(
    local: Projector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop, "RECEIVE_BACKOFF_S", 0.001)
    stop = threading.Event()
    local.queue.send(pack_notice(local.store.bucket, 1)[1])
    flaky = FlakyQueue(local.queue, 2, on_delete=stop.set)
    report = run_projector(rewired(local, queue=flaky), stop=stop, wait_s=0.05)  # type: ignore[arg-type]
    assert report.errors == 2 and report.worker.deleted == 1

    flaky = FlakyQueue(local.queue, 1, on_delete=stop.set)
    with pytest.raises(QueueUnavailable):
        run_projector(rewired(local, queue=flaky), stop=threading.Event(), once=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="workers"):
        run_projector(local, stop=threading.Event(), workers=0)


# --- the CLI shell -------------------------------------------------------------------------------


@pytest.mark.parametrize("processes", [1, 3])
def test_sigterm_stops_the_service_cleanly(tmp_path: Path, processes: int) -> None:
    """SIGTERM stops every process: with helpers, the last one's pid is read from its start
    line, and it is gone once this one has exited (joined, not left running)."""
    code = "from baml_studio.cli_projector import projector_command; projector_command()"
    (tmp_path / "dp").mkdir()
    args = ["--data", str(tmp_path / "dp"), "--control-plane", closed_port_url(), "--wait", "0.2"]
    env = {**os.environ, "BAML_WORKLOAD_TOKEN": "token"}
    up = "SIGTERM or Ctrl-C to stop" if processes == 1 else f"process {processes - 1} started"
    helper: int | None = None
    with subprocess.Popen(
        [sys.executable, "-c", code, *args, "--processes", str(processes)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:  # ends at EOF if the process dies first
            if up in line:
                if processes > 1:
                    helper = int(line.rsplit("(pid ", 1)[1].split(")")[0])
                break
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    counts = json.loads(out)
    assert counts["messages"] == 0 and counts.get("process_restarts", 0) == 0
    if processes > 1:
        assert helper is not None and not Path(f"/proc/{helper}").exists()


def test_cli_errors_exit_with_the_documented_codes(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = ["--data", str(tmp_path / "typo"), "--control-plane", closed_port_url()]
    no_data = runner.invoke(projector_command, [*missing, "--token", "t", "--once"])
    assert no_data.exit_code == 2 and "does not exist" in no_data.output, no_data.output
    assert not (tmp_path / "typo").exists()  # a typo no longer starts an empty data plane
    (tmp_path / "dp").mkdir()
    base = ["--data", str(tmp_path / "dp"), "--control-plane", closed_port_url()]
    no_token = runner.invoke(projector_command, [*base, "--once"], env={"BAML_WORKLOAD_TOKEN": ""})
    assert no_token.exit_code == 2 and "BAML_WORKLOAD_TOKEN" in no_token.output
    bad_workers = runner.invoke(projector_command, [*base, "--token", "t", "--workers", "0"])
    assert bad_workers.exit_code == 2
    for wait in ("nan", "-1", "601"):
        bad_wait = runner.invoke(projector_command, [*base, "--token", "t", "--wait", wait])
        assert bad_wait.exit_code == 2 and "--wait" in bad_wait.output, bad_wait.output
    (tmp_path / "dp" / "buckets").write_text("a file where the buckets go")
    args = [*base, "--token", "t"]
    unavailable = runner.invoke(projector_command, [*args, "--once"])
    assert unavailable.exit_code == 4, unavailable.output
    assert "Example" in (projector_command.help or "")


def test_sweep_hook_sweeps_every_scope_and_reports_a_failed_one(
    local: Projector, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = Scope("tn_other", "prj_other", "env_other")
    calls: list[tuple[Scope, float]] = []

    def sweep(store: Any, scope: Scope, control: Any, private: Any, **kw: Any) -> Any:
        assert (store, control) == (local.store, local.control)
        assert private is local.private_store(scope)
        calls.append((scope, kw["silence_limit_s"]))
        if scope == other:
            raise LanceCommitFailed("conflict (test)")
        return types.SimpleNamespace(swept=("e1",), pending=(), failed=())

    monkeypatch.setattr(maintenance, "sweep", sweep)
    monkeypatch.setattr(maintenance, "discover_scopes", lambda store: [other, SCOPE])
    hook = sweep_hook(local)
    with pytest.raises(MaintenanceIncomplete, match="LanceCommitFailed: conflict") as raised:
        hook()
    assert "tn_other/prj_other/env_other" in str(raised.value)
    limit = local.config.silence_limit_s
    assert calls == [(other, limit), (SCOPE, limit)]  # the failure did not stop the next scope


def test_token_usage_errors_exit_2_before_anything_opens(tmp_path: Path) -> None:
    data = tmp_path / "dataplane"
    data.mkdir()
    base = ["--data", str(data), "--control-plane", "http://127.0.0.1:9", "--once"]
    (tmp_path / "blank.token").write_text("\n")
    cases = [
        ([], {}, "BAML_WORKLOAD_TOKEN_FILE"),
        (["--token", "t", "--token-file", str(tmp_path / "t")], {}, "not both"),
        (["--token-file", str(tmp_path / "missing.token")], {}, "does not exist"),
        ([], {"BAML_WORKLOAD_TOKEN_FILE": str(tmp_path / "blank.token")}, "empty"),
    ]
    for extra, env, says in cases:
        unset: dict[str, str | None] = {
            "BAML_WORKLOAD_TOKEN": None,
            "BAML_WORKLOAD_TOKEN_FILE": None,
        }
        result = CliRunner().invoke(projector_command, [*base, *extra], env={**unset, **env})
        assert result.exit_code == 2, (extra, result.output)
        assert says in result.output, (extra, result.output)
    assert list(data.iterdir()) == []
